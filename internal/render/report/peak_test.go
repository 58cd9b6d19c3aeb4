package report

import (
	stdbytes "bytes"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestPeakNoteOnOldTraces: the summary says what its peak leaves out only
// for a trace whose folded pairs came without pending highs (one recorded
// before the agent sent them); with them, the peak counts the pending
// bytes and says nothing.
func TestPeakNoteOnOldTraces(t *testing.T) {
	for _, highs := range []bool{false, true} {
		s := heap.NewSession()
		evs := []event.Event{
			{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1, PID: 5}}},
			{Kind: event.Alloc, Fn: event.Malloc, Time: 10, Addr: 0x1000, Size: 100, Thread: 1},
			{Kind: event.Agg, Fn: event.Malloc, Time: 20, Thread: 1, Aux: uint64(event.FreeFn) << 32, Addr: 3, Size: 96},
		}
		if highs {
			evs = append(evs, event.Event{Kind: event.Pending, Time: 15, Size: 64, Thread: 1})
		}
		s.Apply(evs)
		s.Finish()
		var out stdbytes.Buffer
		if err := New(s, 0, Options{TicksPerSec: 1e9}).Generate(&out, "text"); err != nil {
			t.Fatal(err)
		}
		note := strings.Contains(out.String(), "(not counting 3 short-lived blocks folded)")
		peak := "peak 100 B"
		if highs {
			peak = "peak 164 B"
		}
		if note == highs || !strings.Contains(out.String(), peak) {
			t.Errorf("pending highs %v: want %q and the note %v:\n%s", highs, peak, !highs, out.String())
		}
	}
}
