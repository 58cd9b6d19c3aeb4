package rootcause

import (
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestEndDepth: the end point is the innermost function the allocation
// stack shares with every free stack (stacks innermost first, as return
// addresses).
func TestEndDepth(t *testing.T) {
	// main -> loop -> funcB -> funcA -> malloc: alloc stack
	// [in funcA, in funcB (call funcA), in loop, in main].
	alloc := []uint64{0xa1, 0xb1, 0x21, 0x11}
	for _, c := range []struct {
		name  string
		frees [][]uint64
		want  int
	}{
		{"freed in funcB (another call site in it)", [][]uint64{{0xb2, 0x21, 0x11}}, 1},
		{"freed by sub1 called from funcB", [][]uint64{{0xc1, 0xb3, 0x21, 0x11}}, 1},
		{"freed in funcA itself", [][]uint64{{0xa2, 0xb1, 0x21, 0x11}}, 0},
		{"freed in loop, and in funcB", [][]uint64{{0x22, 0x11}, {0xb2, 0x21, 0x11}}, 2},
		{"freed by another thread", [][]uint64{{0xd1, 0x99}}, -1},
		{"no free stack", nil, 0},
	} {
		if got := endDepth(alloc, c.frees); got != c.want {
			t.Errorf("%s: end depth %d, want %d", c.name, got, c.want)
		}
	}
}

// TestWindowFate: a path is labelled by what became of its block: freed
// in its window or after it (F), live at the end or long after (E), not
// known yet while its block is young or its free may be on its way; a
// newer block at the same address means the path's was freed.
func TestWindowFate(t *testing.T) {
	s := heap.NewSession()
	ev := func(kind event.Kind, tm, addr uint64) event.Event {
		e := event.Event{Kind: kind, Fn: event.Malloc, Time: tm, Addr: addr, Size: 16, Thread: 1}
		if kind == event.Free {
			e.Fn = event.FreeFn
		}
		return e
	}
	s.Apply([]event.Event{
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1}}},
		ev(event.Alloc, 10, 0x1000), // freed later
		ev(event.Alloc, 20, 0x2000), // never freed
		ev(event.Alloc, 30, 0x3000), // freed, then a new block there
		ev(event.Free, 40, 0x1000),
		ev(event.Free, 50, 0x3000),
		ev(event.Alloc, 60, 0x3000),
		ev(event.Alloc, 70, 0x4000), // after the model's last news
	})
	p := s.Procs[0]
	old, young := time.Now().Add(-time.Hour), time.Now()
	settle := time.Second
	for _, c := range []struct {
		name  string
		w     window
		ended bool
		want  steptrace.Outcome
	}{
		{"freed in its window", window{outcome: steptrace.Freed, blk: eBlock{addr: 0x2000, ticks: 20, wall: young}}, false, steptrace.Freed},
		{"freed after its window", window{outcome: steptrace.Next, blk: eBlock{addr: 0x1000, ticks: 10, wall: young}}, false, steptrace.Freed},
		{"a newer block at its address", window{outcome: steptrace.EndReached, blk: eBlock{addr: 0x3000, ticks: 30, wall: young}}, false, steptrace.Freed},
		{"live and young", window{outcome: steptrace.Budget, blk: eBlock{addr: 0x2000, ticks: 20, wall: young}}, false, 0},
		{"live and old", window{outcome: steptrace.Budget, blk: eBlock{addr: 0x2000, ticks: 20, wall: old}}, false, steptrace.EndReached},
		{"live at the end", window{outcome: steptrace.Next, blk: eBlock{addr: 0x2000, ticks: 20, wall: young}}, true, steptrace.EndReached},
		{"not in the model yet", window{outcome: steptrace.Next, blk: eBlock{addr: 0x5000, ticks: 80, wall: old}}, false, 0},
	} {
		if got := c.w.fate(p, c.ended, settle); got != c.want {
			t.Errorf("%s: fate %v, want %v", c.name, got, c.want)
		}
	}
}
