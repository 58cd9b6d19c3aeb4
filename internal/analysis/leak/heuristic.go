package leak

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// hcheck is an interior pointer v, found in a reachable place, into block
// k, to test against the heuristics. The tests need words of k's memory,
// so they wait for the end of the read batch and are read together.
type hcheck struct {
	v uint64
	k int32
}

// Bounds of memcheck's vtable test: at most 20 words after the first, of
// which 2 must be function pointers; and no vtable in page 0.
const (
	vtableMaxCheck = 20
	vtableMinAddr  = 4096
)

// maybeCheck queues v (an interior pointer into block k, from a reachable
// place) if some heuristic could accept it, each distinct pointer once:
// a test depends only on v and on memory, which does not change.
func (c *classifier) maybeCheck(v uint64, k int32) {
	s := c.spans[k]
	size, off := c.size(k), v-s.start
	if s.start&7 != 0 {
		return // the tests read the block's first words
	}
	mi := len(c.maps) > 0 && v&7 == 0 && v+8 <= s.end
	if !(off == 24 && size >= 25 || off == 8 || mi) {
		return
	}
	if c.hdone == nil {
		c.hdone = make(map[uint64]struct{})
	}
	if _, ok := c.hdone[v]; ok {
		return
	}
	c.hdone[v] = struct{}{}
	c.hq = append(c.hq, hcheck{v, k})
}

// resolveHeuristics tests the queued pointers; a block one of them passes
// for becomes reachable (it was reached from a reachable place).
func (c *classifier) resolveHeuristics() error {
	c.stats.HeuristicChecks += uint64(len(c.hq))
	for q := c.hq; len(q) > 0; {
		m := min(len(q), batchRanges/2)
		if err := c.resolveSome(q[:m]); err != nil {
			return err
		}
		q = q[m:]
	}
	c.hq = c.hq[:0]
	return nil
}

// hwords are the words a test reads: the block's first two and the one v
// points to.
type hwords struct {
	w0, w1, wv    uint64
	ok0, ok1, okv bool
	inner, first  uint64 // vtable candidates for multipleinheritance
	needVtable    bool
}

func (c *classifier) resolveSome(q []hcheck) error {
	rs := c.ranges[:0]
	hs := make([]hwords, len(q))
	ra := make([]int, len(q)) // range of the first words; that at v follows if any
	rv := make([]int, len(q))
	for i, h := range q {
		s := c.spans[h.k]
		n := 8
		if s.end-s.start >= 16 {
			n = 16
		}
		ra[i] = len(rs)
		rs = append(rs, ptrace.Range{Addr: s.start, Buf: c.bytes[i*24 : i*24+n]})
		rv[i] = -1
		if len(c.maps) > 0 && h.v&7 == 0 && h.v >= s.start+16 && h.v+8 <= s.end {
			rv[i] = len(rs)
			rs = append(rs, ptrace.Range{Addr: h.v, Buf: c.bytes[i*24+16 : i*24+24]})
		}
	}
	if err := c.readSmall(rs); err != nil {
		return err
	}
	var want []uint64 // vtable candidates not known yet
	for i, h := range q {
		s := c.spans[h.k]
		w := &hs[i]
		r := rs[ra[i]]
		if r.N >= 8 {
			w.w0, w.ok0 = binary.LittleEndian.Uint64(r.Buf), true
		}
		if r.N >= 16 {
			w.w1, w.ok1 = binary.LittleEndian.Uint64(r.Buf[8:]), true
		}
		switch {
		case h.v == s.start+8:
			w.wv, w.okv = w.w1, w.ok1
		case rv[i] >= 0 && rs[rv[i]].N == 8:
			w.wv, w.okv = binary.LittleEndian.Uint64(rs[rv[i]].Buf), true
		}
		if c.simpleHeuristic(h, w) != NoHeuristic || len(c.maps) == 0 || h.v&7 != 0 || !w.okv || !w.ok0 {
			continue
		}
		w.inner, w.first = w.wv, w.w0
		if w.inner&7 != 0 || w.inner < vtableMinAddr || w.first&7 != 0 || w.first < vtableMinAddr {
			continue
		}
		w.needVtable = true
		for _, a := range [2]uint64{w.inner, w.first} {
			if _, ok := c.vtable[a]; !ok {
				want = append(want, a)
			}
		}
	}
	if err := c.learnVtables(want); err != nil {
		return err
	}
	for i, h := range q {
		w := &hs[i]
		hh := c.simpleHeuristic(h, w)
		if hh == NoHeuristic && w.needVtable && c.vtable[w.inner] && c.vtable[w.first] {
			hh = MultipleInheritance
		}
		if hh == NoHeuristic {
			continue
		}
		if f := c.flags[h.k]; f&stMask != stReachable {
			c.flags[h.k] = f&^stMask | stReachable | fHeur
			if c.heur == nil {
				c.heur = make([]Heuristic, len(c.spans))
			}
			c.heur[h.k] = hh
			c.push(h.k)
		}
	}
	return nil
}

