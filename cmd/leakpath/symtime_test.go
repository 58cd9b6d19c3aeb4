package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
)

// TestSymbolizeWholeRun symbolizes every distinct frame of every stack of
// a python3 run (not only the leaks') and logs how long it took. libc's
// frames, which have debug information (libc6-dbg), must nearly all get
// a source line.
func TestSymbolizeWholeRun(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := exec.LookPath(py); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	trace := filepath.Join(t.TempDir(), "py.lpt")
	leakpath(t, []string{"-o", trace}, nil, py, "-c", "import json, decimal, collections; print(len(json.dumps(list(range(1000)))))")
	type frame struct {
		path string
		bid  string
		addr uint64
	}
	var mods []*event.Module
	seen := map[frame]bool{}
	var frames []frame
	eachTraceEvent(t, trace, func(ev *event.Event) {
		if ev.Proc != 0 {
			return
		}
		switch ev.Kind {
		case event.ModuleLoad:
			mods = append(mods, ev.ModuleInfo())
		case event.StackDef:
			for _, a := range ev.Frames() {
				for _, m := range mods {
					if m.Contains(a) {
						f := frame{m.Path, string(m.BuildID), a - m.Bias - 1}
						if !seen[f] {
							seen[f] = true
							frames = append(frames, f)
						}
						break
					}
				}
			}
		}
	})
	s := symbolize.New(symbolize.Options{})
	defer s.Close()
	start := time.Now()
	var libc, libcLines, named int
	for _, f := range frames {
		fs, err := s.Lookup(f.path, []byte(f.bid), f.addr)
		if err != nil {
			continue
		}
		if len(fs) > 0 && fs[len(fs)-1].Function != "" {
			named++
		}
		if strings.HasPrefix(filepath.Base(f.path), "libc.so") {
			libc++
			if len(fs) > 0 && fs[0].Line > 0 {
				libcLines++
			}
		}
	}
	took := time.Since(start)
	t.Logf("symbolized %d distinct frames of a python3 run in %v (%d named); libc: %d of %d with a source line",
		len(frames), took, named, libcLines, libc)
	if len(frames) < 100 || libc == 0 || libcLines*100 < libc*95 {
		t.Errorf("%d frames, libc %d with lines of %d", len(frames), libcLines, libc)
	}
}
