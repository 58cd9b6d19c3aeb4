package leak

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// Kind is how a block is reached at the time of the scan (see the package
// documentation). The zero value, Unclassified, is never returned by
// Classify; it stands for "not scanned" in callers' tables.
type Kind = event.LeakKind

// The kinds, in increasing order of reachability (event's numbering, so
// a result goes into the model's records as is).
const (
	Unclassified = event.Unclassified
	Definite     = event.Definite
	Indirect     = event.Indirect
	Possible     = event.Possible
	Reachable    = event.Reachable
)

// Heuristic names the memcheck heuristic that let an interior pointer count
// as a pointer to a block's start.
type Heuristic uint8

// The heuristics of memcheck's --leak-check-heuristics, in the order in
// which memcheck tries them.
const (
	NoHeuristic Heuristic = iota
	StdString
	Length64
	NewArray
	MultipleInheritance
)

var heuristicNames = [...]string{"none", "stdstring", "length64", "newarray", "multipleinheritance"}

// String returns the heuristic's name as memcheck spells it.
func (h Heuristic) String() string {
	if int(h) < len(heuristicNames) {
		return heuristicNames[h]
	}
	return fmt.Sprintf("Heuristic(%d)", uint8(h))
}

// Block is one live heap block: Size bytes from Addr (Size may be 0).
// Runtime marks a block of the C runtime's own (the dynamic linker's DTV
// and dynamic TLS blocks): any pointer into it, interior or not, makes it
// reachable.
type Block struct {
	Addr, Size uint64
	Runtime    bool
	// PastEnd: a pointer just past the block's end counts as one to its
	// start. For an 8-byte block from operator new[]: new T[0] of a type
	// with a destructor stores the count (0) there and returns the
	// address after it, all the program keeps (LeakSanitizer's rule).
	PastEnd bool
}

// Root is a range of memory whose words are roots: a writable segment, a
// thread's stack from its stack pointer up. What names it for the caller;
// Classify does not use it. StartOnly: its words count only as start
// pointers (the C library's data, where its allocator's state points at
// chunk headers, inside the blocks before them: memcheck and
// LeakSanitizer replace that allocator and never see such words). The
// words of blocks in a root are left out, unless Heap is set: a range the
// program itself names a root (a LeakSanitizer root region, an object it
// says is no leak), read whole.
type Root struct {
	Addr, Len uint64
	What      string
	StartOnly bool
	Heap      bool
}

// Memory reads the stopped process's memory. ReadRanges fills each range's
// Buf from its Addr and sets its N to the bytes read; it goes on past
// ranges it cannot read and returns the first error. *ptrace.Tracer
// implements it.
type Memory interface {
	ReadRanges(rs []ptrace.Range) (int, error)
}

// Mapping is one mapping of the process (a line of /proc/PID/maps):
// [Start, End), its permissions, and whether a file backs it. Only the
// multipleinheritance heuristic uses mappings, to recognise vtables.
type Mapping struct {
	Start, End        uint64
	Read, Write, Exec bool
	File              bool // backed by a file (not anonymous, [heap], [stack], ...)
}

// Options tune Classify. The zero value turns the heuristics off; start
// from DefaultOptions.
type Options struct {
	// Heuristics turns memcheck's heuristics on (all four, like its
	// default --leak-check-heuristics=all): some interior pointers then
	// count as start pointers.
	Heuristics bool
	// Mappings are the process's mappings, in any order. Without them the
	// multipleinheritance heuristic never applies (it needs to tell
	// vtables by the mappings they lie in).
	Mappings []Mapping
	// Progress, if not nil, is called now and then with the bytes scanned
	// so far and an estimate of the bytes to scan in all.
	Progress func(done, total uint64)
}

// DefaultOptions returns memcheck's defaults: every heuristic on.
func DefaultOptions() Options {
	return Options{Heuristics: true}
}

