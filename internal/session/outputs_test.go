package session

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

func TestPathPatterns(t *testing.T) {
	rank := func(n int) *int { return &n }
	for _, c := range []struct {
		in        string
		rank      *int
		want      string // with pid 4242
		needsPID  bool
		wantError string // a part of the error
	}{
		{in: "out.lpt", want: "out.lpt"},
		{in: "", want: ""},
		{in: "out.%p.lpt", want: "out.4242.lpt", needsPID: true},
		{in: "out.%p.lpt", rank: rank(3), want: "out.4242.lpt", needsPID: true},
		{in: "out.%r.lpt", rank: rank(3), want: "out.3.lpt"},
		{in: "out.%r.lpt", rank: rank(0), want: "out.0.lpt"},
		{in: "out.%r.lpt", want: "out.4242.lpt", needsPID: true}, // no rank: the pid
		{in: "%r-%p/%%r%%p.%r", rank: rank(12), want: "12-4242/%r%p.12", needsPID: true},
		{in: "100%%.txt", want: "100%.txt"},
		{in: "%%%%", want: "%%"},
		{in: "a%%b%r", rank: rank(7), want: "a%b7"},
		{in: "out.%x.lpt", wantError: "unknown %x"},
		{in: "out.%P.lpt", wantError: "unknown %P"},
		{in: "out.%", wantError: "lone %"},
		{in: "out.%%%", wantError: "lone %"},
		{in: "é%ré", rank: rank(1), want: "é1é"},
	} {
		p, err := parsePattern("-o", c.in)
		if c.wantError != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantError) || !strings.HasPrefix(err.Error(), "-o ") {
				t.Errorf("%q: error %v, want one with %q", c.in, err, c.wantError)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if got := p.expand(4242, c.rank); got != c.want {
			t.Errorf("%q (rank %v): %q, want %q", c.in, c.rank, got, c.want)
		}
		if got := p.needsPID(c.rank); got != c.needsPID {
			t.Errorf("%q (rank %v): needs the pid %v, want %v", c.in, c.rank, got, c.needsPID)
		}
	}
}

func TestMPIRankFromEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want int // -1: none
	}{
		{map[string]string{}, -1},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "3"}, 3},
		{map[string]string{"PMI_RANK": "5"}, 5},
		{map[string]string{"PMIX_RANK": "6"}, 6},
		{map[string]string{"MV2_COMM_WORLD_RANK": "7"}, 7},
		{map[string]string{"SLURM_PROCID": "8"}, 8},
		{map[string]string{"OMPI_COMM_WORLD_RANK": "0", "PMI_RANK": "5"}, 0},       // Open MPI's first
		{map[string]string{"PMIX_RANK": "2", "SLURM_PROCID": "9"}, 2},              // the launcher's before Slurm's
		{map[string]string{"OMPI_COMM_WORLD_RANK": "x", "PMI_RANK": "4"}, 4},       // not a number: skipped
		{map[string]string{"OMPI_COMM_WORLD_RANK": "-1"}, -1},                      // not a rank
		{map[string]string{"OMPI_COMM_WORLD_RANK": " 11\n"}, 11},                   // spaces around
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "PMI_SIZE": "4"}, -1},      // sizes are no ranks
		{map[string]string{"SLURM_PROCID": "", "MV2_COMM_WORLD_RANK": "1"}, 1},     // empty: unset
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "PMI_RANK": "2"}, 2}, // the world rank, not the local one
	} {
		got := mpiRank(func(k string) string { return c.env[k] })
		switch {
		case c.want < 0 && got != nil:
			t.Errorf("%v: rank %d, want none", c.env, *got)
		case c.want >= 0 && (got == nil || *got != c.want):
			t.Errorf("%v: rank %v, want %d", c.env, got, c.want)
		}
	}
}

// TestReportFilesReused: report files an earlier run left are emptied
// (in the background) by the time the report is to be written, and are
// the files given, not new ones.
func TestReportFilesReused(t *testing.T) {
	dir := t.TempDir()
	jsonPath, textPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.txt")
	for _, p := range []string{jsonPath, textPath} {
		if err := os.WriteFile(p, bytes.Repeat([]byte("an earlier report\n"), 1<<16), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.Stat(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	out, err := newOutputs(&Options{JSON: jsonPath, Report: textPath}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer out.close()
	text, js, err := out.files(4242)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{text, js} {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != 0 {
			t.Errorf("%s: %d bytes when the report is to be written, want 0", f.Name(), st.Size())
		}
	}
	if st, err := js.Stat(); err != nil || !os.SameFile(st, before) {
		t.Errorf("the JSON report file is not the one that was there (%v)", err)
	}
	if _, err := js.WriteString("{}\n"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(jsonPath); err != nil || string(b) != "{}\n" {
		t.Errorf("%s holds %q (%v), want what was written", jsonPath, b, err)
	}
}

// TestTraceFileReused: a trace an earlier run left is emptied in the
// background, and the trace written over it is whole: the same file,
// holding the new events and nothing of the old trace.
func TestTraceFileReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.lpt")
	if err := os.WriteFile(path, bytes.Repeat([]byte("an earlier trace\n"), 1<<16), 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := newOutputs(&Options{Trace: path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer out.close()
	tr, err := out.startTrace(tracefile.Meta{}, tracefile.Options{}, func() uint { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	if tr.emptying == nil {
		t.Fatal("the trace there is not emptied in the background")
	}
	evs := []event.Event{
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{PID: 4242, ParentProc: -1, ExecOf: -1}}},
		{Kind: event.Alloc, Time: 10, Addr: 0x1000, Size: 32, Fn: event.Malloc},
		{Kind: event.Free, Time: 20, Addr: 0x1000, Fn: event.FreeFn},
	}
	if err := tr.Write(evs); err != nil {
		t.Fatal(err)
	}
	if err := tr.finish(true, 4242); err != nil || tr.failed != nil {
		t.Fatalf("finish: %v, %v", err, tr.failed)
	}
	after, err := os.Stat(path)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the trace is not written to the file that was there (%v)", err)
	}
	var got []event.Event
	e2e.EachTraceEvent(t, path, func(ev *event.Event) { got = append(got, *ev) })
	if len(got) != len(evs) || got[1].Addr != 0x1000 || got[2].Kind != event.Free {
		t.Errorf("the trace holds %d events (%+v), want the %d written", len(got), got, len(evs))
	}
}
