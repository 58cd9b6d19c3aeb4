package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/event"
)

func attachedStart() event.Event {
	return event.Event{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1, Attached: true}}}
}

func realloc(t uint64, old, addr, size uint64, thread int32) event.Event {
	return event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: t, Addr: old, Addr2: addr, Size: size, Thread: thread}
}

// TestAttachedUnknownBlocks: after an attach, frees and reallocs of
// blocks from before are counted apart, never errors; a second free of a
// block freed since the attach is still a double free; a free from before
// whose address the allocator hands out again is not mistaken for the new
// block's. Without the attach the same frees are errors.
func TestAttachedUnknownBlocks(t *testing.T) {
	evs := []event.Event{
		free(10, 0x1000, 1),                // from before the attach
		realloc(20, 0x2000, 0x3000, 64, 1), // from before, moved
		alloc(30, 0x1000, 8, 2),            // 0x1000 handed out again
		free(40, 0x1000, 2),                // ... and freed
		alloc(50, 0x4000, 16, 1),           // live at the end
		free(60, 0x5000, 1),                // from before
		free(70, 0x3000, 1),                // the realloc's block
		free(80, 0x3000, 1),                // twice: a real double free
	}
	s := NewSession()
	s.Apply(append([]event.Event{attachedStart()}, evs...))
	s.Finish()
	p := s.Procs[0]
	if p.Totals.UnknownFrees != 3 {
		t.Errorf("unknown frees %d, want 3 (0x1000, 0x2000, 0x5000)", p.Totals.UnknownFrees)
	}
	if len(p.Errors) != 1 || p.Errors[0].Kind != DoubleFree || p.Errors[0].Addr != 0x3000 {
		t.Errorf("errors %+v, want one double free of 0x3000", p.Errors)
	}
	if p.Totals.LiveBlocks != 1 || p.Totals.LiveBytes != 16 || p.Totals.Frees != 2 {
		t.Errorf("live %d blocks %d bytes, %d frees; want 1 block of 16 bytes, 2 frees", p.Totals.LiveBlocks, p.Totals.LiveBytes, p.Totals.Frees)
	}

	s = NewSession()
	s.Apply(append([]event.Event{start()}, evs...))
	s.Finish()
	if p := s.Procs[0]; p.Totals.UnknownFrees != 0 || len(p.Errors) < 3 {
		t.Errorf("without attach: unknown frees %d, errors %+v; want 0 and the frees reported", p.Totals.UnknownFrees, p.Errors)
	}
}
