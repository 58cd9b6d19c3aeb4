package leak

import "math/bits"

// index finds the block containing an address without a map lookup. The
// blocks (sorted, disjoint) are split into clusters, runs of blocks close
// in address space. Most words are rejected by the first range check
// (zeros, small integers, code and stack addresses outside the heap); the
// rest go to their cluster's index:
//
//   - a rank bitmap when every block of the cluster starts on a 16-byte
//     (or 8-byte) boundary, as malloc's do: one bit per granule, set where
//     a block starts, and per 192 bits the count of the starts before
//     them. A pointer's block is the last start at or before it: one
//     access to a structure 1/96 of the heap's size (it stays in cache
//     where the heap does not), and none to the blocks themselves for a
//     start pointer;
//   - otherwise a table from granules of 2^shift bytes to the first block
//     that may hold an address of the granule, then a short forward walk.
type index struct {
	spans    []span
	lo       uint64 // the lowest block start
	width    uint64 // up to the highest block end
	clo      []uint64
	clusters []cluster
	last     int    // cluster of the last hit
	sink     uint64 // keeps the prefetching loads alive
	alloc    func(n int) []rankWord

	// locate's scratch
	cand   [lookBatch]uint64
	pos    [lookBatch]int32
	ks     [lookBatch]int32
	starts [lookBatch]bool
	inner  [lookBatch]int32
	gs     [lookBatch]uint64
}

// hit is a word v that points into block k, at its start or not; pos is
// where the word was.
type hit struct {
	v     uint64
	k     int32
	pos   int32
	start bool
}

// lookBatch is how many words locate takes at a time.
const lookBatch = 512

// locate appends to hs the words of ws (at most lookBatch) that point into
// blocks. A heap's pointers go anywhere, so each lookup is a cache miss or
// two; locate makes them overlap instead of coming one after the other.
// It drops the words outside every block's range, then reads the rank
// words of the rest in a loop that does not branch on what it reads (the
// processor keeps many such loads in flight), then, likewise, the spans
// of the blocks that interior pointers hit, and only then decides.
func (x *index) locate(ws []uint64, hs []hit, base int32) []hit {
	lo, width := x.lo, x.width
	cand := &x.cand
	n := 0
	pos := &x.pos
	for i, v := range ws[:min(len(ws), lookBatch)] {
		cand[n], pos[n] = v, base+int32(i)
		if v-lo < width {
			n++
		}
	}
	cs := cand[:n]
	c := &x.clusters[x.last]
	if c.rank == nil {
		for i, v := range cs {
			if k, start := x.find(v); k >= 0 {
				hs = append(hs, hit{v, k, pos[i], start})
			}
		}
		return hs
	}
	ks, starts := &x.ks, &x.starts
	maxG := uint64(len(c.rank))*rankSpan - 1
	gmask := uint64(1)<<c.shift - 1
	inner := &x.inner
	// Touch the rank words in a loop as short as can be, so that the
	// processor has many misses in flight at once.
	gs := &x.gs
	for i, v := range cs {
		gs[i] = min((v-c.lo)>>c.shift, maxG)
	}
	var sink uint64
	for _, g := range gs[:len(cs)] {
		sink += c.rank[g/rankSpan].bits[0]
	}
	ni := 0
	for i, v := range cs {
		off := v - c.lo
		g := gs[i]
		n, set := c.rank[g/rankSpan].count(g % rankSpan)
		k := c.first + n - 1
		// At a start: the granule's bit set and v on the granule's first
		// byte.
		start := set && off&gmask == 0
		if off >= c.width {
			k = -2 // another cluster's, or none
		}
		ks[i], starts[i] = k, start
		inner[ni] = int32(i)
		if !start {
			ni++
		}
	}
	for _, i := range inner[:ni] {
		sink += x.spans[max(ks[i], 0)].end
	}
	x.sink += sink
	for i, v := range cs {
		k := ks[i]
		switch {
		case k == -2:
			if k, start := x.find(v); k >= 0 {
				hs = append(hs, hit{v, k, pos[i], start})
			}
		case starts[i]:
			hs = append(hs, hit{v, k, pos[i], true})
		case v < x.spans[k].end:
			// The cluster's first block starts at c.lo: k >= c.first.
			hs = append(hs, hit{v, k, pos[i], false})
		}
	}
	return hs
}

type cluster struct {
	lo, width  uint64
	first, end int32 // blocks [first, end)
	shift      uint  // log2 of the granule
	rank       []rankWord
	table      []int32
}

// rankWord is the bits of rankSpan granules and the number of block
// starts before them in the cluster: 32 bytes, half a cache line, which a
// lookup touches alone.
type rankWord struct {
	bits [3]uint64
	base int32
}

