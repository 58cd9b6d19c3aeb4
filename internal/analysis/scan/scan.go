// Package scan finds the roots of a stopped process and classifies its
// live heap blocks by reachability (internal/analysis/leak does the marking).
//
// The roots are what memcheck takes: every readable and writable mapping
// of the process, each thread's stack from its stack pointer (less the
// x86-64 red zone) up, and every thread's general registers; a thread the
// agent holds where the program called it (exit, leakpath_leak_check)
// from the program's frame, with its registers there (Caller). Left out,
// as they are not the program's memory: the malloc arenas (brk heap, the
// 64 MiB arena heaps, mappings that hold live blocks) and mmapped chunks,
// whose free chunks hold stale pointers; interior pointers in the C
// library's data (its allocator's state); the dead frames of exited
// threads whose stacks glibc keeps; the agent's own region, data, tables
// and per-thread state, which hold addresses the agent saw.
package scan

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/sys/procmaps"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// Target is a process stopped for a scan.
type Target struct {
	PID    int
	Tracer *ptrace.Tracer // every thread stopped (StopAll); with Held, only reading
	// Held, if not nil, is the registers of the process's only thread,
	// which the agent holds at its exit without a stop (Rsp and Fs_base
	// are what it left; its other registers are spilled above Rsp).
	Held *unix.PtraceRegs
	// Caller, if not nil, replaces the registers of the thread it names
	// (Held's included) with the program's where it called into the agent.
	Caller *Caller
	// Where the agent's own memory is (region.HoldInfo); zero: unknown.
	OwnTable  uint64
	TLSOffset int64
	TLSSize   uint64
	// Extra are roots the program named (LeakSanitizer's root regions
	// and ignored objects): read where readable, holes and all.
	Extra []leak.Root
}

// Stats are the figures of one scan.
type Stats struct {
	Roots     int    // root ranges
	RootBytes uint64 // bytes of roots read
	HeapBytes uint64 // bytes of blocks read
	Threads   int
	Duration  time.Duration
}

// Caller is a thread's state where the program called a function that
// holds it in the agent (exit, leakpath_leak_check): its stack pointer
// past the call, and its callee-saved registers there, which the agent
// recovered from the unwind information and left at RegsAddr (rbx, rbp,
// r12-r15). The frames below SP are the agent's and libc's, and stale
// copies of pointers in them are no roots (memcheck reads only what was
// written; LeakSanitizer starts above its own frames). Its caller-saved
// registers hold nothing of the program's across the call.
type Caller struct {
	TID      int    // the thread; 0: the one whose thread pointer is TP
	TP       uint64 // its thread pointer (fs base)
	SP       uint64
	RegsAddr uint64
}

// regs returns the caller's registers as a thread's, reading the
// callee-saved ones through tr; false if they cannot be read.
func (c *Caller) regs(tr *ptrace.Tracer, tp uint64) (unix.PtraceRegs, bool) {
	var b [48]byte
	if n, _ := tr.ReadMemory(c.RegsAddr, b[:]); n != len(b) {
		return unix.PtraceRegs{}, false
	}
	le := binary.LittleEndian
	return unix.PtraceRegs{
		Rbx: le.Uint64(b[0:]), Rbp: le.Uint64(b[8:]), R12: le.Uint64(b[16:]),
		R13: le.Uint64(b[24:]), R14: le.Uint64(b[32:]), R15: le.Uint64(b[40:]),
		Rsp: c.SP, Fs_base: tp,
	}, true
}

// redZone is the x86-64 SysV red zone below the stack pointer, live in a
// leaf function stopped anywhere.
const redZone = 128

// threadStack is a thread's stack pointer and where its live stack starts.
type threadStack struct{ sp, from uint64 }

// stackOf is the live stack of a thread with registers r: from its stack
// pointer, less the red zone when it was stopped in code of its own (a
// leaf function keeps data there). A thread in a system call is in a libc
// wrapper that keeps none, and what lies below its stack pointer is left
// from calls that returned: a stale pointer there hid a leak of the
// thread held at exit. (LeakSanitizer scans from the stack pointer
// always.)
func stackOf(r *unix.PtraceRegs) threadStack {
	if int64(r.Orig_rax) >= 0 {
		return threadStack{r.Rsp, r.Rsp &^ 7}
	}
	return threadStack{r.Rsp, (r.Rsp - redZone) &^ 7}
}

