package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// scanBench measures the exit scan on bigheap (a heap of MB megabytes in
// 100-byte blocks, all reachable but every 100th): the program's pause
// while leakpath scans, the whole run with and without the scan, and
// memcheck's whole run with --leak-check=full on the same program.
func scanBench(runs int, lp, sizes string) error {
	root, lp, work, err := benchDir(lp, "scan")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "bigheap")
	if b, err := exec.Command("cc", "-O2", "-o", bin, filepath.Join(root, "bench", "workloads", "bigheap.c")).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling bigheap: %v\n%s", err, b)
	}
	haveValgrind := lookup("valgrind")
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "exit scan\tnative\tleakpath --scan=false\tleakpath\tpause\tscan MB/s\tscan cost\tmemcheck\tscan cost / memcheck\t\n")
	for _, mb := range strings.Split(sizes, ",") {
		mb = strings.TrimSpace(mb)
		fmt.Fprintf(os.Stderr, "bench: exit scan, %s MB ...\n", mb)
		argv := []string{bin, mb}
		var nat, noscan, scan, mc []measure
		var pauses, rates []float64
		for i := 0; i < runs; i++ {
			nat = append(nat, measureCmd(argv, "", nil))
			noscan = append(noscan, measureCmd(append([]string{lp, "run", "--scan=false", "--report", os.DevNull, "--"}, argv...), "", nil))
			js := filepath.Join(work, "r.json")
			scan = append(scan, measureCmd(append([]string{lp, "run", "--json", js, "--report", os.DevNull, "--"}, argv...), "", nil))
			if p, heap, err := scanFigures(js); err == nil {
				pauses = append(pauses, p)
				rates = append(rates, heap/1e6/p)
			}
			if haveValgrind && i < 3 {
				mc = append(mc, measureCmd(append([]string{"valgrind", "-q", "--leak-check=full", "--log-file=" + os.DevNull}, argv...), "", nil))
			}
		}
		wall := func(ms []measure) float64 { return median(ms, func(m measure) float64 { return m.wall.Seconds() }) }
		cost := wall(scan) - wall(noscan)
		mcCols := "-\t-"
		if len(mc) > 0 {
			mcCols = fmt.Sprintf("%.2f s\t%.2f", wall(mc), cost/wall(mc))
		}
		fmt.Fprintf(tw, "bigheap %s MB\t%.2f s\t%.2f s\t%.2f s\t%.2f s\t%.0f\t%.2f s\t%s\t\n",
			mb, wall(nat), wall(noscan), wall(scan), medianOf(pauses), medianOf(rates), cost, mcCols)
	}
	tw.Flush()
	fmt.Printf("medians of %d runs (memcheck: of up to 3); pause: the program held while leakpath scans (from the report's scan.pause_seconds);\n"+
		"scan cost: leakpath's run minus its run with --scan=false; memcheck: its whole run with --leak-check=full.\n", runs)
	return nil
}

// scanFigures reads the pause and the heap bytes scanned from a JSON report.
func scanFigures(path string) (pause, heap float64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	var r struct {
		Scan *struct {
			PauseSeconds float64 `json:"pause_seconds"`
			HeapBytes    float64 `json:"heap_bytes"`
		} `json:"scan"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Scan == nil || r.Scan.PauseSeconds <= 0 {
		return 0, 0, fmt.Errorf("%s: no scan figures (%v)", path, err)
	}
	return r.Scan.PauseSeconds, r.Scan.HeapBytes, nil
}
