package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// abBench runs `A run -o TRACE --report /dev/null -- argv...` and the same
// with B alternately, runs times each, and prints the medians and quartiles
// of their wall times: how a change of leakpath's fixed costs (a few
// milliseconds) is measured on a machine whose speed drifts by more (the
// two share its moods run by run). Each binary has a DWARF cache directory
// of its own (frame cache files are keyed by the binary that wrote them),
// warmed by a first run that is not counted.
func abBench(runs int, a, b string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("-ab: no program given (go run ./bench -ab OLD [-leakpath NEW] [-runs N] -- PROGRAM [ARGS...])")
	}
	_, b, work, err := benchDir(b, "ab")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bins := [2]string{a, b}
	var walls [2][]float64
	one := func(i int) (float64, error) {
		cmd := exec.Command(bins[i], append([]string{"run", "-o", filepath.Join(work, "t.lpt"), "--report", os.DevNull, "--"}, argv...)...)
		cmd.Env = append(os.Environ(), "LEAKPATH_CACHE_DIR="+filepath.Join(work, fmt.Sprint("cache", i)))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s: %v\n%s", bins[i], err, out)
		}
		return float64(time.Since(start).Microseconds()) / 1000, nil
	}
	for i := range bins {
		if _, err := one(i); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "bench: A/B, %d runs each ...\n", runs)
	for r := 0; r < runs; r++ {
		for i := range bins {
			ms, err := one(i)
			if err != nil {
				return err
			}
			walls[i] = append(walls[i], ms)
		}
	}
	for i, name := range []string{"A", "B"} {
		fmt.Printf("%s %s: median %.2f ms (quartiles %.2f, %.2f)\n", name, bins[i], medianOf(walls[i]), quantile(walls[i], 0.25), quantile(walls[i], 0.75))
	}
	fmt.Printf("B - A: %+.2f ms (medians of %d alternating runs of %v)\n", medianOf(walls[1])-medianOf(walls[0]), runs, argv)
	return nil
}