// simpleHeuristic applies the heuristics that look at the block's first
// words only (mc_leakcheck.c heuristic_reachedness, in its order).
func (c *classifier) simpleHeuristic(h hcheck, w *hwords) Heuristic {
	s := c.spans[h.k]
	size, off := c.size(h.k), h.v-s.start
	// std::string of the old (reference-counted) ABI: length, capacity,
	// refcount, then the characters, which the pointer points to.
	if off == 24 && w.ok1 {
		capacity := w.w1
		if 3*8+capacity+1 == size && w.ok0 && w.w0 <= capacity {
			return StdString
		}
	}
	if off == 8 && w.ok0 {
		// sqlite and others: the size of the rest of the block, then the
		// memory handed out.
		if n := w.w0; n > 0 && size-8 == n {
			return Length64
		}
		// new[] of a type with a destructor: the element count, then the
		// elements.
		if n := w.w0; n > 0 && (size-8)%n == 0 {
			return NewArray
		}
	}
	return NoHeuristic
}

// readSmall reads the ranges rs (at most batchRanges), each Buf set.
func (c *classifier) readSmall(rs []ptrace.Range) error {
	if len(rs) == 0 {
		return nil
	}
	if _, err := c.mem.ReadRanges(rs); err != nil && fatal(err) {
		return fmt.Errorf("leak: reading block headers for heuristics: %w", err)
	}
	return nil
}

// learnVtables tells, for each address, whether it looks like a vtable the
// way memcheck decides: it lies in a readable file mapping, and of the
// words from it (at most 21, not past the mapping's last word) the
// non-null ones up to the second all point into executable file mappings.
func (c *classifier) learnVtables(as []uint64) error {
	if c.vtable == nil {
		c.vtable = make(map[uint64]bool)
	}
	var rs []ptrace.Range
	var addrs []uint64
	flush := func() error {
		if len(rs) == 0 {
			return nil
		}
		if err := c.readSmall(rs); err != nil {
			return err
		}
		for i, r := range rs {
			c.vtable[addrs[i]] = c.isVtable(r)
		}
		rs, addrs = rs[:0], addrs[:0]
		return nil
	}
	for _, a := range as {
		if _, ok := c.vtable[a]; ok {
			continue
		}
		m := c.mapping(a)
		if m == nil || !m.File || !m.Read || m.End-m.Start < 16 {
			c.vtable[a] = false
			continue
		}
		// memcheck's last word read starts at most at end-8 (its end is
		// inclusive): the mapping's last word is never read.
		last := min(a+vtableMaxCheck*8, m.End-1-8)
		if last < a {
			c.vtable[a] = false
			continue
		}
		c.vtable[a] = false // placeholder, also dedups as
		rs = append(rs, ptrace.Range{Addr: a, Buf: make([]byte, (last-a)/8*8+8)})
		addrs = append(addrs, a)
		if len(rs) == batchRanges {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// isVtable applies the test to the words read in r.
func (c *classifier) isVtable(r ptrace.Range) bool {
	fns := 0
	for off := 0; off+8 <= len(r.Buf); off += 8 {
		if off+8 > r.N {
			return false // memcheck gives up on a fault
		}
		p := binary.LittleEndian.Uint64(r.Buf[off:])
		if p == 0 {
			continue
		}
		m := c.mapping(p)
		if m == nil || !m.File || !m.Exec {
			return false
		}
		if fns++; fns == 2 {
			return true
		}
	}
	return false
}

// mapping returns the mapping holding a, or nil.
func (c *classifier) mapping(a uint64) *Mapping {
	i := sort.Search(len(c.maps), func(i int) bool { return c.maps[i].Start > a })
	if i == 0 || a >= c.maps[i-1].End {
		return nil
	}
	return &c.maps[i-1]
}
