package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// TestApplyPrefetchesBigTables: once an image's table is large, Apply
// reads ahead where events will look (prefetched counts), including events
// of an image not started yet and of none, and the model comes out as
// when the same events come one call each, without reading ahead.
func TestApplyPrefetchesBigTables(t *testing.T) {
	const n = prefetchSlots/2 + 100 // the table grows to 2*prefetchSlots
	var evs []event.Event
	evs = append(evs, start())
	for i := uint64(0); i < n; i++ {
		evs = append(evs, alloc(10+i, 0x55a000000000+i*48, 40, 1))
	}
	var batch []event.Event
	for i := uint64(0); i < 1000; i++ {
		a := 0x55a000000000 + i*7*48
		batch = append(batch,
			free(2*n+i, a, 1),
			alloc(2*n+i, a+8, 24, 1),
			event.Event{Kind: event.ReallocBegin, Time: 2*n + i, Addr: a + 8, Thread: 1},
			event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: 2*n + i, Addr: a + 8, Addr2: a + 16, Size: 32, Thread: 1},
			free(2*n+i, 0x10+i, 1), // never allocated
			event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: 3, Time: 2*n + i, Addr: a, Size: 8, Thread: 1}, // a new image
		)
	}
	batch = append(batch, event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: 7, Addr: 0x40, Size: 8, Thread: 1}) // past the images

	whole := NewSession()
	whole.Apply(evs)
	if !whole.bigTables() {
		t.Fatalf("%d blocks live in %d words: not prefetched from", n, len(whole.Procs[0].blocks.words))
	}
	whole.Apply(batch)
	if whole.prefetched == 0 {
		t.Error("Apply read nothing ahead")
	}
	one := NewSession()
	one.Apply(evs)
	for i := range batch {
		one.Apply(batch[i : i+1]) // reads ahead the event itself only
	}
	whole.Finish()
	one.Finish()
	if len(whole.Procs) != len(one.Procs) {
		t.Fatalf("%d images, %d applied one at a time", len(whole.Procs), len(one.Procs))
	}
	for i, p := range whole.Procs {
		q := one.Procs[i]
		if (p == nil) != (q == nil) {
			t.Fatalf("image %d: %v, one at a time %v", i, p != nil, q != nil)
		}
		if p != nil && (p.Totals != q.Totals || len(p.Errors) != len(q.Errors)) {
			t.Errorf("image %d: totals %+v, %d errors; one at a time %+v, %d errors", i, p.Totals, len(p.Errors), q.Totals, len(q.Errors))
		}
	}
	if p := whole.Procs[0]; p.Totals.LiveBlocks != n {
		t.Errorf("%d blocks live, want %d", p.Totals.LiveBlocks, n)
	}
}

// TestApplyBoundsIndexes: events whose process image or stack id is past
// the events' limits (a corrupt trace or ring) leave the model's tables
// bounded; before, each made a slot for every index below it (2^30 images
// took the machine's memory).
func TestApplyBoundsIndexes(t *testing.T) {
	s := NewSession()
	s.Apply([]event.Event{
		{Kind: event.Alloc, Fn: event.Malloc, Proc: 1 << 30, Thread: 1, Time: 5, Addr: 0x1000, Size: 8},
		{Kind: event.ProcessStart, Proc: event.MaxImages, X: &event.Extra{Process: &event.ProcessInfo{Index: event.MaxImages, ParentProc: -1, ExecOf: -1}}},
		{Kind: event.StackDef, Thread: 1, Stack: 1<<32 - 1, X: &event.Extra{Frames: []uint64{0x401000}}},
		{Kind: event.StackDef, Thread: 1, Stack: 3, X: &event.Extra{Frames: []uint64{0x401000}}},
	})
	if len(s.Procs) != 1 || len(s.Procs[0].agentStack) != 4 {
		t.Errorf("%d process images, %d stack slots: want 1 and 4", len(s.Procs), len(s.Procs[0].agentStack))
	}
}
