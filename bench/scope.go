package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
)

// scopeBench measures what a scope costs (bench/workloads/scopeloop.c):
// a begin/end pair, malloc+free, and malloc+free inside a scope, in
// nanoseconds per iteration, without leakpath and under it.
func scopeBench(runs int, lp string) error {
	root, lp, work, err := benchDir(lp, "scope")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "scopeloop")
	if b, err := exec.Command("cc", "-O2", "-g", "-I", filepath.Join(root, "agent", "include"), "-o", bin,
		filepath.Join(root, "bench", "workloads", "scopeloop.c")).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling scopeloop: %v\n%s", err, b)
	}
	fmt.Fprintln(os.Stderr, "bench: scopes ...")
	// Three ways: native (thread CPU time); under leakpath while the
	// collector keeps up (a warm ring big enough for the timed loop:
	// thread CPU time, what the program pays); and back to back, at the
	// collector's pace (wall time). The main thread's ring is four times
	// --ring-size: 4 MiB, which the untimed loops before each timed one
	// fill twice (a ring larger than they fill leaves the timed loop
	// touching its pages for the first time).
	type config struct {
		name string
		argv []string
		wall bool
	}
	configs := []config{
		{"native", []string{bin, "2000000"}, false},
		{"leakpath", []string{lp, "run", "--ring-size", "1024", "--report", os.DevNull, "--", bin, "20000", "warm"}, false},
		{"back to back", []string{lp, "run", "--report", os.DevNull, "--", bin, "2000000"}, true},
	}
	got := map[string]map[string][]float64{}
	for i := 0; i < runs; i++ {
		for _, c := range configs {
			out, err := exec.Command(c.argv[0], c.argv[1:]...).Output()
			if err != nil {
				return fmt.Errorf("%s: %v", strings.Join(c.argv, " "), err)
			}
			if got[c.name] == nil {
				got[c.name] = map[string][]float64{}
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 {
					continue
				}
				col := f[1]
				if c.wall {
					col = f[2]
				}
				if v, err := strconv.ParseFloat(col, 64); err == nil {
					got[c.name][f[0]] = append(got[c.name][f[0]], v)
				}
			}
		}
	}
	names := map[string]string{"pair": "scope begin + end", "malloc": "malloc + free", "inscope": "malloc + free inside a scope"}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "per iteration\tnative\tleakpath\tback to back\t\n")
	for _, k := range []string{"pair", "malloc", "inscope"} {
		fmt.Fprintf(tw, "%s\t%.1f ns\t%.1f ns\t%.1f ns\t\n", names[k], medianOf(got["native"][k]), medianOf(got["leakpath"][k]),
			medianOf(got["back to back"][k]))
	}
	tw.Flush()
	fmt.Printf("medians of %d runs (bench/workloads/scopeloop.c, -O2), the empty loop subtracted; native and leakpath: the thread's CPU time,\n"+
		"leakpath while its collector keeps up (20,000 iterations into a warm ring); back to back: 2,000,000 iterations at the collector's pace, wall time.\n", runs)
	return nil
}
