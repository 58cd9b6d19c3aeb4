package heap

import (
	"runtime"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/testfixture"
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
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	t0 := threadCPU()
	for i := 0; i < b.N; i++ {
		s := NewSession()
		s.Apply(evs)
	}
	b.ReportMetric(float64(threadCPU()-t0)/float64(b.N)/float64(len(evs)), "cpu-ns/event")
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

// longLivedEvents is the event stream of bench/workloads/longlived.c:
// each allocation replaces the block of a random slot of 1,024 (freed
// ~1,000 allocations after its allocation, in random order), 1 in 100 of
// those left unfreed, with the free stacks recorded; addresses as a
// malloc hands them out, reused soon after their free.
func longLivedEvents(n int) []event.Event {
	evs := benchHead(8)
	var live [1024]uint64
	var reuse []uint64
	next := uint64(0x5555_0000_0000)
	seed := uint64(42)
	t := uint64(10)
	for i := 0; i < n; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		r := seed >> 17
		size := 16 + r%496
		slot := r >> 20 % 1024
		var addr uint64
		if k := len(reuse); k > 0 && r>>40%4 != 0 {
			addr, reuse = reuse[k-1], reuse[:k-1]
		} else {
			addr = next
			next += (size + 31) &^ 15
		}
		t += 50
		evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: t, Addr: addr, Size: size, Stack: 1 + uint32(i/1000%4)})
		if old := live[slot]; old != 0 && r>>30%100 != 0 {
			t += 50
			evs = append(evs, event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: t, Addr: old, Stack: 5 + uint32(i/1000%4)})
			reuse = append(reuse, old)
		}
		live[slot] = addr
	}
	return evs
}

// BenchmarkApplyLongLived: the model's cost per event when blocks
// outlive the agent's fold window (every allocation and free recorded).
func BenchmarkApplyLongLived(b *testing.B) { benchApply(b, longLivedEvents(1<<21)) }

// BenchmarkApplyTrace: the model's cost per event of a real trace
// (LPT_FILE=x.lpt, e.g. of bench/workloads/longlived.c), applied in the
// batches the reader returns, with nothing else on the way.
func BenchmarkApplyTrace(b *testing.B) {
	batches, _ := testfixture.TraceBatches(b, 4096)
	n := 0
	for _, evs := range batches {
		n += len(evs)
	}
	runtime.GC()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	for b.Loop() {
		s := NewSession()
		for _, evs := range batches {
			s.Apply(evs)
		}
	}
	b.ReportMetric(float64(threadCPU()-t0)/float64(b.N)/float64(n), "cpu-ns/event")
}

// threadCPU is the CPU time of the calling thread.
func threadCPU() time.Duration {
	t, _ := testfixture.ThreadCPU()
	return t
}
