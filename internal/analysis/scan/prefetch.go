package scan

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// maxGap is the widest gap between two blocks that heapCopy reads through
// (less than a page, so every page read holds a byte of a block).
const maxGap = 4096

// heapCopy is the heap read ahead, for the classifier. A scan reads
// nearly every live block, in the order of its mark stack (at random,
// as far as addresses go); read block by block, each costs the kernel an
// iovec and a page pin, some microseconds. Read in address order, in runs
// of blocks close together, the heap costs little more than a copy.
type heapCopy struct {
	under leak.Memory
	runs  []run // by address
	buf   []byte
}

// run is a stretch of blocks close together, copied to buf[off:off+n]
// (n: the bytes read, fewer than end-start if the read stopped early).
type run struct {
	start, end uint64
	off, n     int
}

// prefetch reads the blocks (sorted by address) ahead when they fit in
// limit bytes, and returns the Memory the classifier should read: the
// copy, which asks mem for what it does not hold, or mem itself.
func prefetch(mem leak.Memory, blocks []leak.Block, limit uint64) (leak.Memory, uint64) {
	var runs []run
	var total uint64
	for _, b := range blocks {
		if b.Size == 0 {
			continue
		}
		end := b.Addr + b.Size
		if n := len(runs); n > 0 && b.Addr >= runs[n-1].end && b.Addr-runs[n-1].end < maxGap {
			total += end - runs[n-1].end
			runs[n-1].end = end
			continue
		} else if n > 0 && b.Addr < runs[n-1].end {
			// Overlapping blocks (a model out of step): extend.
			if end > runs[n-1].end {
				total += end - runs[n-1].end
				runs[n-1].end = end
			}
			continue
		}
		runs = append(runs, run{start: b.Addr, end: end})
		total += b.Size
		if total > limit {
			return mem, 0
		}
	}
	if total > limit || len(runs) == 0 {
		return mem, 0
	}
	h := &heapCopy{under: mem, runs: runs, buf: make([]byte, total)}
	rs := make([]ptrace.Range, len(runs))
	off := 0
	for i := range h.runs {
		h.runs[i].off = off
		size := int(h.runs[i].end - h.runs[i].start)
		rs[i] = ptrace.Range{Addr: h.runs[i].start, Buf: h.buf[off : off+size]}
		off += size
	}
	// A run that stops early (an unreadable page: blocks the model
	// still has, but the program unmapped) goes on from the next page;
	// what cannot be read is asked again when the classifier wants it,
	// and fails then the way it would have.
	for len(rs) > 0 {
		readSplit(mem, rs)
		var again []ptrace.Range
		var tails []run
		for i, r := range rs {
			u := h.find(r.Addr)
			u.n = max(r.N, 0)
			if u.n == len(r.Buf) {
				continue
			}
			next := (u.start + uint64(u.n) + 4096) &^ 4095
			if next < u.end {
				tails = append(tails, run{start: next, end: u.end, off: u.off + int(next-u.start)})
				again = append(again, ptrace.Range{Addr: next, Buf: rs[i].Buf[next-u.start:]})
			}
			u.end = u.start + uint64(u.n)
		}
		if len(tails) > 0 {
			h.runs = append(h.runs, tails...)
			sort.Slice(h.runs, func(i, j int) bool { return h.runs[i].start < h.runs[j].start })
		}
		rs = again
	}
	var read uint64
	for _, u := range h.runs {
		read += uint64(u.n)
	}
	return h, read
}

// readSplit reads rs (mem.ReadRanges) in two halves at once when they
// are large, cutting the range that holds the middle byte in two: the
// program is held meanwhile and its core idle, and much of such a read
// is the kernel faulting in the copy's pages.
func readSplit(mem leak.Memory, rs []ptrace.Range) {
	total := 0
	for _, r := range rs {
		total += len(r.Buf)
	}
	if total < splitRead {
		mem.ReadRanges(rs)
		return
	}
	k, before := 0, 0 // rs[k] holds the middle byte, before bytes ahead of it
	for before+len(rs[k].Buf) <= total/2 {
		before += len(rs[k].Buf)
		k++
	}
	mid := rs[k]
	cut := (total/2 - before) &^ 4095
	first := append(rs[:k:k], ptrace.Range{Addr: mid.Addr, Buf: mid.Buf[:cut]})
	second := append([]ptrace.Range{{Addr: mid.Addr + uint64(cut), Buf: mid.Buf[cut:]}}, rs[k+1:]...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		mem.ReadRanges(second)
	}()
	mem.ReadRanges(first)
	<-done
	copy(rs[:k], first[:k])
	copy(rs[k+1:], second[1:])
	a, b := first[k], second[0]
	rs[k].N = a.N
	if a.N == len(a.Buf) {
		rs[k].N += max(b.N, 0)
	}
}

// splitRead is the size from which readSplit splits a read.
const splitRead = 1 << 20

// find returns the run that starts at addr.
func (h *heapCopy) find(addr uint64) *run {
	k := sort.Search(len(h.runs), func(k int) bool { return h.runs[k].start >= addr })
	return &h.runs[k]
}

// ReadRanges serves what the copy holds, and reads the rest.
func (h *heapCopy) ReadRanges(rs []ptrace.Range) (int, error) {
	total := 0
	var miss []int
	for i := range rs {
		r := &rs[i]
		r.N = 0
		if len(r.Buf) == 0 {
			continue
		}
		k := sort.Search(len(h.runs), func(k int) bool { return h.runs[k].end > r.Addr }) // the first run ending after Addr
		if k < len(h.runs) {
			u := &h.runs[k]
			if r.Addr >= u.start && r.Addr+uint64(len(r.Buf)) <= u.start+uint64(u.n) {
				at := u.off + int(r.Addr-u.start)
				r.N = copy(r.Buf, h.buf[at:at+len(r.Buf)])
				total += r.N
				continue
			}
		}
		miss = append(miss, i)
	}
	if len(miss) == 0 {
		return total, nil
	}
	mr := make([]ptrace.Range, len(miss))
	for j, i := range miss {
		mr[j] = ptrace.Range{Addr: rs[i].Addr, Buf: rs[i].Buf}
	}
	n, err := h.under.ReadRanges(mr)
	for j, i := range miss {
		rs[i].N = mr[j].N
	}
	return total + n, err
}

// prefetchLimit is how much heap a scan may copy: half the memory
// available, at most 8 GiB (1 GiB if /proc/meminfo says nothing).
func prefetchLimit() uint64 {
	const most = 8 << 30
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 1 << 30
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				break
			}
			return min(kb<<10/2, most)
		}
	}
	return 1 << 30
}
