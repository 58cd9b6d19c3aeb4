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
	root := repoRoot()
	if lp == "" {
		lp = filepath.Join(root, "bin", "leakpath")
	}
	work, err := os.MkdirTemp("", "leakpath-bench-scope-")
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
	kinds := []string{"pair", "malloc", "inscope"}
	got := map[string]map[string][]float64{"native": {}, "leakpath": {}}
	for i := 0; i < runs; i++ {
		for _, tool := range []string{"native", "leakpath"} {
			argv := []string{bin}
			if tool == "leakpath" {
				argv = append([]string{lp, "run", "--report", os.DevNull, "--"}, argv...)
			}
			out, err := exec.Command(argv[0], argv[1:]...).Output()
			if err != nil {
				return fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 2 {
					continue
				}
				if v, err := strconv.ParseFloat(f[1], 64); err == nil {
					got[tool][f[0]] = append(got[tool][f[0]], v)
				}
			}
		}
	}
	names := map[string]string{"pair": "scope begin + end", "malloc": "malloc + free", "inscope": "malloc + free inside a scope"}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "per iteration\tnative\tleakpath\t\n")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t%.1f ns\t%.1f ns\t\n", names[k], medianOf(got["native"][k]), medianOf(got["leakpath"][k]))
	}
	tw.Flush()
	fmt.Printf("medians of %d runs of 2,000,000 iterations each, the empty loop subtracted (bench/workloads/scopeloop.c, -O2)\n", runs)
	return nil
}