// Stats says what a Classify call did.
type Stats struct {
	RootBytes       uint64        // bytes of roots scanned
	BlockBytes      uint64        // bytes of blocks scanned (a block scanned twice counts twice)
	Words           uint64        // words examined, registers included
	UnreadableBytes uint64        // bytes of roots and blocks that could not be read, skipped
	HeuristicChecks uint64        // interior pointers tested against the heuristics
	Duration        time.Duration // wall time of the call
}

// Result is the classification of the blocks passed to Classify; every
// slice is parallel to them.
type Result struct {
	Kinds []Kind
	// Owner is, for an indirect block, the index of the definite block
	// leading its clique; -1 for every other block.
	Owner []int32
	// IndirectBytes and IndirectBlocks are, for a definite block, the
	// bytes and blocks of the indirect blocks it leads; 0 otherwise.
	IndirectBytes  []uint64
	IndirectBlocks []uint32
	// Heuristic is, for a reachable block that only a heuristic reached
	// (no start pointer from a reachable place), the heuristic that did.
	Heuristic []Heuristic
	Stats     Stats
}

// Block states during the scan (memcheck's Reachedness), and flags, packed
// into one byte per block for cache locality.
const (
	stUnreached = 0
	stPossible  = 1
	stReachable = 2
	stMask      = 3

	fPending = 1 << 2 // on the mark stack of reachable blocks
	fRuntime = 1 << 3 // Block.Runtime
	fZero    = 1 << 4 // Size 0: its span is [Addr, Addr+1) for lookups only
	fPendPos = 1 << 5 // on the mark stack of possibly reachable blocks
	fHeur    = 1 << 6 // reachable by a heuristic only (which: heur)
	fPastEnd = 1 << 7 // Block.PastEnd: its span is [Addr, Addr+Size+1) for lookups only
)

// span is a block's extent in address order: [start, end), end being
// start+1 for a zero-size block, so that a pointer equal to its start finds
// it (memcheck does the same), and one past its end for a PastEnd block,
// so that a pointer just past it finds it.
type span struct{ start, end uint64 }

// Sizes of the read batches: 8 MiB of buffer, at most 1024 ranges (the
// kernel's IOV_MAX) per ReadRanges call.
const (
	batchWords  = 1 << 20
	batchRanges = 1024
)

// classifier holds the state of one Classify call, blocks in address order.
type classifier struct {
	mem   Memory
	opt   Options
	spans []span
	orig  []int32 // index in the caller's slice
	flags []uint8
	heur  []Heuristic // made when a heuristic first applies
	idx   index

	// The mark stacks: reachable blocks are scanned first, so that a
	// block pushed as possible and found reachable meanwhile is scanned
	// once, not twice.
	stack  []int32 // reachable (fPending)
	pstack []int32 // possibly reachable (fPendPos)

	buf    []uint64 // read buffer, word-aligned
	bytes  []byte   // the same memory as bytes
	ranges []ptrace.Range
	pieces []piece
	woff   []int32 // per piece: its first word in buf
	wgot   []int32 // per piece: the words read
	carry  []piece // remainders of pieces split or partly unreadable

	maps   []Mapping // sorted by Start
	hq     []hcheck
	hdone  map[uint64]struct{} // interior pointers already tested
	vtable map[uint64]bool

	hits []hit

	huge [][]byte // mappings to unmap when done (hugeSlice)

	stats       Stats
	done, total uint64
	requested   uint64 // bytes asked of mem
	readAny     bool   // mem read at least one byte
}

