package symbolize

import "sort"

// span is an address range [lo, hi) mapped to an index (a compilation unit or
// a function node, depending on the table).
type span struct {
	lo, hi uint64
	idx    int32
}

// spanIndex finds the spans containing an address among possibly
// overlapping spans. It is fast when spans mostly do not overlap.
type spanIndex struct {
	spans []span   // sorted by lo
	maxHi []uint64 // maxHi[i] = max(spans[0..i].hi)
}

// newSpanIndex sorts spans (stable: equal lo keeps input order) and builds
// the index. It takes ownership of spans.
func newSpanIndex(spans []span) spanIndex {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	maxHi := make([]uint64, len(spans))
	var m uint64
	for i, s := range spans {
		if s.hi > m {
			m = s.hi
		}
		maxHi[i] = m
	}
	return spanIndex{spans: spans, maxHi: maxHi}
}

// containing appends to dst the spans containing addr, from the highest lo
// down, and returns it.
func (x *spanIndex) containing(dst []span, addr uint64) []span {
	i := sort.Search(len(x.spans), func(i int) bool { return x.spans[i].lo > addr }) - 1
	for ; i >= 0 && x.maxHi[i] > addr; i-- {
		if s := x.spans[i]; s.hi > addr {
			dst = append(dst, s)
		}
	}
	return dst
}

// smallest returns the index of the smallest span containing addr (ties go
// to the larger idx, i.e. the entry that came later in the DWARF), or -1.
func (x *spanIndex) smallest(addr uint64) int32 {
	best := int32(-1)
	var bestLen uint64
	i := sort.Search(len(x.spans), func(i int) bool { return x.spans[i].lo > addr }) - 1
	for ; i >= 0 && x.maxHi[i] > addr; i-- {
		s := x.spans[i]
		if s.hi <= addr {
			continue
		}
		if l := s.hi - s.lo; best < 0 || l < bestLen || (l == bestLen && s.idx > best) {
			best, bestLen = s.idx, l
		}
	}
	return best
}

// smallestIn is smallest for a sorted, mostly disjoint slice of sibling
// spans: it looks at no more than a few spans below addr.
func smallestIn(spans []span, addr uint64) int32 {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].lo > addr }) - 1
	best := int32(-1)
	var bestLen uint64
	for n := 0; i >= 0 && n < 8; i, n = i-1, n+1 {
		s := spans[i]
		if s.hi <= addr {
			continue
		}
		if l := s.hi - s.lo; best < 0 || l < bestLen || (l == bestLen && s.idx > best) {
			best, bestLen = s.idx, l
		}
	}
	return best
}
