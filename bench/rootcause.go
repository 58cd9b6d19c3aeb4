package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// rootCauseBench measures --root-cause on the fixtures of
// testdata/rootcause: the run with and without it, when the root cause
// was found, and what the windows cost.
func rootCauseBench(runs int, lp string) error {
	root, lp, work, err := benchDir(lp, "rc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(root, "testdata", "rootcause")
	lib := filepath.Join(work, "librc.so")
	if b, err := exec.Command("cc", "-g", "-O0", "-shared", "-fPIC", "-o", lib, filepath.Join(src, "libleak_lib.c")).CombinedOutput(); err != nil {
		return fmt.Errorf("compiling libleak_lib.c: %v\n%s", err, b)
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "root cause\tnative\tleakpath\t--root-cause\tcost\tfound after\tpaths\tstops/path\tus/stop\tstatus\t\n")
	for _, name := range []string{"seed.c", "nested.c", "twobranches.c", "loopcount.c", "crossthread.c", "earlyreturn.cc", "libleak_app.c", "signals.c"} {
		bin := filepath.Join(work, strings.TrimSuffix(strings.TrimSuffix(name, ".c"), ".cc"))
		cc, args := "cc", []string{"-g", "-O0", "-pthread", "-o", bin, filepath.Join(src, name)}
		if strings.HasSuffix(name, ".cc") {
			cc = "c++"
		}
		if name == "libleak_app.c" {
			args = append(args, "-L"+work, "-lrc", "-Wl,-rpath,"+work)
		}
		if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("compiling %s: %v\n%s", name, err, b)
		}
		fmt.Fprintf(os.Stderr, "bench: root cause, %s ...\n", name)
		var nat, plain, rc []measure
		var found, paths, stops, window []float64
		status := "-"
		for i := 0; i < runs; i++ {
			nat = append(nat, measureCmd([]string{bin}, "", nil))
			plain = append(plain, measureCmd([]string{lp, "run", "--report", os.DevNull, "--", bin}, "", nil))
			js := filepath.Join(work, "r.json")
			rc = append(rc, measureCmd([]string{lp, "run", "--root-cause", "--json", js, "--report", os.DevNull, "--", bin}, "", nil))
			if r, err := rootCauseFigures(js); err == nil {
				status = r.Status
				found = append(found, r.FoundAfter)
				paths = append(paths, float64(r.Traced))
				stops = append(stops, float64(r.Stops))
				window = append(window, r.WindowSeconds)
			}
		}
		wall := func(ms []measure) float64 { return median(ms, func(m measure) float64 { return m.wall.Seconds() }) }
		perPath, perStop := 0.0, 0.0
		if p := medianOf(paths); p > 0 {
			perPath = medianOf(stops) / p
		}
		if s := medianOf(stops); s > 0 {
			perStop = medianOf(window) / s * 1e6
		}
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%.2f s\t%+.1f %%\t%.2f s\t%.0f\t%.0f\t%.0f\t%s\t\n", name, wall(nat), wall(plain), wall(rc),
			(wall(rc)/wall(plain)-1)*100, medianOf(found), medianOf(paths), perPath, perStop, status)
	}
	tw.Flush()
	fmt.Printf("medians of %d runs; each fixture repeats its work 3,000 times 1 ms apart; cost: --root-cause over leakpath without it;\n"+
		"found after: when the last path of the site was recorded; stops: ptrace stops of the traced thread.\n", runs)
	if hw, why := ptrace.HardwareBreakpoints(); hw {
		fmt.Println("paths recorded with hardware breakpoints (two stops per basic block, boring calls run through).")
	} else if ptrace.SoftBreakpoints() {
		fmt.Printf("paths recorded on software breakpoints (int3; a stop per conditional branch, call and return): %s.\n", why)
	} else {
		fmt.Printf("paths recorded a step at a time, boring calls and signal handlers too: %s.\n", why)
	}
	return nil
}

type rcFigures struct {
	Status        string  `json:"status"`
	Traced        int     `json:"traced_runs"`
	Stops         int     `json:"stops"`
	WindowSeconds float64 `json:"window_seconds"`
	FoundAfter    float64 `json:"found_after_seconds"`
}

// rootCauseFigures reads the first root cause of a JSON report.
func rootCauseFigures(path string) (*rcFigures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r struct {
		Leaks []struct {
			RootCause *rcFigures `json:"root_cause"`
		} `json:"leaks"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	for _, l := range r.Leaks {
		if l.RootCause != nil {
			return l.RootCause, nil
		}
	}
	return nil, fmt.Errorf("%s: no root cause", path)
}