// Classify classifies blocks the way memcheck's leak check does (see the
// package documentation): it scans the roots, the register values in
// words, and the blocks they lead to, reading memory through mem. Blocks
// may come in any order but must not overlap. Memory that cannot be read
// is skipped and counted in Stats; the error is for a process that went
// away during the scan, overlapping blocks, and the like.
func Classify(blocks []Block, words []uint64, roots []Root, mem Memory, opt Options) (*Result, error) {
	t0 := time.Now()
	n := len(blocks)
	res := &Result{
		Kinds:          make([]Kind, n),
		Owner:          make([]int32, n),
		IndirectBytes:  make([]uint64, n),
		IndirectBlocks: make([]uint32, n),
		Heuristic:      make([]Heuristic, n),
	}
	if n == 0 {
		res.Stats.Duration = time.Since(t0)
		return res, nil
	}
	if mem == nil {
		return nil, errors.New("leak: no memory to read blocks from")
	}
	if n > 1<<31-2 {
		return nil, fmt.Errorf("leak: %d blocks are too many (at most %d)", n, 1<<31-2)
	}
	c := &classifier{mem: mem, opt: opt}
	defer c.freeHuge()
	if err := c.sortBlocks(blocks); err != nil {
		return nil, err
	}
	c.idx.build(c.spans, func(n int) []rankWord { return hugeSlice[rankWord](c, n) })
	c.stack = make([]int32, 0, min(n, 1<<16))
	c.pstack = make([]int32, 0, min(n, 1<<10))
	if opt.Heuristics && len(opt.Mappings) > 0 {
		c.maps = slices.Clone(opt.Mappings)
		slices.SortFunc(c.maps, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	}
	for _, r := range roots {
		c.total += r.Len
	}
	for k := range c.spans {
		c.total += c.size(int32(k))
	}
	c.readBuffers(c.total)
	if err := c.markPhase(words, roots); err != nil {
		return nil, err
	}
	g, err := c.leakGraph()
	if err != nil {
		return nil, err
	}
	if c.requested > 0 && !c.readAny {
		return nil, errors.New("leak: no memory could be read (roots and blocks all unreadable)")
	}
	c.cliques(g, res)
	c.stats.Duration = time.Since(t0)
	res.Stats = c.stats
	if c.opt.Progress != nil {
		c.opt.Progress(c.total, c.total)
	}
	return res, nil
}

// SortBlocks sorts blocks by address (a radix sort: millions of blocks
// take a fraction of a comparison sort's time).
func SortBlocks(blocks []Block) {
	addrs := make([]uint64, len(blocks))
	sorted := true
	for i, b := range blocks {
		addrs[i] = b.Addr
		if i > 0 && b.Addr < blocks[i-1].Addr {
			sorted = false
		}
	}
	if sorted {
		return
	}
	radixSort(addrs, blocks)
}

// sortBlocks fills spans, orig and flags in address order and checks that
// no two blocks overlap.
func (c *classifier) sortBlocks(blocks []Block) error {
	n := len(blocks)
	addrs := make([]uint64, n)
	c.orig = make([]int32, n)
	sorted := true
	for i, b := range blocks {
		if b.Addr+b.Size < b.Addr {
			return fmt.Errorf("leak: block %d at %#x: size %#x runs past the end of the address space", i, b.Addr, b.Size)
		}
		addrs[i] = b.Addr
		c.orig[i] = int32(i)
		if i > 0 && b.Addr < blocks[i-1].Addr {
			sorted = false
		}
	}
	if !sorted {
		radixSort(addrs, c.orig)
	}
	c.spans = hugeSlice[span](c, n)
	c.flags = hugeSlice[uint8](c, n)
	var prevEnd uint64
	for k, a := range addrs {
		b := &blocks[c.orig[k]]
		end := a + b.Size
		var f uint8
		if b.Size == 0 {
			end++
			f |= fZero
		} else if b.PastEnd {
			end++
			f |= fPastEnd
		}
		if k > 0 && a == prevEnd-1 && c.flags[k-1]&fPastEnd != 0 {
			// This block starts just past the previous one: the address is
			// its start, not the other's end.
			c.spans[k-1].end--
			c.flags[k-1] &^= fPastEnd
		} else if k > 0 && a < prevEnd {
			p := blocks[c.orig[k-1]]
			return fmt.Errorf("leak: block %d [%#x, +%d) overlaps block %d [%#x, +%d)",
				c.orig[k], a, b.Size, c.orig[k-1], p.Addr, p.Size)
		}
		prevEnd = end
		if b.Runtime {
			f |= fRuntime
		}
		c.spans[k] = span{a, end}
		c.flags[k] = f
	}
	return nil
}

// radixSort sorts keys, and vals along, stably: a least-significant-digit
// radix sort on 11-bit digits, skipping the digits all keys share (the
// high bits of addresses). Millions of blocks come in hash-table order;
// this is several times faster than a comparison sort.
func radixSort[V any](keys []uint64, vals []V) {
	const digit = 11
	n := len(keys)
	ks, vs := keys, vals
	tk, tv := make([]uint64, n), make([]V, n)
	var count [1 << digit]int
	for shift := uint(0); shift < 64; shift += digit {
		clear(count[:])
		for _, k := range ks {
			count[(k>>shift)&(1<<digit-1)]++
		}
		if count[(ks[0]>>shift)&(1<<digit-1)] == n {
			continue
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for i, k := range ks {
			d := (k >> shift) & (1<<digit - 1)
			tk[count[d]], tv[count[d]] = k, vs[i]
			count[d]++
		}
		ks, tk = tk, ks
		vs, tv = tv, vs
	}
	if &ks[0] != &keys[0] {
		copy(keys, ks)
		copy(vals, vs)
	}
}

// size returns block k's size.
func (c *classifier) size(k int32) uint64 {
	if c.flags[k]&fZero != 0 {
		return 0
	}
	if c.flags[k]&fPastEnd != 0 {
		return c.spans[k].end - c.spans[k].start - 1
	}
	return c.spans[k].end - c.spans[k].start
}

// push puts block k on the mark stack for its state unless it is there
// already.
func (c *classifier) push(k int32) {
	f := c.flags[k]
	if f&stMask == stReachable {
		if f&fPending == 0 {
			c.flags[k] = f | fPending
			c.stack = append(c.stack, k)
		}
	} else if f&fPendPos == 0 {
		c.flags[k] = f | fPendPos
		c.pstack = append(c.pstack, k)
	}
}

// pop returns the next block to scan, reachable ones first.
func (c *classifier) pop() (int32, bool) {
	if n := len(c.stack); n > 0 {
		k := c.stack[n-1]
		c.stack = c.stack[:n-1]
		c.flags[k] &^= fPending
		return k, true
	}
	for n := len(c.pstack); n > 0; n = len(c.pstack) {
		k := c.pstack[n-1]
		c.pstack = c.pstack[:n-1]
		c.flags[k] &^= fPendPos
		if c.flags[k]&stMask == stPossible {
			return k, true
		}
		// Found reachable since: it went on the other stack.
	}
	return 0, false
}

// markPhase finds the reachable and possibly reachable blocks: memcheck's
// scan of the root set and registers, then of its mark stack, with the
// reads batched. The result does not depend on the order in which blocks
// are scanned (states only go up, and a block whose state goes up is
// scanned again), which is what lets the reads come in any batches.
func (c *classifier) markPhase(words []uint64, roots []Root) error {
	c.stats.Words += uint64(len(words))
	c.mark(words, true)
	ri := rootIter{spans: c.spans, flags: c.flags, roots: roots}
	// Blocks popped and not scanned yet: a block pushed again meanwhile
	// is merely scanned twice.
	q, qi := make([]int32, 0, 256), 0
	src := func() (piece, bool) {
		if p, ok := ri.next(); ok {
			return p, true
		}
		for {
			if qi == len(q) {
				// Pop many at once and read their spans in a tight
				// loop, for the cache misses to overlap.
				q, qi = q[:0], 0
				for len(q) < cap(q) {
					k, ok := c.pop()
					if !ok {
						break
					}
					q = append(q, k)
				}
				if len(q) == 0 {
					return piece{}, false
				}
				var sink uint64
				for _, k := range q {
					sink += c.spans[k].start
				}
				c.idx.sink += sink
			}
			k := q[qi]
			qi++
			if p, ok := c.blockPiece(k); ok {
				return p, true
			}
		}
	}
	visit := func(p piece, hs []hit) {
		// The state now, not when pushed: a block upgraded since is
		// scanned as what it has become.
		if p.blk == rootStartOnly {
			hs = startHits(hs)
		}
		c.markHits(hs, p.blk < 0 || c.flags[p.blk]&stMask == stReachable)
	}
	for {
		more, err := c.batch(src, visit)
		if err != nil {
			return err
		}
		if len(c.hq) > 0 {
			if err := c.resolveHeuristics(); err != nil {
				return err
			}
		}
		if !more && len(c.stack)+len(c.pstack) == 0 {
			return nil
		}
	}
}

// blockPiece returns the aligned words of block k to scan.
func (c *classifier) blockPiece(k int32) (piece, bool) {
	if c.flags[k]&fZero != 0 {
		return piece{}, false
	}
	s := c.spans[k]
	a, e := (s.start+7)&^7, (s.start+c.size(k))&^7
	if e <= a {
		return piece{}, false
	}
	return piece{addr: a, n: e - a, blk: k}, true
}

// mark looks at words found in a root (def) or in a block, reachable (def)
// or possibly reachable, for pointers to blocks: memcheck's
// lc_push_without_clique_if_a_chunk_ptr.
func (c *classifier) mark(ws []uint64, def bool) {
	for len(ws) > 0 {
		hs := c.idx.locate(ws, c.hits[:0], 0)
		ws = ws[min(len(ws), lookBatch):]
		c.touchFlags(hs)
		c.markHits(hs, def)
	}
}

// markHits is mark for the pointers found.
func (c *classifier) markHits(hs []hit, def bool) {
	for _, h := range hs {
		f := c.flags[h.k]
		if f&fPastEnd != 0 && h.v == c.spans[h.k].end-1 {
			h.start = true // just past its end: the span's extra byte
		}
		if f&stMask == stReachable {
			// A start pointer from a reachable place makes the heuristic
			// needless: it is not why the block is reachable.
			if def && h.start && f&fHeur != 0 {
				c.flags[h.k] = f &^ fHeur
			}
			continue
		}
		c.reach(h.v, h.k, h.start, def)
	}
}

// touchFlags reads the flags of the blocks hit, for their cache misses to
// overlap (see index.locate).
func (c *classifier) touchFlags(hs []hit) {
	var sink uint8
	for _, h := range hs {
		sink += c.flags[h.k]
	}
	c.idx.sink += uint64(sink)
}

// reach records that v, found in a reachable place (def) or a possibly
// reachable one, points into block k, which is not reachable yet.
func (c *classifier) reach(v uint64, k int32, start, def bool) {
	f := c.flags[k]
	if (start && def) || f&fRuntime != 0 {
		c.flags[k] = f&^stMask | stReachable
		c.push(k)
		return
	}
	if def && !start && c.opt.Heuristics {
		c.maybeCheck(v, k)
	}
	if f&stMask == stUnreached {
		c.flags[k] = f&^stMask | stPossible
		c.push(k)
	}
}

// graph is the pointers between the blocks the mark phase did not reach,
// numbered in address order: u is block ul[u], and its targets are
// to[off[u]:off[u+1]]. The clique pass then works on arrays as small as
// the leak, not as the heap.
type graph struct {
	ul  []int32
	off []uint32
	to  []int32
}

// leakGraph scans every block the mark phase did not reach, in address
// order, and records which unreached blocks each points into (start or
// interior pointers alike, as memcheck's clique pass does). Reading them
// all first, in large batches, is what makes the clique pass cheap.
func (c *classifier) leakGraph() (*graph, error) {
	n := len(c.spans)
	g := &graph{}
	cid := make([]int32, n) // k -> u, for unreached blocks
	var bytes uint64
	for k, f := range c.flags {
		if f&stMask == stUnreached {
			cid[k] = int32(len(g.ul))
			g.ul = append(g.ul, int32(k))
			bytes += c.size(int32(k))
		}
	}
	m := len(g.ul)
	var edges []uint64
	var sorted bool
	if bytes >= parallelGraph && m > 1 && runtime.GOMAXPROCS(0) > 1 {
		// Two halves of about as many bytes, the second on a goroutine of
		// its own: at an exit or a snapshot the program is held, its core
		// idle, and a program that leaked much has most of its heap here.
		// The first half's blocks come first: its edges, then the
		// second's, are in order as one scan's would be.
		half, acc := 0, uint64(0)
		for half < m-1 && acc < bytes/2 {
			acc += c.size(g.ul[half])
			half++
		}
		w := c.worker(bytes - acc)
		var e1 []uint64
		var s1 bool
		var err1 error
		done := make(chan struct{})
		go func() {
			defer close(done)
			e1, s1, err1 = w.edges(g.ul[half:], cid)
		}()
		e0, s0, err := c.edges(g.ul[:half], cid)
		<-done
		c.absorb(w)
		if err == nil {
			err = err1
		}
		if err != nil {
			return nil, err
		}
		edges, sorted = append(e0, e1...), s0 && s1
	} else {
		var err error
		if edges, sorted, err = c.edges(g.ul, cid); err != nil {
			return nil, err
		}
	}
	if !sorted {
		slices.Sort(edges)
		edges = slices.Compact(edges)
	}
	if len(edges) >= 1<<32 {
		return nil, fmt.Errorf("leak: %d pointers between leaked blocks are too many", len(edges))
	}
	g.off = make([]uint32, m+1)
	g.to = make([]int32, len(edges))
	for i, e := range edges {
		g.off[e>>32+1]++
		g.to[i] = cid[uint32(e)]
	}
	for u := 1; u <= m; u++ {
		g.off[u] += g.off[u-1]
	}
	return g, nil
}

// parallelGraph is the bytes of unreached blocks from which leakGraph
// scans them in two halves at once (a variable for the tests).
var parallelGraph uint64 = 1 << 20

// edges scans the unreached blocks ul (cid: each block's number among
// the unreached) and returns the pointers from one to another as u<<32 |
// k: u the source's number, k the target's block (leakGraph makes it its
// number); sorted reports whether they came in order (a retried
// remainder of a block comes later).
func (c *classifier) edges(ul, cid []int32) (edges []uint64, sorted bool, err error) {
	next := 0
	src := func() (piece, bool) {
		for next < len(ul) {
			k := ul[next]
			next++
			if p, ok := c.blockPiece(k); ok {
				return p, true
			}
		}
		return piece{}, false
	}
	sorted = true
	last := uint64(0)
	visit := func(p piece, hs []hit) {
		s := uint64(cid[p.blk]) << 32
		if s < last&^(1<<32-1) {
			sorted = false // a retried remainder: sort below
		}
		for _, h := range hs {
			t := h.k
			if t == p.blk || c.flags[t]&stMask != stUnreached {
				continue
			}
			// Successive pointers to one block (an array of them, a
			// start and an interior one) make one edge.
			if e := s | uint64(uint32(t)); e != last {
				edges = append(edges, e)
				last = e
			}
		}
	}
	for {
		more, err := c.batch(src, visit)
		if err != nil {
			return nil, false, err
		}
		if !more {
			return edges, sorted, nil
		}
	}
}

// worker returns a classifier that scans bytes of blocks alongside c: c's
// memory, blocks, flags and index, which neither changes meanwhile, with
// buffers of its own (the index's scratch is in its copy). absorb takes
// its counts back.
func (c *classifier) worker(bytes uint64) *classifier {
	w := &classifier{mem: c.mem, opt: c.opt, spans: c.spans, flags: c.flags, idx: c.idx}
	w.opt.Progress = nil // c reports
	w.readBuffers(bytes)
	return w
}

// readBuffers makes the buffers batch reads into and looks up from, for
// a scan of about bytes (a small one needs no 8 MiB buffer).
func (c *classifier) readBuffers(bytes uint64) {
	c.hits = make([]hit, 0, lookBatch)
	c.ranges = make([]ptrace.Range, 0, batchRanges)
	c.pieces = make([]piece, 0, batchRanges)
	c.buf = make([]uint64, min(batchWords, max(4096, bytes/8+1)))
	c.bytes = unsafe.Slice((*byte)(unsafe.Pointer(&c.buf[0])), len(c.buf)*8)
}

// absorb adds what worker w read to c's counts.
func (c *classifier) absorb(w *classifier) {
	c.stats.RootBytes += w.stats.RootBytes
	c.stats.BlockBytes += w.stats.BlockBytes
	c.stats.Words += w.stats.Words
	c.stats.UnreadableBytes += w.stats.UnreadableBytes
	c.done += w.done
	c.requested += w.requested
	c.readAny = c.readAny || w.readAny
	c.idx.sink += w.idx.sink
}

// cliques gathers the unreached blocks into cliques the way memcheck does:
// leaders in address order; each takes every block it leads to that no
// earlier clique took, and a former leader it leads to becomes indirect in
// it, bringing its clique along. Then it fills res.
func (c *classifier) cliques(g *graph, res *Result) {
	m := int32(len(g.ul))
	indirect := make([]bool, m)
	owner := make([]int32, m) // the leader at the time
	// A clique's members do not depend on the order in which its leader's
	// closure is walked, so it is walked a level at a time.
	var front, next []int32
	for i := int32(0); i < m; i++ {
		if indirect[i] {
			continue
		}
		front = append(front[:0], i)
		for len(front) > 0 {
			next = next[:0]
			for _, x := range front {
				for _, t := range g.to[g.off[x]:g.off[x+1]] {
					if t == i || indirect[t] {
						continue
					}
					indirect[t] = true
					owner[t] = i
					if t > i {
						next = append(next, t)
					}
					// t < i is a former leader: everything it leads to
					// is in its clique already, so scanning it again (as
					// memcheck does) would find nothing new.
				}
			}
			front, next = next, front
		}
	}
	// Owners are leaders at the time; a leader absorbed later hands its
	// blocks to the one that absorbed it. An absorbed leader's owner comes
	// after it in address order, so resolving those backwards makes each
	// final; then every other indirect block's leader, if absorbed, points
	// to its final owner.
	for u := m - 1; u >= 0; u-- {
		if indirect[u] && owner[u] > u {
			if o := owner[u]; indirect[o] {
				owner[u] = owner[o]
			}
		}
	}
	indB := make([]uint64, m)
	indN := make([]uint32, m)
	for u := int32(0); u < m; u++ {
		if indirect[u] {
			o := owner[u]
			if o < u && indirect[o] {
				o = owner[o]
				owner[u] = o
			}
			indB[o] += c.size(g.ul[u])
			indN[o]++
		}
	}
	for k, f := range c.flags {
		i := c.orig[k]
		res.Owner[i] = -1
		switch f & stMask {
		case stReachable:
			res.Kinds[i] = Reachable
			if f&fHeur != 0 {
				res.Heuristic[i] = c.heur[k]
			}
		case stPossible:
			res.Kinds[i] = Possible
		}
	}
	for u, k := range g.ul {
		i := c.orig[k]
		if indirect[u] {
			res.Kinds[i] = Indirect
			res.Owner[i] = c.orig[g.ul[owner[u]]]
		} else {
			res.Kinds[i] = Definite
			res.IndirectBytes[i] = indB[u]
			res.IndirectBlocks[i] = indN[u]
		}
	}
}
