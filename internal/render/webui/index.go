// Package webui serves leakpath's web UI (`leakpath ui`): a page and a
// JSON API over an Index of a trace built while the trace is streamed
// once, and over the reports made of the model at its end.
package webui

import (
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// MaxBuckets bounds the time buckets of an Index: as a trace runs longer,
// neighbouring buckets merge (each then spans twice the time), so the
// index's size depends on the allocation sites, not on the records.
const MaxBuckets = 512

// maxWidth bounds a bucket's width (in ticks): MaxBuckets of it span
// every time a uint64 holds, and doubling it cannot overflow.
const maxWidth = 1 << 56

// SiteKey names an allocation site: an image (its index in Index.Images)
// and a stack of it.
type SiteKey struct {
	Image int32
	Site  heap.StackID
}

// Counts are what the heap, or one site, did within a bucket.
type Counts struct {
	AllocBytes, Allocs uint64
	FreedBytes, Frees  uint64
	Temporary          uint64 // allocations freed with no other allocation of the thread in between
	NetBytes           int64  // change of the bytes in use
}

func (c *Counts) add(d *Counts) {
	c.AllocBytes += d.AllocBytes
	c.Allocs += d.Allocs
	c.FreedBytes += d.FreedBytes
	c.Frees += d.Frees
	c.Temporary += d.Temporary
	c.NetBytes += d.NetBytes
}

// Bucket is one span of time: the heap's counts and each active site's.
type Bucket struct {
	Counts
	// HeapEnd (the sum of NetBytes over the buckets so far) is what was
	// in use at its end; HeapMax the most within it: the most the model
	// had in use while it applied the bucket's events, or at its start or
	// end (events come in the order threads flushed them, not quite in
	// time order). Both are set by Finish.
	HeapEnd, HeapMax int64
	runMax           int64
	runSeen          bool
	Sites            map[SiteKey]*Counts
	// LeakedBytes: of the blocks allocated in the bucket, those still
	// live at the end (see Index.Leaked), in all and per site.
	LeakedBytes uint64
	leaked      map[SiteKey]uint64
}

// Index follows the heap as a trace is replayed (it is a heap.Observer)
// and keeps per time bucket the heap in use, the allocation rate and each
// site's activity: enough for the memory chart and the flame graphs of
// any range of buckets, without the trace's records.
type Index struct {
	Images  []*heap.Process
	Start   uint64 // ticks of the first bucket's start
	Width   uint64 // ticks a bucket spans; 0 until the first event
	Buckets []Bucket
	// Last is the time of the latest event seen.
	Last uint64

	heap    int64
	imageOf map[*heap.Process]int32
	// A free the model may yet count as temporary (it does so after
	// telling the observer): settled at the next call.
	pending     *heap.Process
	pendingTemp uint64 // the image's temporary count at the free
	pendingKey  SiteKey
	pendingAt   int
}

// NewIndex returns an empty index.
func NewIndex() *Index { return &Index{imageOf: map[*heap.Process]int32{}} }

func (ix *Index) image(p *heap.Process) int32 {
	i, ok := ix.imageOf[p]
	if !ok {
		i = int32(len(ix.Images))
		ix.Images = append(ix.Images, p)
		ix.imageOf[p] = i
	}
	return i
}

// Image is p's index in Images (added if new).
func (ix *Index) Image(p *heap.Process) int32 { return ix.image(p) }

// Clone copies what a view of the index reads (the buckets, their counts,
// the images), for reading while the original goes on changing.
func (ix *Index) Clone() *Index {
	c := &Index{Images: append([]*heap.Process(nil), ix.Images...), Start: ix.Start, Width: ix.Width, Last: ix.Last,
		Buckets: make([]Bucket, len(ix.Buckets))}
	for i, b := range ix.Buckets {
		sites := make(map[SiteKey]*Counts, len(b.Sites))
		for k, s := range b.Sites {
			v := *s
			sites[k] = &v
		}
		b.Sites = sites
		c.Buckets[i] = b
	}
	return c
}

// bucket returns the index of the bucket of time t, growing or coarsening
// the buckets as needed. Times before the first are counted in bucket 0.
func (ix *Index) bucket(t uint64) int {
	if ix.Width == 0 {
		ix.Start, ix.Width = t, 1
		ix.Buckets = append(ix.Buckets, Bucket{})
	}
	if t > ix.Last {
		ix.Last = t
	}
	for t < ix.Start {
		// An event earlier than all before (threads flush their events
		// in turn): buckets are added before the first.
		// (Written so that times near 0 and 2^64 do not overflow.)
		k := (ix.Start - t) / ix.Width
		if (ix.Start-t)%ix.Width != 0 {
			k++
		}
		if k > MaxBuckets-uint64(len(ix.Buckets)) {
			if ix.Width >= maxWidth {
				return 0 // no wider buckets: counted in the first
			}
			ix.coarsen()
			continue
		}
		ix.Buckets = append(make([]Bucket, k, int(k)+len(ix.Buckets)), ix.Buckets...)
		ix.Start -= k * ix.Width
		if ix.pending != nil {
			ix.pendingAt += int(k)
		}
	}
	for (t-ix.Start)/ix.Width >= MaxBuckets && ix.Width < maxWidth {
		ix.coarsen()
	}
	i := int(min((t-ix.Start)/ix.Width, MaxBuckets-1))
	for len(ix.Buckets) <= i {
		ix.Buckets = append(ix.Buckets, Bucket{})
	}
	return i
}

// coarsen merges each pair of buckets: they span twice the time.
func (ix *Index) coarsen() {
	// Pairs are aligned to multiples of the new width, so that buckets
	// added before the first stay aligned too.
	if (ix.Start/ix.Width)%2 == 1 {
		ix.Buckets = append([]Bucket{{}}, ix.Buckets...)
		ix.Start -= ix.Width
		if ix.pending != nil {
			ix.pendingAt++
		}
	}
	out := ix.Buckets[:0]
	for i := 0; i < len(ix.Buckets); i += 2 {
		b := ix.Buckets[i]
		if i+1 < len(ix.Buckets) {
			c := &ix.Buckets[i+1]
			b.Counts.add(&c.Counts)
			if c.runSeen && (!b.runSeen || c.runMax > b.runMax) {
				b.runMax, b.runSeen = c.runMax, true
			}
			for k, s := range c.Sites {
				if b.Sites == nil {
					b.Sites = map[SiteKey]*Counts{}
				}
				if d := b.Sites[k]; d != nil {
					d.add(s)
				} else {
					b.Sites[k] = s
				}
			}
		}
		out = append(out, b)
	}
	clear(ix.Buckets[len(out):])
	ix.Buckets = out
	ix.Width *= 2
	if ix.pending != nil {
		ix.pendingAt /= 2
	}
}

func (b *Bucket) site(k SiteKey) *Counts {
	if b.Sites == nil {
		b.Sites = map[SiteKey]*Counts{}
	}
	s := b.Sites[k]
	if s == nil {
		s = &Counts{}
		b.Sites[k] = s
	}
	return s
}

// settle counts the pending free as temporary if the model did; extra is
// what the model added to the image's count since for another reason (an
// Agg event's temporary pairs, counted before Folded is called).
func (ix *Index) settle(extra uint64) {
	p := ix.pending
	if p == nil {
		return
	}
	ix.pending = nil
	if p.Totals.Temporary > ix.pendingTemp+extra {
		b := &ix.Buckets[ix.pendingAt]
		b.Temporary++
		b.site(ix.pendingKey).Temporary++
	}
}

// Finish settles what the last event left pending and sets the buckets'
// HeapEnd and HeapMax; call it when the trace is replayed.
func (ix *Index) Finish() {
	ix.settle(0)
	ix.Curve()
}

// Curve sets the buckets' HeapEnd and HeapMax from what the index holds
// so far (Finish does it at the end; a live view, at each look).
func (ix *Index) Curve() {
	var h int64
	for i := range ix.Buckets {
		b := &ix.Buckets[i]
		start := h
		h += b.NetBytes
		b.HeapEnd = h
		b.HeapMax = max(start, h)
		if b.runSeen {
			b.HeapMax = max(b.HeapMax, b.runMax)
		}
	}
}

func (ix *Index) changeHeap(b *Bucket, d int64) {
	ix.heap += d
	b.NetBytes += d
	if !b.runSeen || ix.heap > b.runMax {
		b.runMax, b.runSeen = ix.heap, true
	}
}

// Call implements heap.Observer: calls move no bytes.
func (ix *Index) Call(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	ix.settle(0)
	ix.bucket(t)
}

// Allocated implements heap.Observer.
func (ix *Index) Allocated(p *heap.Process, b heap.Block) {
	ix.settle(0)
	i := ix.bucket(b.Time)
	bk := &ix.Buckets[i]
	bk.AllocBytes += b.Size
	bk.Allocs++
	s := bk.site(SiteKey{ix.image(p), b.Site})
	s.AllocBytes += b.Size
	s.Allocs++
	s.NetBytes += int64(b.Size)
	ix.changeHeap(bk, int64(b.Size))
}

// Freed implements heap.Observer.
func (ix *Index) Freed(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	ix.settle(0)
	i := ix.bucket(t)
	bk := &ix.Buckets[i]
	bk.FreedBytes += b.Size
	bk.Frees++
	k := SiteKey{ix.image(p), b.Site}
	s := bk.site(k)
	s.FreedBytes += b.Size
	s.Frees++
	s.NetBytes -= int64(b.Size)
	ix.changeHeap(bk, -int64(b.Size))
	ix.pending, ix.pendingTemp, ix.pendingKey, ix.pendingAt = p, p.Totals.Temporary, k, i
}

// Folded implements heap.Observer: pairs allocated and freed soon after,
// never live.
func (ix *Index) Folded(p *heap.Process, site heap.StackID, ev *event.Event) {
	n, bytes, temp := ev.AggPairs(), ev.Size, ev.AggTemporary()
	ix.settle(temp)
	bk := &ix.Buckets[ix.bucket(ev.Time)]
	bk.AllocBytes += bytes
	bk.Allocs += n
	bk.FreedBytes += bytes
	bk.Frees += n
	bk.Temporary += temp
	s := bk.site(SiteKey{ix.image(p), site})
	s.AllocBytes += bytes
	s.Allocs += n
	s.FreedBytes += bytes
	s.Frees += n
	s.Temporary += temp
}

// Pending implements heap.Observer: at time t the heap in use was the
// blocks allocated and not freed plus bytes pending, which the bucket's
// most in use counts.
func (ix *Index) Pending(p *heap.Process, bytes, t uint64) {
	ix.settle(0)
	bk := &ix.Buckets[ix.bucket(t)]
	if v := ix.heap + int64(bytes); !bk.runSeen || v > bk.runMax {
		bk.runMax, bk.runSeen = v, true
	}
}

// Forked implements heap.Observer: the child starts with its parent's
// live blocks, counted at the child's first event or the last seen.
func (ix *Index) Forked(p *heap.Process) {
	ix.settle(0)
	if ix.Width == 0 {
		return // nothing inherited can be timed; the model would have had events first
	}
	img := ix.image(p)
	bk := &ix.Buckets[ix.bucket(ix.Last)]
	p.Live(func(key uint64, b heap.Block) {
		if heap.IsPoolObject(key) {
			return // in its pool's memory, counted already (the model tells no observer of objects)
		}
		bk.site(SiteKey{img, b.Site}).NetBytes += int64(b.Size)
		ix.changeHeap(bk, int64(b.Size))
	})
}
