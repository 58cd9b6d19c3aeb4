package heap

import (
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// applyBoth applies evs, in batches of batch events, to a model by the
// fast path where it may and to one by the general path alone, finishes
// both and reports where they differ. It returns the events the fast path
// took.
func applyBoth(t *testing.T, evs []event.Event, batch int) uint64 {
	t.Helper()
	fast, slow := NewSession(), NewSession()
	slow.slow = true
	for i := 0; i < len(evs); i += batch {
		// Each model gets its own copy: Apply may change what an event
		// points to (a fork's info).
		fast.Apply(cloneEvents(evs[i:min(i+batch, len(evs))]))
		slow.Apply(cloneEvents(evs[i:min(i+batch, len(evs))]))
	}
	fast.Finish()
	slow.Finish()
	if slow.fast != 0 {
		t.Fatalf("the model that should take no event by the fast path took %d", slow.fast)
	}
	took := fast.fast
	fast.prefetched, slow.prefetched, slow.slow, fast.fast = 0, 0, false, 0
	if len(fast.Procs) != len(slow.Procs) {
		t.Fatalf("%d images by the fast path, %d by the general one", len(fast.Procs), len(slow.Procs))
	}
	for i, p := range fast.Procs {
		q := slow.Procs[i]
		if p == nil || q == nil {
			if p != q {
				t.Fatalf("image %d: %v by the fast path, %v by the general one", i, p, q)
			}
			continue
		}
		if p.Totals != q.Totals {
			t.Errorf("image %d: totals\n%+v by the fast path,\n%+v by the general one", i, p.Totals, q.Totals)
		}
		if !reflect.DeepEqual(p.Errors, q.Errors) {
			t.Errorf("image %d: errors\n%+v by the fast path,\n%+v by the general one", i, p.Errors, q.Errors)
		}
		if !reflect.DeepEqual(p.sites, q.sites) {
			t.Errorf("image %d: sites\n%+v by the fast path,\n%+v by the general one", i, p.sites, q.sites)
		}
		if !reflect.DeepEqual(p, q) {
			t.Errorf("image %d: the models differ", i)
		}
	}
	return took
}

func cloneEvents(evs []event.Event) []event.Event {
	out := append([]event.Event(nil), evs...)
	for i := range out {
		if x := out[i].X; x != nil && x.Process != nil {
			c, info := *x, *x.Process
			c.Process = &info
			out[i].X = &c
		}
	}
	return out
}

// TestFastPathSame: streams of allocations and frees, with the rare cases
// the fast path leaves to the general one among them, leave the model as
// the general path alone does.
func TestFastPathSame(t *testing.T) {
	rare := append(benchHead(4),
		alloc(20, 0x1000, 8, 1),
		free(23, 0x2000, 1), // before its allocation: parked
		alloc(22, 0x2000, 16, 1),
		free(24, 0x2000, 1),      // double free: parked to the end
		alloc(25, 0x1000, 32, 2), // 0x1000 reused before its free came: limbo
		free(24, 0x1000, 1),      // the late free of the first
		alloc(26, 0, 64, 1),      // failed
		event.Event{Kind: event.Alloc, Fn: event.New, Thread: 1, Time: 27, Addr: 0x3000, Size: 8, Stack: 3},
		free(28, 0x3000, 1), // mismatched: new, then free
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: 40, Addr: 0x4000, Size: 8, Stack: 9, Addr2: 30}, // late; before its stack
		event.Event{Kind: event.StackDef, Thread: 1, Stack: 9, X: &event.Extra{Frames: []uint64{0x9000}}},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: 41, Addr: 0x5000, Size: 8, Stack: 9},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: 42, Addr: 0x5000, Stack: 2, Aux: 1}, // temporary
		event.Event{Kind: event.Ignore, Thread: 1, Time: 43, Addr: 0x4000},
		free(44, 0x1000, 1),
		free(45, 0x4000, 1), // an ignored block's
		// A scan names a block the agent still holds pending: its kind
		// waits for its allocation.
		event.Event{Kind: event.Scan, Time: 45, X: &event.Extra{Scan: &event.ScanInfo{Blocks: []event.ScannedBlock{{Addr: 0x9000, Size: 8, Kind: event.Definite}}}}},
		alloc(45, 0x9000, 8, 1),
		event.Event{Kind: event.ScopeBegin, Thread: 1, Time: 46, Aux: 1, X: &event.Extra{Text: "s"}},
		alloc(47, 0x6000, 8, 1),
		free(48, 0x6000, 1),
		event.Event{Kind: event.ScopeEnd, Thread: 1, Time: 49, Aux: 1},
		alloc(50, 0x7000, 8, 1),
		event.Event{Kind: event.ProcessStart, Proc: 1, Time: 51, X: &event.Extra{Process: &event.ProcessInfo{Index: 1, ParentProc: 0, ForkID: 3, ExecOf: -1}}},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Proc: 1, Thread: 5, Time: 52, Addr: 0x7000},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Proc: 0, Thread: 1, Time: 53, Addr: 0x7000},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: 2, Thread: 6, Time: 54, Addr: 0x8000, Size: 8}, // an image not started
		free(55, 0x8000, 1),
	)
	for _, c := range []struct {
		name string
		evs  []event.Event
		fast bool // whether the fast path takes some
	}{
		{"loop", loopEvents(5000), true},
		{"long-lived", longLivedEvents(20000), true},
		{"scopes", scopeEvents(200), false}, // a scope sees every event
		{"rare", rare, true},
		{"big table", bigTableEvents(), true}, // Apply prefetches
	} {
		for _, batch := range []int{1, 7, 4096} {
			t.Run(c.name, func(t *testing.T) {
				if took := applyBoth(t, c.evs, batch); (took > 0) != c.fast {
					t.Errorf("%d events by the fast path", took)
				}
			})
		}
	}
}