const rankSpan = 3 * 64

// count returns the number of starts at or before granule g of w (g <
// rankSpan), base included, and whether one is at g. No branches: g comes
// from the pointer, anything.
func (w *rankWord) count(g uint64) (int32, bool) {
	sub, b := g/64, g%64
	m := w.bits[sub] & (2<<b - 1)
	// The words before sub count whole.
	n := bits.OnesCount64(m) +
		bits.OnesCount64(w.bits[0]&-((sub+1)>>1)) +
		bits.OnesCount64(w.bits[1]&-(sub>>1))
	return w.base + int32(n), m>>b != 0
}

// Clusters break at gaps and around blocks bigger than this, so that a
// big block or a far-away mapping does not make a cluster's index sparse.
const (
	clusterGap = 1 << 20
	bigBlock   = 1 << 20
)

func (x *index) build(spans []span, alloc func(n int) []rankWord) {
	x.alloc = alloc
	x.spans = spans
	n := len(spans)
	x.lo = spans[0].start
	x.width = spans[n-1].end - x.lo
	first := 0
	for k := 1; k <= n; k++ {
		if k < n {
			gap := spans[k].start - spans[k-1].end
			big := spans[k].end-spans[k].start > bigBlock || spans[k-1].end-spans[k-1].start > bigBlock
			if gap <= clusterGap && !big {
				continue
			}
		}
		x.addCluster(first, k)
		first = k
	}
}

// addCluster indexes blocks [first, end): with a rank bitmap if their
// starts allow one of reasonable size (a granule holds at most one start,
// and the bitmap is not much bigger than the blocks' count), else with a
// table whose granule is about the mean block size, larger if the table
// would otherwise be much bigger than the blocks it indexes.
func (x *index) addCluster(first, end int) {
	sp := x.spans
	c := cluster{lo: sp[first].start, first: int32(first), end: int32(end)}
	c.width = sp[end-1].end - c.lo
	count := uint64(end - first)
	var or uint64
	for _, s := range sp[first:end] {
		or |= s.start
	}
	if z := uint(bits.TrailingZeros64(or)); z >= 3 {
		c.shift = min(z, 4)
		if words := (c.width>>c.shift)/rankSpan + 1; words <= count/2+1024 {
			c.rank = x.alloc(int(words))
			for _, s := range sp[first:end] {
				g := (s.start - c.lo) >> c.shift
				c.rank[g/rankSpan].bits[g%rankSpan/64] |= 1 << (g % 64)
			}
			n := int32(0)
			for i := range c.rank {
				c.rank[i].base = n
				for _, b := range c.rank[i].bits {
					n += int32(bits.OnesCount64(b))
				}
			}
			x.clo = append(x.clo, c.lo)
			x.clusters = append(x.clusters, c)
			return
		}
	}
	c.shift = uint(bits.Len64(c.width/count)) - 1
	c.shift = max(4, min(c.shift, 12))
	for (c.width>>c.shift)+1 > 4*count+1024 {
		c.shift++
	}
	c.table = make([]int32, (c.width>>c.shift)+1)
	k := first
	for g := range c.table {
		gs := c.lo + uint64(g)<<c.shift
		for k < end && sp[k].end <= gs {
			k++
		}
		c.table[g] = int32(k)
	}
	x.clo = append(x.clo, c.lo)
	x.clusters = append(x.clusters, c)
}

// find returns the block whose span holds v and whether v is its start,
// or -1.
func (x *index) find(v uint64) (int32, bool) {
	c := &x.clusters[x.last]
	if v-c.lo >= c.width {
		i, j := 0, len(x.clo)
		for i < j {
			h := int(uint(i+j) >> 1)
			if x.clo[h] <= v {
				i = h + 1
			} else {
				j = h
			}
		}
		if i == 0 {
			return -1, false
		}
		c = &x.clusters[i-1]
		if v-c.lo >= c.width {
			return -1, false
		}
		x.last = i - 1
	}
	off := v - c.lo
	if c.rank != nil {
		g := off >> c.shift
		n, set := c.rank[g/rankSpan].count(g % rankSpan)
		k := c.first + n - 1
		if set && off&(1<<c.shift-1) == 0 {
			return k, true // exactly at a start: no need to look at the block
		}
		// The cluster's first block starts at c.lo, so k >= c.first.
		if v < x.spans[k].end {
			return k, false
		}
		return -1, false
	}
	sp := x.spans
	for k := c.table[off>>c.shift]; k < c.end; k++ {
		if v < sp[k].end {
			if v >= sp[k].start {
				return k, v == sp[k].start
			}
			return -1, false
		}
	}
	return -1, false
}
