package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/sys/clock"
)

// TestTimeResolution: by default a trace keeps times to ~1 ms, and is
// smaller for it than one with exact times; the leaks read back from both
// are the same as the run's; --per-call keeps times exact.
func TestTimeResolution(t *testing.T) {
	bin := fixture(t, "longlived.c")
	dir := t.TempDir()
	shiftOf := func(path string) (uint, int64) {
		t.Helper()
		r, err := tracefile.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return r.TimeShift(), fi.Size()
	}
	coarse, exact := filepath.Join(dir, "coarse.lpt"), filepath.Join(dir, "exact.lpt")
	for _, c := range []struct {
		path  string
		flags []string
	}{{coarse, nil}, {exact, []string{"--time-resolution=0"}}} {
		live := leakpath(t, append([]string{"-o", c.path}, c.flags...), nil, bin)
		off, stderr, code := reportJSON(t, c.path)
		if code != 0 {
			t.Fatalf("report %s: exit %d: %s", c.path, code, stderr)
		}
		a, b := off.Totals, live.report.Totals
		if a.Allocations != b.Allocations || a.Frees != b.Frees || a.LeakedBytes != b.LeakedBytes || a.PeakBytes != b.PeakBytes {
			t.Errorf("%v: offline %+v, live %+v", c.flags, a, b)
		}
		if b.Allocations < 20000 || b.Frees < 10000 {
			t.Errorf("%v: %d allocations, %d frees recorded, want the fixture's 20,000 and 10,000", c.flags, b.Allocations, b.Frees)
		}
	}
	cs, csize := shiftOf(coarse)
	es, esize := shiftOf(exact)
	if want := clock.ShiftAfter(4*time.Millisecond, clock.UseTSC())(); cs != want || want == 0 {
		t.Errorf("default time shift %d, want %d (4 ms)", cs, want)
	}
	if es != 0 {
		t.Errorf("--time-resolution=0: time shift %d", es)
	}
	if csize >= esize {
		t.Errorf("coarse trace %d bytes, exact %d", csize, esize)
	}
	t.Logf("trace: %d bytes with times to 2^%d ticks, %d bytes exact", csize, cs, esize)
	perCall := filepath.Join(dir, "percall.lpt")
	leakpath(t, []string{"-o", perCall, "--by", "function", "--per-call"}, nil, bin)
	if s, _ := shiftOf(perCall); s != 0 {
		t.Errorf("--per-call: time shift %d, want exact times", s)
	}
}