// bigTableEvents fills an image's table past prefetchSlots, then frees,
// allocates and reallocates among its blocks.
func bigTableEvents() []event.Event {
	const n = prefetchSlots/2 + 100
	evs := []event.Event{start()}
	for i := uint64(0); i < n; i++ {
		evs = append(evs, alloc(10+i, 0x55a000000000+i*48, 40, 1))
	}
	for i := uint64(0); i < 3000; i++ {
		a := 0x55a000000000 + i*7*48
		evs = append(evs, free(2*n+i, a, 1), alloc(2*n+i, a+8, 24, 1),
			event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: 2*n + i, Addr: a + 8, Addr2: a + 16, Size: 32, Thread: 1},
			free(2*n+i, 0x10+i%50*16, 1)) // never allocated: parked, then double
	}
	return evs
}

// FuzzFastPathSame: whatever events come, the fast path leaves the model
// as the general path alone does. Each event is made of 4 bytes: its
// kind, address, size and stack, function, and flags.
func FuzzFastPathSame(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 1, 1, 0, 0, 0, 1, 2, 3, 1, 1, 0, 0})
	f.Add([]byte{1, 4, 0, 0, 0, 4, 1, 0, 1, 4, 0, 0, 1, 4, 0, 0, 0, 5, 9, 0, 7, 0, 0, 0})
	kinds := [...]event.Kind{event.Alloc, event.Free, event.Alloc, event.Free, event.Alloc, event.Free,
		event.Realloc, event.ReallocBegin, event.StackDef, event.Ignore, event.ScopeBegin, event.ScopeEnd,
		event.Scan, event.Agg, event.ProcessStart, event.Refree}
	fns := [...]event.Fn{event.Malloc, event.FreeFn, event.New, event.Calloc, event.ReallocFn}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4*4096 {
			return
		}
		evs := benchHead(2)
		tm := uint64(10)
		for i := 0; i+4 <= len(data); i += 4 {
			k, a, s, fl := data[i], data[i+1], data[i+2], data[i+3]
			tm += uint64(fl >> 5) // equal times and out of order ones below
			ev := event.Event{Kind: kinds[k%16], Fn: fns[s>>4%5], Thread: int32(1 + fl&1), Time: tm,
				Addr: uint64(a%32) * 16, Size: uint64(s & 15), Stack: uint32(k >> 4 & 7), Proc: uint32(fl >> 1 & 1)}
			if fl&4 != 0 {
				ev.Addr2 = tm - uint64(fl>>3&3) // late allocations, new addresses of reallocs
			}
			if fl&8 != 0 {
				ev.Aux = 1 // temporary frees
			}
			if fl&16 != 0 && ev.Time > 3 {
				ev.Time -= 3
			}
			switch ev.Kind {
			case event.StackDef:
				ev.X = &event.Extra{Frames: []uint64{0x1000 + uint64(a)}}
			case event.ScopeBegin:
				ev.X = &event.Extra{Text: "s"}
			case event.Scan:
				ev.X = &event.Extra{Scan: &event.ScanInfo{Blocks: []event.ScannedBlock{
					{Addr: ev.Addr, Size: ev.Size, Kind: event.Definite}, {Addr: ev.Addr + 16, Size: 1, Kind: event.Indirect, Owner: ev.Addr}}}}
			case event.ProcessStart:
				ev.Proc = 1
				ev.X = &event.Extra{Process: &event.ProcessInfo{Index: 1, ParentProc: 0, ForkID: uint64(a), ExecOf: -1}}
			}
			evs = append(evs, ev)
		}
		applyBoth(t, evs, 1+int(len(data)%5))
	})
}
