package leak

import (
	"errors"
	"fmt"
	"sort"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// piece is a range of memory to scan: n bytes (a multiple of 8) from the
// aligned addr, of block blk, or of a root if blk is -1. fails counts the
// reads in a row that found nothing, to skip an unreadable stretch in
// growing steps.
type piece struct {
	addr, n uint64
	blk     int32
	fails   uint8
}

const pageSize = 4096

// fatal tells the read errors that make a scan meaningless (the process is
// gone) from those of memory that is merely unreadable.
func fatal(err error) bool {
	return errors.Is(err, ptrace.ErrExited) || errors.Is(err, ptrace.ErrClosed) ||
		errors.Is(err, ptrace.ErrNoProcess) || errors.Is(err, ptrace.ErrZombie)
}

// batch reads the next batch of pieces (the carried-over ones first, then
// from src) with one ReadRanges call, and hands visit the pointers to
// blocks found in each piece, in order. It returns false when there was
// nothing left to read. A piece that does not fit is split; a piece read
// in part goes on after the unreadable page.
func (c *classifier) batch(src func() (piece, bool), visit func(piece, []hit)) (bool, error) {
	c.ranges, c.pieces = c.ranges[:0], c.pieces[:0]
	used := 0
	for len(c.ranges) < batchRanges && used < len(c.buf) {
		var p piece
		if n := len(c.carry); n > 0 {
			p = c.carry[n-1]
			c.carry = c.carry[:n-1]
		} else {
			var ok bool
			if p, ok = src(); !ok {
				break
			}
		}
		if room := uint64(len(c.buf)-used) * 8; p.n > room {
			rest := p
			rest.addr += room
			rest.n -= room
			c.carry = append(c.carry, rest)
			p.n = room
		}
		w := int(p.n / 8)
		c.ranges = append(c.ranges, ptrace.Range{Addr: p.addr, Buf: c.bytes[used*8 : (used+w)*8]})
		c.pieces = append(c.pieces, p)
		used += w
	}
	if len(c.ranges) == 0 {
		return false, nil
	}
	if _, err := c.mem.ReadRanges(c.ranges); err != nil && fatal(err) {
		return false, fmt.Errorf("leak: reading %d ranges from %#x: %w", len(c.ranges), c.ranges[0].Addr, err)
	}
	// The words read are looked up a window at a time across pieces (most
	// blocks are a few words: per-piece lookups would cost more than the
	// words), then the hits are handed out piece by piece.
	c.woff, c.wgot = c.woff[:0], c.wgot[:0]
	used = 0
	for i := range c.ranges {
		r, p := &c.ranges[i], c.pieces[i]
		c.requested += p.n
		got := min(uint64(max(r.N, 0)), p.n) &^ 7
		c.woff = append(c.woff, int32(used))
		c.wgot = append(c.wgot, int32(got/8))
		used += len(r.Buf) / 8
		if got > 0 {
			c.readAny = true
		}
		if p.blk < 0 {
			c.stats.RootBytes += got
		} else {
			c.stats.BlockBytes += got
		}
		c.stats.Words += got / 8
		c.done += got
		if got < p.n {
			c.skip(p, got)
		}
	}
	pi := 0
	for first := 0; first < len(c.ranges); {
		// A region of the buffer read in full: pieces read in full, then
		// what was read of the next one. Unread memory is not looked at.
		last := first
		for last < len(c.ranges) && int(c.wgot[last]) == len(c.ranges[last].Buf)/8 {
			last++
		}
		end := used
		if last < len(c.ranges) {
			end = int(c.woff[last] + c.wgot[last])
		}
		for off := int(c.woff[first]); off < end; off += lookBatch {
			hs := c.idx.locate(c.buf[off:min(off+lookBatch, end)], c.hits[:0], int32(off))
			c.touchFlags(hs)
			for len(hs) > 0 {
				for hs[0].pos >= c.woff[pi]+int32(len(c.ranges[pi].Buf)/8) {
					pi++
				}
				lim := c.woff[pi] + c.wgot[pi]
				j := 0
				for j < len(hs) && hs[j].pos < lim {
					j++
				}
				visit(c.pieces[pi], hs[:j])
				hs = hs[j:]
			}
		}
		first = last + 1
	}
	if c.opt.Progress != nil {
		c.opt.Progress(min(c.done, c.total), c.total)
	}
	return true, nil
}

// skip handles piece p read up to got: the page holding the first byte
// not read is skipped (memcheck skips a page it cannot read), and the rest
// tried again later. After reads in a row that found nothing the step
// doubles, up to 1 MiB, so that a long unreadable stretch costs few reads.
func (c *classifier) skip(p piece, got uint64) {
	bad, end := p.addr+got, p.addr+p.n
	fails := uint8(0)
	if got == 0 {
		fails = p.fails + 1
	}
	step := uint64(pageSize)
	if fails > 1 {
		step <<= min(fails-1, 8)
	}
	next := bad&^(pageSize-1) + step
	if next >= end || next < bad {
		c.stats.UnreadableBytes += end - bad
		c.done += end - bad
		return
	}
	c.stats.UnreadableBytes += next - bad
	c.done += next - bad
	c.carry = append(c.carry, piece{addr: next, n: end - next, blk: p.blk, fails: fails})
}

// The blk of a root's piece: -1, or rootStartOnly for a Root.StartOnly.
const rootStartOnly = -2

// startHits keeps the start pointers of hs, in place.
func startHits(hs []hit) []hit {
	out := hs[:0]
	for _, h := range hs {
		if h.start {
			out = append(out, h)
		}
	}
	return out
}

// rootIter yields the pieces of the roots, leaving out the words of blocks:
// like memcheck's root set, which excludes the heap, so that a block's
// contents never make another block reachable by themselves.
type rootIter struct {
	spans    []span
	flags    []uint8
	roots    []Root
	ri       int
	active   bool
	cur, end uint64
	bi       int
}

func (it *rootIter) next() (piece, bool) {
	for {
		if !it.active {
			if it.ri >= len(it.roots) {
				return piece{}, false
			}
			r := it.roots[it.ri]
			it.ri++
			if r.Len == 0 {
				continue
			}
			if r.Heap {
				// Whole, blocks and all.
				end := r.Addr + r.Len
				if end < r.Addr {
					end = ^uint64(0)
				}
				if a, e := (r.Addr+7)&^7, end&^7; e > a {
					return piece{addr: a, n: e - a, blk: -1}, true
				}
				continue
			}
			it.cur, it.end = r.Addr, r.Addr+r.Len
			if it.end < it.cur {
				it.end = ^uint64(0)
			}
			it.bi = sort.Search(len(it.spans), func(k int) bool { return it.spans[k].end > it.cur })
			it.active = true
		}
		// Zero-size blocks hold no words.
		for it.bi < len(it.spans) && it.flags[it.bi]&fZero != 0 && it.spans[it.bi].start < it.end {
			it.bi++
		}
		stop := it.end
		inBlock := it.bi < len(it.spans) && it.spans[it.bi].start < it.end
		if inBlock {
			stop = max(it.cur, it.spans[it.bi].start)
		}
		a, e := (it.cur+7)&^7, stop&^7
		if inBlock {
			it.cur = max(it.cur, it.spans[it.bi].end)
			it.bi++
			if it.cur >= it.end {
				it.active = false
			}
		} else {
			it.active = false
		}
		if e > a {
			blk := int32(-1)
			if it.roots[it.ri-1].StartOnly {
				blk = rootStartOnly
			}
			return piece{addr: a, n: e - a, blk: blk}, true
		}
	}
}
