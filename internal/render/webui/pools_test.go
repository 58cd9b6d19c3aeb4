package webui

import (
	"slices"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// poolSession applies a program's pool to a session observed by ix: a
// malloc'd block of 4096 B (stack 1) holding a pool's objects, 2 of 64 B
// (stack 2), and one of 1024 B (stack 3) holding an inner pool's object
// of 32 B (stack 4); one more object of 16 B allocated and freed.
func poolSession(ix *Index) *heap.Process {
	const chunk, outer, inner = 0x10000, 0xa0, 0xb0
	evs := []event.Event{{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1}}}}
	for i := uint32(1); i <= 5; i++ {
		evs = append(evs, event.Event{Kind: event.StackDef, Stack: i, X: &event.Extra{Frames: []uint64{0x401000 + uint64(i)*16}}})
	}
	obj := func(t, pool, addr, size uint64, stack uint32) event.Event {
		return event.Event{Kind: event.PoolAlloc, Time: t, Thread: 1, Stack: stack, Addr: addr, Size: size, Aux: pool}
	}
	evs = append(evs,
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 1000, Addr: chunk, Size: 4096, Thread: 1, Stack: 1},
		event.Event{Kind: event.PoolCreate, Time: 1001, Thread: 1, Addr: outer},
		obj(1002, outer, chunk, 64, 2),
		obj(1003, outer, chunk+64, 64, 2),
		obj(1004, outer, chunk+1024, 1024, 3),
		event.Event{Kind: event.PoolCreate, Time: 1005, Thread: 1, Addr: inner},
		obj(1006, inner, chunk+1024, 32, 4),
		obj(1007, outer, chunk+2048, 16, 5),
		event.Event{Kind: event.PoolFree, Time: 1008, Thread: 1, Addr: chunk + 2048, Aux: outer},
	)
	s := heap.NewSession()
	s.Observer = ix
	s.Apply(evs)
	s.Finish()
	return s.Procs[0]
}

// TestPoolsCountOnce: the UI counts a pool's bytes once, as the totals
// do. The memory chart holds the malloc'd block (the model tells its
// observer of no pool object); the leaked flame graph gives each object
// its bytes at its site and the pool's memory, at its site, what the
// objects leave of it (an outer object, what the inner pool's object
// leaves of it), so that its sum is the totals' live bytes; and a fork
// child starts with the block, not the block and its objects again.
// Before, the leaked graph held 4096 + 64 + 64 + 1024 + 32 B.
func TestPoolsCountOnce(t *testing.T) {
	ix := NewIndex()
	p := poolSession(ix)
	ix.Finish()
	ix.Leaked()
	if p.Totals.LiveBytes != 4096 || p.PoolObjects() != 4 {
		t.Fatalf("the model: %d B live, %d pool objects; want 4096 B, 4", p.Totals.LiveBytes, p.PoolObjects())
	}
	last := len(ix.Buckets) - 1
	if h := ix.Buckets[last].HeapEnd; h != 4096 {
		t.Errorf("heap in use at the end %d B, want 4096", h)
	}
	vals, err := ix.SiteValues("leaked", 0, last)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	var got []uint64
	for _, v := range vals {
		sum += v
		got = append(got, v)
	}
	slices.Sort(got)
	// 32 (inner object), 128 (2 × 64), 992 (1024 - 32), 2944 (4096 -
	// 128 - 1024).
	if want := []uint64{32, 128, 992, 2944}; sum != 4096 || !slices.Equal(got, want) {
		t.Errorf("leaked by site %v (sum %d), want %v (sum 4096)", got, sum, want)
	}
	var leaked uint64
	for _, b := range ix.Buckets {
		leaked += b.LeakedBytes
	}
	if leaked != 4096 {
		t.Errorf("leaked bytes over the buckets %d, want 4096", leaked)
	}

	// A fork child of that process: its heap starts at the block.
	child := NewIndex()
	child.Allocated(p, heap.Block{Size: 0, Time: 2000, Site: 1}) // the child's first event: a bucket
	child.Forked(p)
	child.Finish()
	if h := child.Buckets[len(child.Buckets)-1].HeapEnd; h != 4096 {
		t.Errorf("a fork child's heap %d B at its start, want 4096", h)
	}
}
