package heap

import (
	"slices"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func stackDef(id uint32, frames ...uint64) event.Event {
	return event.Event{Kind: event.StackDef, Stack: id, X: &event.Extra{Frames: frames}}
}

func refree(t uint64, addr uint64, stack uint32, ra uint64) event.Event {
	return event.Event{Kind: event.Refree, Fn: event.Malloc, Time: t, Addr: addr, Stack: stack, Addr2: ra,
		Aux: uint64(event.FreeFn), Thread: 1}
}

// TestRefree: the agent's word that a release is of a block it folded
// makes that release a double free, with the folded pair's allocation and
// first free's call site, when no block is live there; with a live block
// there (allocated again and recorded since) the release is proper.
func TestRefree(t *testing.T) {
	realloc := event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: 21, Addr: 0x3000, Addr2: 0x4000, Size: 64, Thread: 1}
	s := NewSession()
	s.Apply([]event.Event{start(), stackDef(5, 0x401000, 0x402000),
		refree(10, 0x1000, 5, 0x401100), free(11, 0x1000, 1), // folded, freed again
		alloc(12, 0x2000, 8, 1), refree(13, 0x2000, 5, 0x401100), free(14, 0x2000, 1), // live: proper
		refree(20, 0x3000, 5, 0x401200), realloc, // folded, realloc'ed
	})
	s.Finish()
	p := s.Procs[0]
	if len(p.Errors) != 2 {
		t.Fatalf("errors %+v, want two", p.Errors)
	}
	// A free of an unknown address waits for its allocation until the end:
	// the realloc's error comes first.
	for i, fn := range []event.Fn{event.FreeFn, event.ReallocFn} {
		k := slices.IndexFunc(p.Errors, func(e Error) bool { return e.Fn == fn })
		if k < 0 {
			t.Errorf("no error of %v: %+v", fn, p.Errors)
			continue
		}
		e := p.Errors[k]
		if e.Kind != DoubleFree || e.Fn != fn || e.AllocFn != event.Malloc || !e.FreeCallSite ||
			e.AllocStack == 0 || e.FreeStack == 0 {
			t.Errorf("error %d: %+v, want a double free by %v of a malloc'd block, both stacks, the free's a call site", i, e, fn)
			continue
		}
		if got := p.Stacks.Frames(e.AllocStack); !slices.Equal(got, []uint64{0x401000, 0x402000}) {
			t.Errorf("error %d: allocated at %#x", i, got)
		}
		if got, want := p.Stacks.Frames(e.FreeStack), []uint64{0x401100 + uint64(i)*0x100}; !slices.Equal(got, want) {
			t.Errorf("error %d: first freed at %#x, want %#x", i, got, want)
		}
	}
	if p.Totals.Frees != 1 || p.Totals.LiveBlocks != 1 {
		t.Errorf("%d frees, %d live blocks; want 1 (the live block's), 1 (the realloc's)", p.Totals.Frees, p.Totals.LiveBlocks)
	}
}

// TestIgnoreAndRootRegions: a block the program says is no leak is found
// by its start or an address inside it, and forgotten when freed; an
// address in no block is an anomaly. Root regions count registrations.
func TestIgnoreAndRootRegions(t *testing.T) {
	ign := func(addr uint64) event.Event { return event.Event{Kind: event.Ignore, Time: 1, Addr: addr, Thread: 1} }
	reg := func(addr, size uint64, on bool) event.Event {
		ev := event.Event{Kind: event.RootRegion, Time: 1, Addr: addr, Size: size, Thread: 1}
		if on {
			ev.Aux = 1
		}
		return ev
	}
	s := NewSession()
	s.Apply([]event.Event{start(), alloc(1, 0x1000, 32, 1), alloc(2, 0x2000, 16, 1), alloc(3, 0x3000, 16, 1),
		ign(0x1010), ign(0x2000), ign(0x9000), free(4, 0x2000, 1),
		reg(0x8000, 64, true), reg(0x8000, 64, true), reg(0x9000, 8, true), reg(0x8000, 64, false)})
	p := s.Procs[0]
	if got := p.IgnoredBlocks(); !slices.Equal(got, []uint64{0x1000}) {
		t.Errorf("ignored blocks %#x, want 0x1000 (0x2000 was freed)", got)
	}
	if got := p.RootRegions(); !slices.Equal(got, [][2]uint64{{0x8000, 64}, {0x9000, 8}}) {
		t.Errorf("root regions %#x, want {0x8000 64} (registered twice, unregistered once), {0x9000 8}", got)
	}
	if p.Anomalies != 1 {
		t.Errorf("%d anomalies, want 1 (ignoring an address in no block)", p.Anomalies)
	}
	// A failed realloc keeps the mark; one that moves the block does not.
	s.Apply([]event.Event{
		{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: 5, Addr: 0x1000, Thread: 1},
		{Kind: event.Realloc, Fn: event.ReallocFn, Time: 6, Addr: 0x1000, Size: 1 << 40, Thread: 1}})
	if got := p.IgnoredBlocks(); !slices.Equal(got, []uint64{0x1000}) {
		t.Errorf("after a failed realloc, ignored blocks %#x, want 0x1000", got)
	}
	s.Apply([]event.Event{
		{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: 7, Addr: 0x1000, Thread: 1},
		{Kind: event.Realloc, Fn: event.ReallocFn, Time: 8, Addr: 0x1000, Addr2: 0x5000, Size: 64, Thread: 1}})
	if got := p.IgnoredBlocks(); len(got) != 0 {
		t.Errorf("after a realloc that moved it, ignored blocks %#x, want none", got)
	}
	s.Apply([]event.Event{reg(0x8000, 64, false), reg(0x8000, 64, false)})
	if got := p.RootRegions(); !slices.Equal(got, [][2]uint64{{0x9000, 8}}) || p.Anomalies != 2 {
		t.Errorf("root regions %#x, %d anomalies; want {0x9000 8}, 2 (one more unregistering than registering)", got, p.Anomalies)
	}
}

// TestUnfinishedRealloc: a realloc of a freed block that never returned
// (the C library aborted inside it) is a double free at the image's end;
// one of a live block that never returned is no error.
func TestUnfinishedRealloc(t *testing.T) {
	begin := func(tm, addr uint64, thread int32) event.Event {
		return event.Event{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: tm, Addr: addr, Thread: thread}
	}
	s := NewSession()
	s.Apply([]event.Event{start(), alloc(1, 0x1000, 8, 1), free(2, 0x1000, 1), begin(3, 0x1000, 1),
		alloc(4, 0x2000, 8, 2), begin(5, 0x2000, 2)})
	s.Finish()
	p := s.Procs[0]
	if len(p.Errors) != 1 || p.Errors[0].Kind != DoubleFree || p.Errors[0].Fn != event.ReallocFn || p.Errors[0].Addr != 0x1000 {
		t.Errorf("errors %+v, want one double free by realloc of 0x1000", p.Errors)
	}
}