// arenaHeap is glibc's HEAP_MAX_SIZE on 64-bit: the size and alignment of
// the heaps of its non-main arenas.
const arenaHeap = 64 << 20

// Heap is what a scan read of a stopped process, for a further look at
// it while it is still stopped: its memory (the heap copy in front of
// the tracer), roots and register words.
type Heap struct {
	Mem   leak.Memory
	Roots []leak.Root
	Words []uint64
}

// RunHeap classifies blocks (in any order) in the stopped process t, and
// also returns what the scan read.
func RunHeap(t Target, blocks []leak.Block, opt leak.Options) (*leak.Result, Stats, *Heap, error) {
	start := time.Now()
	var st Stats
	var words []uint64
	var stacks []threadStack
	var holes []span
	for _, r := range threadRegs(t) {
		st.Threads++
		words = append(words, r.R15, r.R14, r.R13, r.R12, r.Rbp, r.Rbx, r.R11, r.R10,
			r.R9, r.R8, r.Rax, r.Rcx, r.Rdx, r.Rsi, r.Rdi)
		stacks = append(stacks, stackOf(&r))
		if t.TLSSize != 0 && r.Fs_base != 0 {
			a := uint64(int64(r.Fs_base) + t.TLSOffset)
			holes = append(holes, span{lo: a, hi: a + t.TLSSize})
		}
	}
	if st.Threads == 0 {
		return nil, st, nil, fmt.Errorf("scan of pid %d: no thread could be inspected", t.PID)
	}
	var lr []leak.Root
	var mem leak.Memory
	// With no block to classify, no more is read: no maps, roots or heap
	// (a shell's short children, mostly; ~0.2 ms of each one's exit).
	if len(blocks) > 0 {
		var err error
		if lr, mem, err = readRoots(t, blocks, stacks, holes, &st, &opt); err != nil {
			return nil, st, nil, err
		}
	}
	res, err := leak.Classify(blocks, words, lr, mem, opt)
	if err != nil {
		return nil, st, nil, fmt.Errorf("scan of pid %d: %w", t.PID, err)
	}
	st.HeapBytes = res.Stats.BlockBytes
	st.Duration = time.Since(start)
	return res, st, &Heap{Mem: mem, Roots: lr, Words: words}, nil
}

// readRoots reads what a scan of blocks needs from the target: its maps,
// the root ranges (less holes) with the pages resident, and the blocks'
// memory. It counts the roots in st and fills opt.Mappings if unset.
func readRoots(t Target, blocks []leak.Block, stacks []threadStack, holes []span, st *Stats, opt *leak.Options) ([]leak.Root, leak.Memory, error) {
	maps, err := readMaps(t.PID)
	if err != nil {
		return nil, nil, err
	}
	own, dead := ownRanges(t)
	holes = append(holes, own...)
	holes = append(holes, deadStacks(dead, maps, stacks, t.TLSOffset, t.TLSSize)...)
	starts := make([]uint64, len(blocks))
	for i, b := range blocks {
		starts[i] = b.Addr
	}
	slices.Sort(starts)
	roots := rootRanges(maps, starts, stacks, mmappedChunks(t.Tracer, maps, blocks))
	roots = subtract(roots, holes)
	roots = resident(t.PID, roots)
	st.Roots = len(roots)
	lr := make([]leak.Root, len(roots))
	for i, r := range roots {
		lr[i] = leak.Root{Addr: r.lo, Len: r.hi - r.lo, What: r.what, StartOnly: isLibc(r.what)}
		st.RootBytes += r.hi - r.lo
	}
	for _, r := range extraRoots(t.Extra, maps) {
		lr = append(lr, r)
		st.Roots++
		st.RootBytes += r.Len
	}
	if opt.Mappings == nil {
		// For the multiple-inheritance heuristic (vtable pointers).
		for _, m := range maps {
			opt.Mappings = append(opt.Mappings, leak.Mapping{Start: m.lo, End: m.hi,
				Read: m.perms[0] == 'r', Write: len(m.perms) > 1 && m.perms[1] == 'w',
				Exec: len(m.perms) > 2 && m.perms[2] == 'x', File: m.inode != 0})
		}
	}
	sorted := blocks
	if !slices.IsSortedFunc(sorted, func(a, b leak.Block) int { return cmp.Compare(a.Addr, b.Addr) }) {
		sorted = slices.Clone(blocks)
		leak.SortBlocks(sorted)
	}
	mem, _ := prefetch(t.Tracer, sorted, prefetchLimit())
	return lr, mem, nil
}

