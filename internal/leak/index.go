package leak

import "math/bits"

// index finds the block containing an address without a map lookup. The
// blocks (sorted, disjoint) are split into clusters, runs of blocks close
// in address space; each cluster has a dense table from granules of
// 2^shift bytes to the first block that may contain an address of the
// granule. Most words are rejected by the first range check (small
// integers, zeros, code and stack addresses below or above every block).
type index struct {
	spans    []span
	lo       uint64 // the lowest block start
	width    uint64 // up to the highest block end
	clo      []uint64
	clusters []cluster
	last     int // cluster of the last hit
}

type cluster struct {
	lo, width  uint64
	first, end int32 // blocks [first, end)
	shift      uint
	table      []int32
}

// Clusters break at gaps and around blocks bigger than this, so that a
// big block or a far-away mapping does not make a cluster's table sparse.
const (
	clusterGap = 1 << 20
	bigBlock   = 1 << 20
)

func (x *index) build(spans []span) {
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

// addCluster indexes blocks [first, end). The granule is about the mean
// block size (about one block per granule), larger if the table would
// otherwise be much bigger than the blocks it indexes.
func (x *index) addCluster(first, end int) {
	sp := x.spans
	c := cluster{lo: sp[first].start, first: int32(first), end: int32(end)}
	c.width = sp[end-1].end - c.lo
	count := uint64(end - first)
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

// find returns the block whose span holds v, or -1.
func (x *index) find(v uint64) int32 {
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
			return -1
		}
		c = &x.clusters[i-1]
		if v-c.lo >= c.width {
			return -1
		}
		x.last = i - 1
	}
	sp := x.spans
	for k := c.table[(v-c.lo)>>c.shift]; k < c.end; k++ {
		if v < sp[k].end {
			if v >= sp[k].start {
				return k
			}
			return -1
		}
	}
	return -1
}
