package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
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

// lateAlloc is an allocation the agent kept pending: own time own, recorded
// at t.
func lateAlloc(t, own, addr, size uint64, thread int32) event.Event {
	ev := alloc(t, addr, size, thread)
	ev.Addr2 = own
	return ev
}

// TestLateAllocOrder: a pending allocation's own time may be a coarse
// clock's tick early, even earlier than a free of the same address that
// happened before it; frees are ordered against the time it was recorded.
// A free from before the attach stays unknown; a free that reached the
// collector before the allocation it released (written after the record)
// still releases it; a block's late free out of a replaced one's limbo
// goes to the old block.
func TestLateAllocOrder(t *testing.T) {
	s := NewSession()
	s.Apply([]event.Event{
		attachedStart(),
		free(100, 0x1000, 2),               // a block from before the attach
		lateAlloc(500, 90, 0x1000, 32, 1),  // handed out again; own time a tick early
		free(300, 0x2000, 2),               // arrived before its allocation ...
		lateAlloc(250, 50, 0x2000, 48, 1),  // ... recorded at 250, before the free
		alloc(600, 0x3000, 8, 1),           // an old block at 0x3000
		lateAlloc(900, 640, 0x3000, 24, 3), // a new one, its old one's free on its way
		free(700, 0x3000, 1),               // the old one's free: before the record
	})
	s.Finish()
	p := s.Procs[0]
	if p.Totals.UnknownFrees != 1 {
		t.Errorf("unknown frees %d, want 1 (0x1000 from before)", p.Totals.UnknownFrees)
	}
	if len(p.Errors) != 0 {
		t.Errorf("errors %+v, want none", p.Errors)
	}
	if p.Totals.LiveBlocks != 2 || p.Totals.LiveBytes != 32+24 {
		t.Errorf("live %d blocks %d bytes, want 0x1000 (32) and the new 0x3000 (24)", p.Totals.LiveBlocks, p.Totals.LiveBytes)
	}
	if b, ok := p.LiveBlock(0x1000); !ok || b.Time != 90 {
		t.Errorf("0x1000: %+v %v, want live with its own time 90", b, ok)
	}
}