// threadRegs returns the registers of the target's threads, the
// caller's (Target.Caller) in place of its thread's.
func threadRegs(t Target) []unix.PtraceRegs {
	c := t.Caller
	mine := func(tid int, r *unix.PtraceRegs) bool {
		if c == nil || c.SP == 0 || c.RegsAddr == 0 {
			return false
		}
		return (c.TID != 0 && tid == c.TID) || (c.TID == 0 && c.TP != 0 && r.Fs_base == c.TP)
	}
	if t.Held != nil {
		if mine(0, t.Held) {
			if r, ok := c.regs(t.Tracer, t.Held.Fs_base); ok {
				return []unix.PtraceRegs{r}
			}
		}
		return []unix.PtraceRegs{*t.Held}
	}
	var out []unix.PtraceRegs
	for _, tid := range t.Tracer.Threads() {
		r, err := t.Tracer.Regs(tid)
		if err != nil {
			continue // exited meanwhile
		}
		if mine(tid, &r) {
			if cr, ok := c.regs(t.Tracer, r.Fs_base); ok {
				r = cr
			}
		}
		out = append(out, r)
	}
	return out
}

type span struct {
	lo, hi uint64
	what   string
	// zeroFill: private anonymous memory, where a page never written
	// reads as zeros (see resident).
	zeroFill bool
}

// sub is the part [lo, hi) of s.
func (s span) sub(lo, hi uint64) span {
	s.lo, s.hi = lo, hi
	return s
}

type mapping struct {
	lo, hi uint64
	perms  string
	path   string // "" for anonymous
	inode  uint64
}

func readMaps(pid int) ([]mapping, error) {
	b, err := procmaps.Read(pid)
	if err != nil {
		return nil, fmt.Errorf("scan of pid %d: %w", pid, err)
	}
	var ms []mapping
	for _, m := range procmaps.Parse(b) {
		ms = append(ms, mapping{lo: m.Lo, hi: m.Hi, perms: m.Perms, path: m.Path, inode: m.Inode})
	}
	return ms, nil
}

// rootRanges picks the mappings to scan. starts are the blocks' addresses,
// sorted; stacks the threads' stacks (a mapping holding one is scanned
// from where the stack starts); chunks the extents of malloc's mmapped
// chunks (mmappedChunks), sorted. The kernel merges adjacent anonymous
// mappings of the same permissions: a mapping is taken as pieces between
// the mmapped chunks in it, each judged as a mapping of its own (a
// program's memory beside a large block is a root, not malloc's).
func rootRanges(maps []mapping, starts []uint64, stacks []threadStack, chunks []span) []span {
	var out []span
	for i, m := range maps {
		if len(m.perms) < 2 || m.perms[0] != 'r' || m.perms[1] != 'w' {
			continue
		}
		switch {
		case m.path == "[heap]",
			strings.HasPrefix(m.path, "/memfd:leakpath"),
			filepath.Base(m.path) == "libleakpath.so",
			m.path == "[vvar]", m.path == "[vsyscall]", m.path == "[vdso]":
			continue
		}
		lo, what := m.lo, m.path
		for _, st := range stacks {
			if st.sp >= m.lo && st.sp < m.hi {
				lo = max(m.lo, st.from)
				what = "stack"
				break
			}
		}
		if what == "" {
			what = "anonymous"
		}
		private := len(m.perms) > 3 && m.perms[3] == 'p'
		zero := private && (m.path == "" || m.path == "[stack]")
		for _, p := range pieces(m.lo, m.hi, chunks) {
			if holdsBlock(starts, p.lo, p.hi) || isArenaHeap(maps, i, p.lo, p.hi) {
				continue
			}
			if p.lo = max(p.lo, lo); p.lo < p.hi {
				out = append(out, span{p.lo, p.hi, what, zero})
			}
		}
	}
	return out
}

// isLibc reports whether path is the C library (glibc's libc.so.6), whose
// data holds its allocator's state: the main arena's top, bins and
// fastbins point at chunk headers, which lie in the last bytes of the
// blocks before them (interior pointers that made a leaked block next to
// a free chunk or the top "possibly lost").
func isLibc(path string) bool {
	b := filepath.Base(path)
	return b == "libc.so.6" || strings.HasPrefix(b, "libc-2.") && strings.HasSuffix(b, ".so")
}

