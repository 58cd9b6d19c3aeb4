package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func start() event.Event {
	return event.Event{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1}}}
}

func alloc(t uint64, addr, size uint64, thread int32) event.Event {
	return event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: t, Addr: addr, Size: size, Thread: thread}
}

func free(t uint64, addr uint64, thread int32) event.Event {
	return event.Event{Kind: event.Free, Fn: event.FreeFn, Time: t, Addr: addr, Thread: thread}
}

// TestLateEventsAcrossThreads: thread 1 allocates X at 10 and again at 30;
// thread 2 frees the first X at 20. In whatever order the threads' events
// interleave on arrival (each thread's own stay in order), one block of
// 30's size is live at the end and nothing is improper.
func TestLateEventsAcrossThreads(t *testing.T) {
	a1, f2, a3 := alloc(10, 0x1000, 8, 1), free(20, 0x1000, 2), alloc(30, 0x1000, 16, 1)
	for name, order := range map[string][]event.Event{
		"in order":   {a1, f2, a3},
		"free late":  {a1, a3, f2},
		"free first": {f2, a1, a3},
	} {
		s := NewSession()
		s.Apply(append([]event.Event{start()}, order...))
		s.Finish()
		p := s.Procs[0]
		if p.Totals.LiveBlocks != 1 || p.Totals.LiveBytes != 16 || p.Totals.Frees != 1 || len(p.Errors) != 0 {
			t.Errorf("%s: live %d blocks %d bytes, %d frees, errors %+v; want 1 block of 16 bytes, 1 free, no error",
				name, p.Totals.LiveBlocks, p.Totals.LiveBytes, p.Totals.Frees, p.Errors)
		}
	}
}

// TestImproperUses: invalid, double and mismatched frees, each with its
// kind, counted once per distinct stack.
func TestImproperUses(t *testing.T) {
	s := NewSession()
	newd := event.Event{Kind: event.Alloc, Fn: event.New, Time: 5, Addr: 0x3000, Size: 4, Thread: 1}
	s.Apply([]event.Event{start(),
		alloc(1, 0x1000, 8, 1), free(2, 0x1000, 1), free(3, 0x1000, 1), // double
		free(4, 0x2000, 1),       // never allocated
		newd, free(6, 0x3000, 1), // free of new
	})
	s.Finish()
	kinds := map[ErrorKind]int{}
	for _, e := range s.Procs[0].Errors {
		kinds[e.Kind] += int(e.Count)
	}
	if kinds[DoubleFree] != 1 || kinds[InvalidFree] != 1 || kinds[MismatchedFree] != 1 || len(kinds) != 3 {
		t.Errorf("errors %v, want one double, one invalid, one mismatched free", kinds)
	}
}

// TestReallocOfNewMismatched: realloc releases a block new[] or new made
// as a mismatched free, whether it moves it or frees it (realloc(p, 0),
// which memcheck reports alike); realloc(p, 0) of malloc's block is fine.
func TestReallocOfNewMismatched(t *testing.T) {
	realloc := func(tm, old, addr, size uint64) event.Event {
		return event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: tm, Addr: old, Addr2: addr, Size: size, Thread: 1}
	}
	s := NewSession()
	s.Apply([]event.Event{start(),
		{Kind: event.Alloc, Fn: event.NewArray, Time: 1, Addr: 0x1000, Size: 1024, Thread: 1},
		realloc(2, 0x1000, 0, 0), // freed by realloc(p, 0)
		{Kind: event.Alloc, Fn: event.New, Time: 3, Addr: 0x2000, Size: 16, Thread: 1},
		realloc(4, 0x2000, 0x5000, 32), // moved
		alloc(5, 0x3000, 8, 1),
		realloc(6, 0x3000, 0, 0), // malloc's: no error
	})
	s.Finish()
	var got []uint64
	for _, e := range s.Procs[0].Errors {
		if e.Kind != MismatchedFree {
			t.Errorf("error %v at %#x, want only mismatched frees", e.Kind, e.Addr)
		}
		got = append(got, e.Addr)
	}
	if len(got) != 2 || got[0] != 0x1000 || got[1] != 0x2000 {
		t.Errorf("mismatched frees at %#x, want at 0x1000 (realloc to 0) and 0x2000 (moved)", got)
	}
	if p := s.Procs[0]; p.Totals.LiveBlocks != 1 || p.Totals.LiveBytes != 32 {
		t.Errorf("live %d blocks, %d bytes; want the moved block of 32 bytes", p.Totals.LiveBlocks, p.Totals.LiveBytes)
	}
}

// TestReallocThatNeverReturned: a realloc the C library aborted in (of a
// freed block, of an address that is no block) is reported from its begin
// record when the image ends; one of a live block is not an error.
func TestReallocThatNeverReturned(t *testing.T) {
	begin := func(tm, addr uint64, thread int32) event.Event {
		return event.Event{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: tm, Addr: addr, Thread: thread}
	}
	s := NewSession()
	s.Apply([]event.Event{start(),
		alloc(1, 0x1000, 16, 1), free(2, 0x1000, 1),
		alloc(3, 0x3000, 64, 3),
		begin(4, 0x1000, 1), // freed
		begin(5, 0x2010, 2), // never a block
		begin(6, 0x3000, 3), // live, still in realloc at the end
		{Kind: event.ProcessEnd, Time: 7},
	})
	s.Finish()
	got := map[ErrorKind]uint64{}
	for _, e := range s.Procs[0].Errors {
		got[e.Kind] = e.Addr
	}
	if len(got) != 2 || got[DoubleFree] != 0x1000 || got[InvalidRealloc] != 0x2010 {
		t.Errorf("errors %v, want a double free at 0x1000 and an invalid realloc at 0x2010", s.Procs[0].Errors)
	}
}

// TestPendingHighsInPeak: a thread's pending bytes at a high count in the
// peak with what is in use at that time, and only then.
func TestPendingHighsInPeak(t *testing.T) {
	pending := func(tm, bytes uint64) event.Event {
		return event.Event{Kind: event.Pending, Time: tm, Size: bytes, Thread: 1}
	}
	s := NewSession()
	s.Apply([]event.Event{start(),
		alloc(10, 0x1000, 100, 1),
		pending(20, 300), // 400 in use at 20
		free(30, 0x1000, 1),
		pending(40, 350), // 350 at 40: not a peak
		alloc(50, 0x2000, 380, 1),
		free(60, 0x2000, 1),
	})
	s.Finish()
	p := s.Procs[0]
	if p.Totals.PeakBytes != 400 || p.Totals.PeakTime != 20 || p.Totals.PendingHighs != 2 {
		t.Errorf("peak %d B at %d, %d pending highs; want 400 B at 20, 2", p.Totals.PeakBytes, p.Totals.PeakTime, p.Totals.PendingHighs)
	}
	if p.Totals.LiveBytes != 0 || p.Totals.Allocations != 2 {
		t.Errorf("pending highs changed the counts: %d live bytes, %d allocations", p.Totals.LiveBytes, p.Totals.Allocations)
	}
}
