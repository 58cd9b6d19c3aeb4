// Package scan finds the roots of a stopped process and classifies its
// live heap blocks by reachability (internal/leak does the marking).
//
// The roots are what memcheck takes: every readable and writable mapping
// of the process, each thread's stack from its stack pointer (less the
// x86-64 red zone) up, and every thread's general registers. Left out, as
// they are not the program's memory: the malloc arenas (brk heap, the
// 64 MiB arena heaps, mappings that hold live blocks), whose free chunks
// hold stale pointers; the agent's own region, data, tables and
// per-thread state, which hold addresses the agent saw.
package scan

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/leak"
	"github.com/leakpath/leakpath/internal/procmaps"
	"github.com/leakpath/leakpath/internal/ptrace"
	"github.com/leakpath/leakpath/internal/wire"
)

// Target is a process stopped for a scan.
type Target struct {
	PID    int
	Tracer *ptrace.Tracer // every thread stopped (StopAll); with Held, only reading
	// Held, if not nil, is the registers of the process's only thread,
	// which the agent holds at its exit without a stop (Rsp and Fs_base
	// are what it left; its other registers are spilled above Rsp).
	Held *unix.PtraceRegs
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

// Run classifies blocks (in any order) in the stopped process t.
func Run(t Target, blocks []leak.Block, opt leak.Options) (*leak.Result, Stats, error) {
	res, st, _, err := RunHeap(t, blocks, opt)
	return res, st, err
}

// Heap is what a scan read of a stopped process, for a further look at
// it while it is still stopped: its memory (the heap copy in front of
// the tracer), roots and register words.
type Heap struct {
	Mem   leak.Memory
	Roots []leak.Root
	Words []uint64
}

// RunHeap is Run that also returns what the scan read.
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
	holes = append(holes, ownRanges(t)...)
	starts := make([]uint64, len(blocks))
	for i, b := range blocks {
		starts[i] = b.Addr
	}
	slices.Sort(starts)
	roots := rootRanges(maps, starts, stacks)
	roots = subtract(roots, holes)
	roots = resident(t.PID, roots)
	st.Roots = len(roots)
	lr := make([]leak.Root, len(roots))
	for i, r := range roots {
		lr[i] = leak.Root{Addr: r.lo, Len: r.hi - r.lo, What: r.what}
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

// threadRegs returns the registers of the target's threads.
func threadRegs(t Target) []unix.PtraceRegs {
	if t.Held != nil {
		return []unix.PtraceRegs{*t.Held}
	}
	var out []unix.PtraceRegs
	for _, tid := range t.Tracer.Threads() {
		if r, err := t.Tracer.Regs(tid); err == nil { // else exited meanwhile
			out = append(out, r)
		}
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
// from where the stack starts).
func rootRanges(maps []mapping, starts []uint64, stacks []threadStack) []span {
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
		if holdsBlock(starts, m.lo, m.hi) || isArenaHeap(maps, i) {
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
		out = append(out, span{lo, m.hi, what, private && (m.path == "" || m.path == "[stack]")})
	}
	return out
}

// holdsBlock reports whether a block starts in [lo, hi): then malloc owns
// the mapping (a mmapped chunk, an arena).
func holdsBlock(starts []uint64, lo, hi uint64) bool {
	i, _ := slices.BinarySearch(starts, lo)
	return i < len(starts) && starts[i] < hi
}

// isArenaHeap reports whether maps[i] is a heap of a glibc arena other than
// the main one: anonymous, aligned to arenaHeap, its writable part followed
// by an inaccessible rest of the same reservation.
func isArenaHeap(maps []mapping, i int) bool {
	m := maps[i]
	if m.path != "" || m.lo%arenaHeap != 0 {
		return false
	}
	size := m.hi - m.lo
	if size == arenaHeap {
		return true
	}
	if i+1 < len(maps) {
		n := maps[i+1]
		if n.lo == m.hi && n.path == "" && strings.HasPrefix(n.perms, "---") && size+(n.hi-n.lo) == arenaHeap {
			return true
		}
	}
	return false
}

// ownRanges reads the agent's table of its own mappings.
func ownRanges(t Target) []span {
	if t.OwnTable == 0 {
		return nil
	}
	buf := make([]byte, wire.OffOwnRanges+wire.OwnMax*wire.OwnRangeSize)
	n, _ := t.Tracer.ReadMemory(t.OwnTable, buf)
	if n < wire.OffOwnRanges {
		return nil
	}
	le := binary.LittleEndian
	count := min(int(le.Uint32(buf[wire.OffOwnCount:])), wire.OwnMax)
	var out []span
	for i := 0; i < count; i++ {
		o := wire.OffOwnRanges + i*wire.OwnRangeSize
		if o+wire.OwnRangeSize > n {
			break
		}
		a, l := le.Uint64(buf[o:]), le.Uint64(buf[o+8:])
		if a != 0 && l != 0 {
			hi := (a + l + uint64(unix.Getpagesize()) - 1) &^ uint64(unix.Getpagesize()-1)
			out = append(out, span{lo: a, hi: hi})
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