// pieces returns [lo, hi) less the chunks (sorted) in it.
func pieces(lo, hi uint64, chunks []span) []span {
	var out []span
	i := sort.Search(len(chunks), func(k int) bool { return chunks[k].hi > lo })
	for ; i < len(chunks) && chunks[i].lo < hi; i++ {
		if c := chunks[i]; c.lo > lo {
			out = append(out, span{lo: lo, hi: c.lo})
		}
		lo = max(lo, chunks[i].hi)
	}
	if lo < hi {
		out = append(out, span{lo: lo, hi: hi})
	}
	return out
}

// glibc's chunk header flag of a chunk malloc got with mmap of its own.
const chunkMmapped = 2

// mmappedChunks returns, sorted, the extents of the blocks that are glibc's
// mmapped chunks (each one mapping of its own, which the kernel may have
// merged with a neighbour): the header before the block says so (the
// IS_MMAPPED bit of its size word, and its prev_size the offset from the
// mapping's start, both page multiples) and the extent lies in one
// anonymous mapping. Candidates are the blocks in anonymous mappings other
// than the brk heap that start 16 bytes into a page (where malloc puts an
// mmapped chunk's block) or are large (an aligned one is further in).
func mmappedChunks(tr *ptrace.Tracer, maps []mapping, blocks []leak.Block) []span {
	const page = 4096
	var rs []ptrace.Range
	var cand []leak.Block
	for _, b := range blocks {
		if b.Addr < 16 || (b.Addr%page != 16 && b.Size < 64<<10) {
			continue
		}
		i := sort.Search(len(maps), func(k int) bool { return maps[k].hi > b.Addr })
		if i == len(maps) || maps[i].lo > b.Addr-16 || maps[i].path != "" {
			continue
		}
		cand = append(cand, b)
		rs = append(rs, ptrace.Range{Addr: b.Addr - 16, Buf: make([]byte, 16)})
	}
	var out []span
	for len(rs) > 0 {
		n := min(len(rs), 1024)
		tr.ReadRanges(rs[:n])
		for k, r := range rs[:n] {
			if r.N != 16 {
				continue
			}
			b := cand[k]
			prev := binary.LittleEndian.Uint64(r.Buf[0:])
			size := binary.LittleEndian.Uint64(r.Buf[8:])
			if size&chunkMmapped == 0 {
				continue
			}
			size &^= 7
			lo := b.Addr - 16 - prev
			hi := lo + prev + size
			if prev > b.Addr-16 || lo%page != 0 || (prev+size)%page != 0 || hi < lo || b.Addr+b.Size > hi {
				continue
			}
			i := sort.Search(len(maps), func(k int) bool { return maps[k].hi > lo })
			if i < len(maps) && maps[i].lo <= lo && hi <= maps[i].hi {
				out = append(out, span{lo: lo, hi: hi})
			}
		}
		rs, cand = rs[n:], cand[n:]
	}
	slices.SortFunc(out, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	return out
}

// holdsBlock reports whether a block starts in [lo, hi): then malloc owns
// the mapping (a mmapped chunk, an arena).
func holdsBlock(starts []uint64, lo, hi uint64) bool {
	i, _ := slices.BinarySearch(starts, lo)
	return i < len(starts) && starts[i] < hi
}

// isArenaHeap reports whether [lo, hi), in maps[i], is a heap of a glibc
// arena other than the main one: anonymous, aligned to arenaHeap, its
// writable part followed by an inaccessible rest of the same reservation.
// (A piece of a mapping: the kernel may have merged a chunk malloc mapped
// just below the heap with it.)
func isArenaHeap(maps []mapping, i int, lo, hi uint64) bool {
	m := maps[i]
	if m.path != "" || lo%arenaHeap != 0 || lo < m.lo || hi > m.hi {
		return false
	}
	size := hi - lo
	if size == arenaHeap {
		return true
	}
	if hi == m.hi && i+1 < len(maps) {
		n := maps[i+1]
		if n.lo == m.hi && n.path == "" && strings.HasPrefix(n.perms, "---") && size+(n.hi-n.lo) == arenaHeap {
			return true
		}
	}
	return false
}

// ownRanges reads the agent's table of its own mappings, and of exited
// threads' stacks.
func ownRanges(t Target) (own []span, dead []deadStack) {
	if t.OwnTable == 0 {
		return nil, nil
	}
	buf := make([]byte, wire.OffOwnDead+wire.DeadMax*wire.DeadSize)
	n, _ := t.Tracer.ReadMemory(t.OwnTable, buf)
	if n < wire.OffOwnRanges {
		return nil, nil
	}
	le := binary.LittleEndian
	page := uint64(unix.Getpagesize())
	count := min(int(le.Uint32(buf[wire.OffOwnCount:])), wire.OwnMax)
	for i := 0; i < count; i++ {
		o := wire.OffOwnRanges + i*wire.OwnRangeSize
		if o+wire.OwnRangeSize > n {
			break
		}
		a, l := le.Uint64(buf[o:]), le.Uint64(buf[o+8:])
		if a != 0 && l != 0 && a+l > a {
			hi := (a + l + page - 1) &^ (page - 1)
			own = append(own, span{lo: a, hi: hi})
		}
	}
	for i := 0; i < wire.DeadMax; i++ {
		o := wire.OffOwnDead + i*wire.DeadSize
		if o+wire.DeadSize > n {
			break
		}
		a, l, tp := le.Uint64(buf[o:]), le.Uint64(buf[o+8:]), le.Uint64(buf[o+16:])
		if a != 0 && l != 0 && a+l > a {
			dead = append(dead, deadStack{span{lo: a, hi: a + l}, tp})
		}
	}
	return own, dead
}

// deadStack is the agent's note of an exited thread: the dead frames of
// its stack, and its thread pointer.
type deadStack struct {
	frames span
	tp     uint64
}

// deadStacks returns what is no root of exited threads' stacks (the
// agent's notes, ownRanges) that are still such, glibc's cached stacks:
// the dead frames, where what the thread's calls left lies (memcheck
// reads only what was written since the stack shrank; LeakSanitizer
// scans live threads only), and the agent's per-thread state at tp +
// tlsOff. A note holds only while its frames start a writable anonymous
// mapping just above a guard page, and no live thread's stack pointer is
// in that mapping (glibc gave the stack to a new thread, or unmapped it
// and the place went to other memory).
func deadStacks(dead []deadStack, maps []mapping, stacks []threadStack, tlsOff int64, tlsSize uint64) []span {
	var out []span
	for _, d := range dead {
		i, ok := slices.BinarySearchFunc(maps, d.frames.lo, func(m mapping, a uint64) int { return cmp.Compare(m.lo, a) })
		if !ok || i == 0 {
			continue
		}
		m, g := maps[i], maps[i-1]
		if m.path != "" || !strings.HasPrefix(m.perms, "rw") || d.frames.hi > m.hi ||
			g.hi != m.lo || g.path != "" || !strings.HasPrefix(g.perms, "---") {
			continue
		}
		live := false
		for _, st := range stacks {
			live = live || (st.sp >= m.lo && st.sp < m.hi)
		}
		if live {
			continue
		}
		out = append(out, d.frames)
		if a := uint64(int64(d.tp) + tlsOff); tlsSize != 0 && d.tp != 0 && a >= m.lo && a+tlsSize <= m.hi {
			out = append(out, span{lo: a, hi: a + tlsSize})
		}
	}
	return out
}

// subtract removes holes from roots.
func subtract(roots, holes []span) []span {
	if len(holes) == 0 {
		return roots
	}
	slices.SortFunc(holes, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var out []span
	for _, r := range roots {
		lo := r.lo
		for _, h := range holes {
			if h.hi <= lo || h.lo >= r.hi {
				continue
			}
			if h.lo > lo {
				out = append(out, r.sub(lo, h.lo))
			}
			lo = max(lo, h.hi)
		}
		if lo < r.hi {
			out = append(out, r.sub(lo, r.hi))
		}
	}
	return out
}

// ReadString reads a NUL-terminated string of at most max bytes at addr.
func ReadString(tr *ptrace.Tracer, addr uint64, max int) (string, error) {
	var out []byte
	buf := make([]byte, 4096)
	for len(out) < max {
		// Stay within the page: the next one may not be mapped.
		n := min(len(buf), int(4096-addr%4096), max-len(out))
		k, err := tr.ReadMemory(addr, buf[:n])
		if i := bytes.IndexByte(buf[:k], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:k]...)
		if err != nil {
			return string(out), err
		}
		addr += uint64(k)
	}
	return string(out), nil
}
