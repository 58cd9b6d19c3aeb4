package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/event"
)

// loopEvents is the event stream of an allocation loop: a window of 64
// live blocks, each allocation freed 64 allocations later, from 4 stacks,
// with the free stacks recorded.
func loopEvents(n int) []event.Event {
	evs := benchHead(8)
	var live [64]uint64
	t := uint64(10)
	for i := 0; i < n; i++ {
		addr := 0x10000 + uint64(i%1024)*64 + uint64(i/1024%16)*0x100000
		if old := live[i%64]; old != 0 {
			t += 50
			evs = append(evs, event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: t, Addr: old, Stack: 5 + uint32(i%4)})
		}
		t += 50
		evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: t, Addr: addr, Size: uint64(16 + i%500), Stack: 1 + uint32(i%4)})
		live[i%64] = addr
	}
	return evs
}

// benchHead starts a process and its thread 1, which defines stacks 1
// to n.
func benchHead(n uint32) []event.Event {
	evs := []event.Event{
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1}}},
		{Kind: event.ThreadStart, Thread: 1, Time: 1},
	}
	for s := uint32(1); s <= n; s++ {
		evs = append(evs, event.Event{Kind: event.StackDef, Thread: 1, Stack: s, X: &event.Extra{Frames: []uint64{0x1000 + uint64(s), 0x2000, 0x3000}}})
	}
	return evs
}

func BenchmarkApplyLoop(b *testing.B) { benchApply(b, loopEvents(1<<20)) }

// benchApply applies evs to a new model b.N times.
func benchApply(b *testing.B, evs []event.Event) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := NewSession()
		s.Apply(evs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
}

// scopeEvents is a loop entering one scope n times, allocating and
// freeing one block inside each time (both recorded: the agent folds
// nothing inside a scope).
func scopeEvents(n int) []event.Event {
	evs := benchHead(1)
	name := &event.Extra{Text: "request"} // shared, as the wire decoder shares it
	t := uint64(10)
	for i := 0; i < n; i++ {
		addr := 0x10000 + uint64(i%64)*64
		evs = append(evs,
			event.Event{Kind: event.ScopeBegin, Thread: 1, Time: t, Aux: 1, X: name},
			event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: t + 10, Addr: addr, Size: 64, Stack: 1},
			event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: t + 20, Addr: addr},
			event.Event{Kind: event.ScopeEnd, Thread: 1, Time: t + 30, Aux: 1})
		t += 50
	}
	return evs
}

// BenchmarkApplyScopes: what the model spends per event of a scope loop
// (a begin, an allocation, its free, an end).
func BenchmarkApplyScopes(b *testing.B) { benchApply(b, scopeEvents(1<<18)) }
