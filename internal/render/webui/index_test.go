package webui

import (
	"math/rand"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestIndexOutOfOrder feeds allocations and frees in an order that is not
// the order of their times (as threads flush them) over a span that
// coarsens the buckets many times, and checks the index against totals
// and the time-ordered heap computed here.
func TestIndexOutOfOrder(t *testing.T) {
	ix := NewIndex()
	p := &heap.Process{}
	rng := rand.New(rand.NewSource(1))
	type ev struct {
		t     uint64
		size  uint64
		alloc bool
	}
	var evs []ev
	var allocBytes, allocs, frees uint64
	for i := 0; i < 5000; i++ {
		t0 := 1_000_000 + uint64(rng.Intn(10_000_000))
		size := uint64(1 + rng.Intn(1000))
		evs = append(evs, ev{t0, size, true})
		allocBytes += size
		allocs++
		if rng.Intn(3) > 0 {
			evs = append(evs, ev{t0 + uint64(rng.Intn(100_000)), size, false})
			frees++
		}
	}
	// Apply in chunks, each chunk in time order but chunks shuffled.
	rng.Shuffle(len(evs)/100, func(i, j int) {
		for k := 0; k < 100; k++ {
			evs[i*100+k], evs[j*100+k] = evs[j*100+k], evs[i*100+k]
		}
	})
	for _, e := range evs {
		b := heap.Block{Size: e.size, Time: e.t, Site: heap.StackID(1 + e.size%7)}
		if e.alloc {
			ix.Allocated(p, b)
		} else {
			ix.Freed(p, b, event.FreeFn, e.t)
		}
	}
	ix.Finish()
	if len(ix.Buckets) > MaxBuckets {
		t.Fatalf("%d buckets, more than %d", len(ix.Buckets), MaxBuckets)
	}
	if ix.Start%ix.Width != 0 {
		t.Errorf("start %d is not a multiple of the width %d", ix.Start, ix.Width)
	}
	var gotBytes, gotAllocs, gotFrees uint64
	live := map[int]int64{} // heap at each bucket's end, recomputed from the events
	for _, e := range evs {
		i := int((e.t - ix.Start) / ix.Width)
		if e.t < ix.Start || i >= len(ix.Buckets) {
			t.Fatalf("event at %d outside the buckets [%d, +%d×%d)", e.t, ix.Start, len(ix.Buckets), ix.Width)
		}
		d := int64(e.size)
		if !e.alloc {
			d = -d
		}
		live[i] += d
	}
	var h int64
	for i, b := range ix.Buckets {
		gotBytes += b.AllocBytes
		gotAllocs += b.Allocs
		gotFrees += b.Frees
		h += live[i]
		if b.HeapEnd != h {
			t.Fatalf("bucket %d: heap at the end %d, want %d", i, b.HeapEnd, h)
		}
		if b.HeapMax < b.HeapEnd {
			t.Fatalf("bucket %d: max %d below the end %d", i, b.HeapMax, b.HeapEnd)
		}
		var sites int64
		for _, s := range b.Sites {
			sites += s.NetBytes
		}
		if sites != live[i] {
			t.Fatalf("bucket %d: the sites' net %d, want %d", i, sites, live[i])
		}
	}
	if gotBytes != allocBytes || gotAllocs != allocs || gotFrees != frees {
		t.Errorf("buckets sum to %d bytes, %d allocations, %d frees; want %d, %d, %d", gotBytes, gotAllocs, gotFrees, allocBytes, allocs, frees)
	}
	// Peak: the sites' live bytes at the end of the peak bucket.
	vals, err := ix.SiteValues("peak", 0, len(ix.Buckets)-1)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, v := range vals {
		sum += v
	}
	pk := ix.Peak(0, len(ix.Buckets)-1)
	if int64(sum) != ix.Buckets[pk].HeapEnd {
		t.Errorf("peak flame sums to %d, the heap at the end of bucket %d is %d", sum, pk, ix.Buckets[pk].HeapEnd)
	}
	if _, err := ix.SiteValues("allocated", 3, 2); err == nil {
		t.Errorf("a reversed range is no error")
	}
	if _, err := ix.SiteValues("bogus", 0, 0); err == nil {
		t.Errorf("an unknown kind is no error")
	}
}

// TestIndexTemporary: a free the model counts as temporary after telling
// the observer is counted at the next call, or at Finish.
func TestIndexTemporary(t *testing.T) {
	ix := NewIndex()
	p := &heap.Process{}
	b := heap.Block{Size: 8, Time: 100, Site: 1}
	ix.Allocated(p, b)
	ix.Freed(p, b, event.FreeFn, 110)
	p.Totals.Temporary++ // as the model does after Freed
	ix.Allocated(p, heap.Block{Size: 8, Time: 120, Site: 2})
	ix.Freed(p, heap.Block{Size: 8, Time: 120, Site: 2}, event.FreeFn, 130) // not temporary
	p.Totals.Temporary += 2                                                 // the Agg's, counted before Folded is called (as the model does): not the free's
	ix.Folded(p, 3, &event.Event{Time: 140, Addr: 5, Size: 40, Addr2: 2})
	ix.Freed(p, b, event.FreeFn, 150)
	p.Totals.Temporary++
	ix.Finish()
	vals, err := ix.SiteValues("temporary", 0, len(ix.Buckets)-1)
	if err != nil {
		t.Fatal(err)
	}
	if vals[SiteKey{0, 1}] != 2 || vals[SiteKey{0, 2}] != 0 || vals[SiteKey{0, 3}] != 2 {
		t.Errorf("temporary per site %v, want site 1: 2, site 3: 2", vals)
	}
}

// TestIndexPending: a thread's pending bytes raise the most in use of
// their bucket (on top of what is allocated then), not what is in use at
// its end, and the peak bucket is where they were.
func TestIndexPending(t *testing.T) {
	ix := NewIndex()
	p := &heap.Process{}
	ix.Allocated(p, heap.Block{Size: 100, Time: 10, Site: 1})
	ix.Allocated(p, heap.Block{Size: 200, Time: 1000, Site: 2})
	ix.Pending(p, 50, 2000) // 350 in use at 2000
	ix.Freed(p, heap.Block{Size: 200, Time: 1000, Site: 2}, event.FreeFn, 3000)
	ix.Pending(p, 400, 3000) // 500 at 3000
	ix.Finish()
	b := ix.Buckets[ix.bucket(3000)]
	if b.HeapMax != 500 || b.HeapEnd != 100 {
		t.Errorf("bucket of the high: most in use %d, at its end %d; want 500, 100", b.HeapMax, b.HeapEnd)
	}
	if pk := ix.Peak(0, len(ix.Buckets)-1); pk != ix.bucket(3000) {
		t.Errorf("peak bucket %d, want %d (the high's)", pk, ix.bucket(3000))
	}
}
