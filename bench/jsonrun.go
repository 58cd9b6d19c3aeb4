package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"
)

// jsonSource is a small C++ file: cc1plus compiling it frees almost
// nothing, so its report lists thousands of sites (most reachable).
const jsonSource = `#include <iostream>
#include <map>
#include <string>
#include <vector>
int main() {
	std::map<std::string, std::vector<int>> m;
	m["a"].push_back(1);
	std::cout << m.size() << "\n";
}
`

// jsonBench measures what --json adds to `leakpath run` of g++ compiling
// a small file (cc1plus), the runs with and without it alternating.
func jsonBench(runs int, lp string) error {
	_, lp, work, err := benchDir(lp, "json")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	gxx, err := exec.LookPath("g++")
	if err != nil {
		fmt.Println("skip: --json on cc1plus (g++ not installed)")
		return nil
	}
	src := filepath.Join(work, "small.cc")
	if err := os.WriteFile(src, []byte(jsonSource), 0o600); err != nil {
		return err
	}
	obj := filepath.Join(work, "small.o")
	fmt.Fprintln(os.Stderr, "bench: --json on cc1plus ...")
	base := []string{lp, "run", "--report", os.DevNull}
	prog := []string{"--", gxx, "-c", src, "-o", obj}
	plain := append(append([]string(nil), base...), prog...)
	withJSON := append(append(append([]string(nil), base...), "--json", filepath.Join(work, "r.json")), prog...)
	var without, with []measure
	for i := 0; i < runs; i++ {
		without = append(without, measureCmd(plain, "", []string{"leakpath"}))
		with = append(with, measureCmd(withJSON, "", []string{"leakpath"}))
	}
	for _, ms := range [][]measure{without, with} {
		for _, m := range ms {
			if m.failed != "" {
				return fmt.Errorf("--json on cc1plus: a run failed: %s", m.failed)
			}
		}
	}
	wall := func(m measure) float64 { return m.wall.Seconds() }
	cpu := func(m measure) float64 { return m.cpu.Seconds() }
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "leakpath run -- g++ -c small.cc\twall\tCPU\t\n")
	fmt.Fprintf(tw, "text report\t%.3f s\t%.3f s\t\n", median(without, wall), median(without, cpu))
	fmt.Fprintf(tw, "and --json\t%.3f s\t%.3f s\t\n", median(with, wall), median(with, cpu))
	fmt.Fprintf(tw, "ratio\t%.2f\t%.2f\t\n", median(with, wall)/median(without, wall), median(with, cpu)/median(without, cpu))
	tw.Flush()
	fmt.Printf("medians of %d alternating runs; CPU: the whole process tree (g++, cc1plus, leakpath)\n", runs)
	return nil
}
