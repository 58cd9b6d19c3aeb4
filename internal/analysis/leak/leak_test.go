package leak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// Layout of the unit tests' memory: a root region, then the heap.
const (
	tBase    = 0x100000
	tRoot    = tBase           // roots: 64 KiB
	tRootLen = 0x10000         //
	tHeap    = tBase + 0x10000 // blocks from here
)

// world is a test heap: blocks at chosen addresses in an arena, a root
// region, registers.
type world struct {
	t      *testing.T
	a      *arena
	blocks []Block
	regs   []uint64
	roots  []Root
	nroot  uint64 // next free root word
	opt    Options
}

func newWorld(t *testing.T) *world {
	return &world{
		t:     t,
		a:     newArena(tBase, 1<<20),
		roots: []Root{{Addr: tRoot, Len: tRootLen, What: "data"}},
		opt:   DefaultOptions(),
	}
}

// block adds a block of size bytes at heap offset off and returns its
// index.
func (w *world) block(off, size uint64) int {
	w.blocks = append(w.blocks, Block{Addr: tHeap + off, Size: size})
	return len(w.blocks) - 1
}

func (w *world) addr(b int) uint64 { return w.blocks[b].Addr }

// root stores v in the next word of the root region.
func (w *world) root(v uint64) {
	w.a.put(tRoot+w.nroot, v)
	w.nroot += 8
}

// ptr stores v in block b's word at offset off.
func (w *world) ptr(b int, off, v uint64) { w.a.put(w.addr(b)+off, v) }

func (w *world) run() *Result {
	w.t.Helper()
	r, err := Classify(w.blocks, w.regs, w.roots, w.a, w.opt)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *world) expect(r *Result, want ...Kind) {
	w.t.Helper()
	for i, k := range want {
		if r.Kinds[i] != k {
			w.t.Errorf("block %d at %#x: %v, want %v", i, w.addr(i), r.Kinds[i], k)
		}
	}
}

// TestPastEnd: a pointer just past a PastEnd block (new T[0]'s 8 bytes)
// is one to its start, from a root or from a leaked block; one inside it
// is interior; without PastEnd the block is lost (memcheck's rule); a
// block that starts just past a PastEnd one owns that address.
func TestPastEnd(t *testing.T) {
	w := newWorld(t)
	held := w.block(0x100, 8)
	inner := w.block(0x200, 8)
	plain := w.block(0x300, 8)
	owned := w.block(0x400, 8)
	owner := w.block(0x500, 16)
	before := w.block(0x600, 8)
	after := w.block(0x608, 16)
	for _, b := range []int{held, inner, owned, before} {
		w.blocks[b].PastEnd = true
	}
	w.root(w.addr(held) + 8)
	w.root(w.addr(inner) + 4)
	w.root(w.addr(plain) + 8)
	w.ptr(owner, 0, w.addr(owned)+8)
	w.root(w.addr(after))
	r := w.run()
	w.expect(r, Reachable, Possible, Definite, Indirect, Definite, Definite, Reachable)
	if r.Owner[owned] != int32(owner) {
		t.Errorf("the block past which the leaked one points: owner %d, want %d", r.Owner[owned], owner)
	}
}

func TestStartPointerFromRegister(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	b := w.block(64, 32)
	w.regs = []uint64{w.addr(a), 12345}
	w.ptr(a, 8, w.addr(b))
	r := w.run()
	w.expect(r, Reachable, Reachable)
	if r.Owner[a] != -1 || r.Owner[b] != -1 {
		t.Errorf("owners %v, want -1", r.Owner)
	}
}

func TestStartPointerFromRoot(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	w.block(64, 32)
	w.root(w.addr(a))
	r := w.run()
	w.expect(r, Reachable, Definite)
	if r.Stats.RootBytes != tRootLen {
		t.Errorf("RootBytes %d, want %d", r.Stats.RootBytes, tRootLen)
	}
}

func TestInteriorOnlyIsPossible(t *testing.T) {
	for _, heur := range []bool{false, true} {
		w := newWorld(t)
		w.opt.Heuristics = heur
		a := w.block(0, 64)
		w.root(w.addr(a) + 40)
		w.expect(w.run(), Possible)
	}
}

// TestStartOnlyRoot: in a StartOnly root (the C library's data) an
// interior pointer is none, a start pointer still counts, and the same
// words elsewhere count as ever.
func TestStartOnlyRoot(t *testing.T) {
	w := newWorld(t)
	w.roots[0].StartOnly, w.roots[0].Len = true, 0x1000
	a := w.block(0, 64)  // only an interior pointer, where top would be
	b := w.block(80, 32) // a start pointer
	c := w.block(128, 48)
	w.root(w.addr(a) + 56)
	w.root(w.addr(b))
	w.root(w.addr(c) + 8) // interior, but also from an ordinary root below
	w.roots = append(w.roots, Root{Addr: tRoot + 0x8000, Len: 0x100, What: "stack"})
	w.a.put(tRoot+0x8000, w.addr(c)+8)
	w.expect(w.run(), Definite, Reachable, Possible)
}

func TestNoPointerIsDefinite(t *testing.T) {
	w := newWorld(t)
	w.block(0, 32)
	w.block(48, 0)
	r := w.run()
	w.expect(r, Definite, Definite)
	if r.IndirectBytes[0] != 0 || r.IndirectBlocks[0] != 0 {
		t.Errorf("indirect %d bytes %d blocks, want none", r.IndirectBytes[0], r.IndirectBlocks[0])
	}
}

func TestLeakedTree(t *testing.T) {
	w := newWorld(t)
	// The children lie below the root node: address order must not make
	// them leaders.
	c1 := w.block(0, 24)
	c2 := w.block(32, 40)
	top := w.block(128, 16)
	gc := w.block(256, 8) // grandchild, through an interior pointer
	w.ptr(top, 0, w.addr(c1))
	w.ptr(top, 8, w.addr(c2))
	w.ptr(c2, 16, w.addr(gc)+4)
	r := w.run()
	w.expect(r, Indirect, Indirect, Definite, Indirect)
	for _, b := range []int{c1, c2, gc} {
		if r.Owner[b] != int32(top) {
			t.Errorf("owner of block %d: %d, want %d", b, r.Owner[b], top)
		}
	}
	if r.Owner[top] != -1 {
		t.Errorf("owner of the leader: %d, want -1", r.Owner[top])
	}
	if r.IndirectBytes[top] != 24+40+8 || r.IndirectBlocks[top] != 3 {
		t.Errorf("leader holds %d bytes in %d blocks, want 72 in 3", r.IndirectBytes[top], r.IndirectBlocks[top])
	}
}

func TestLeakedCycle(t *testing.T) {
	w := newWorld(t)
	b0 := w.block(256, 32)
	b1 := w.block(0, 32) // lowest
	b2 := w.block(512, 32)
	w.ptr(b0, 0, w.addr(b1))
	w.ptr(b1, 8, w.addr(b2))
	w.ptr(b2, 16, w.addr(b0))
	r := w.run()
	w.expect(r, Indirect, Definite, Indirect)
	if r.Owner[b0] != int32(b1) || r.Owner[b2] != int32(b1) {
		t.Errorf("owners %v, want %d for blocks %d and %d", r.Owner, b1, b0, b2)
	}
	if r.IndirectBytes[b1] != 64 || r.IndirectBlocks[b1] != 2 {
		t.Errorf("leader holds %d bytes in %d blocks, want 64 in 2", r.IndirectBytes[b1], r.IndirectBlocks[b1])
	}
}

// A leader found by a later leader becomes indirect in the later clique,
// bringing its own clique along (memcheck merges cliques this way).
func TestFormerLeaderAbsorbed(t *testing.T) {
	w := newWorld(t)
	x := w.block(0, 16)   // leads first, holding z
	y := w.block(64, 32)  // points to x
	z := w.block(128, 48) // held by x
	s := w.block(256, 8)  // shared by x and y: x, leading first, takes it
	w.ptr(x, 0, w.addr(z))
	w.ptr(x, 8, w.addr(s))
	w.ptr(y, 0, w.addr(x))
	w.ptr(y, 8, w.addr(s))
	r := w.run()
	w.expect(r, Indirect, Definite, Indirect, Indirect)
	for _, b := range []int{x, z, s} {
		if r.Owner[b] != int32(y) {
			t.Errorf("owner of block %d: %d, want %d", b, r.Owner[b], y)
		}
	}
	if r.IndirectBytes[y] != 16+48+8 || r.IndirectBlocks[y] != 3 {
		t.Errorf("leader holds %d bytes in %d blocks, want 72 in 3", r.IndirectBytes[y], r.IndirectBlocks[y])
	}
	if r.IndirectBytes[x] != 0 || r.IndirectBlocks[x] != 0 {
		t.Errorf("absorbed leader still holds %d bytes in %d blocks", r.IndirectBytes[x], r.IndirectBlocks[x])
	}
}

// Two leaked blocks pointing to one child: the first leader in address
// order takes it; the second stays definite with nothing.
func TestSharedChildGoesToFirstLeader(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 16)
	b := w.block(64, 16)
	c := w.block(128, 16)
	w.ptr(a, 0, w.addr(c))
	w.ptr(b, 0, w.addr(c))
	r := w.run()
	w.expect(r, Definite, Definite, Indirect)
	if r.Owner[c] != int32(a) || r.IndirectBlocks[a] != 1 || r.IndirectBlocks[b] != 0 {
		t.Errorf("owner %d, a holds %d, b holds %d; want owner %d, 1, 0", r.Owner[c], r.IndirectBlocks[a], r.IndirectBlocks[b], a)
	}
}

func TestReachableChain(t *testing.T) {
	w := newWorld(t)
	a := w.block(512, 32)
	b := w.block(0, 32)
	c := w.block(256, 32)
	w.root(w.addr(a))
	w.ptr(a, 24, w.addr(b))
	w.ptr(b, 0, w.addr(c))
	w.expect(w.run(), Reachable, Reachable, Reachable)
}

func TestReachedOnlyFromPossible(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	b := w.block(64, 32)
	c := w.block(128, 32)
	w.root(w.addr(a) + 16) // interior: a is possible
	w.ptr(a, 0, w.addr(b)) // start pointer, but from a possible block
	w.ptr(b, 8, w.addr(c))
	w.expect(w.run(), Possible, Possible, Possible)

	// A start pointer from a root as well upgrades it all.
	w.root(w.addr(a))
	w.expect(w.run(), Reachable, Reachable, Reachable)
}

func TestUnalignedPointerNotFound(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	w.a.put(tRoot+12, w.addr(a)) // straddles two aligned words
	b := w.block(64, 32)
	w.ptr(b, 0, 0)
	w.a.put(w.addr(b)+4, w.addr(a)) // likewise inside a block
	w.regs = []uint64{w.addr(b)}
	w.expect(w.run(), Definite, Reachable)
}

func TestZeroSizeBlock(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 16)
	z := w.block(16, 0) // right after a: a pointer to a's end is z's
	z2 := w.block(64, 0)
	w.root(w.addr(z))
	w.root(w.addr(z2) + 1) // not z2
	r := w.run()
	w.expect(r, Definite, Reachable, Definite)
	_ = a
}

func TestRuntimeBlock(t *testing.T) {
	w := newWorld(t)
	dtv := w.block(0, 64)
	w.blocks[dtv].Runtime = true
	tls := w.block(128, 32)
	ordinary := w.block(256, 64)
	w.root(w.addr(dtv) + 8)      // the TCB's dtv+1
	w.ptr(dtv, 16, w.addr(tls))  // scanned as reachable
	w.root(w.addr(ordinary) + 8) // the same shape, not a runtime block
	w.ptr(ordinary, 0, 0)        // (no newarray header)
	w.expect(w.run(), Reachable, Reachable, Possible)

	// Reached from a possibly reachable block only: still reachable.
	w = newWorld(t)
	p := w.block(0, 32)
	rt := w.block(64, 32)
	w.blocks[rt].Runtime = true
	child := w.block(128, 16)
	w.root(w.addr(p) + 8)
	w.ptr(p, 16, w.addr(rt)+16)
	w.ptr(rt, 0, w.addr(child))
	w.expect(w.run(), Possible, Reachable, Reachable)
}

// A root range over blocks must not make the blocks' own words roots.
func TestBlockWordsAreNotRoots(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	b := w.block(64, 32)
	w.ptr(a, 8, w.addr(b))
	w.a.put(tHeap+40, w.addr(b)) // between the blocks: a root word
	w.roots = append(w.roots, Root{Addr: tHeap, Len: 128, What: "heap"})
	r := w.run()
	w.expect(r, Definite, Reachable)

	w.a.put(tHeap+40, 0)
	w.expect(w.run(), Definite, Indirect)
}

func TestHeuristics(t *testing.T) {
	type tc struct {
		name  string
		setup func(w *world) (ptr uint64)
		want  Heuristic // NoHeuristic: the block must be possible
	}
	vtables := func(w *world) (uint64, uint64) {
		// Two vtables in a file mapping, functions in an executable one.
		v1, v2 := uint64(tBase+0x8000), uint64(tBase+0x8100)
		w.a.put(v1, 0, 0x7000_0010, 0x7000_0020)
		w.a.put(v2, 0x7000_0030, 0, 0x7000_0040)
		w.opt.Mappings = []Mapping{
			{Start: tBase + 0x8000, End: tBase + 0x9000, Read: true, File: true},
			{Start: 0x7000_0000, End: 0x7000_1000, Read: true, Exec: true, File: true},
		}
		return v1, v2
	}
	cases := []tc{
		{"stdstring", func(w *world) uint64 {
			b := w.block(0, 24+10+1) // capacity 10
			w.ptr(b, 0, 7)           // length
			w.ptr(b, 8, 10)          // capacity
			return w.addr(b) + 24
		}, StdString},
		{"stdstring length > capacity", func(w *world) uint64 {
			b := w.block(0, 24+10+1)
			w.ptr(b, 0, 11)
			w.ptr(b, 8, 10)
			return w.addr(b) + 24
		}, NoHeuristic},
		{"stdstring wrong size", func(w *world) uint64 {
			b := w.block(0, 24+10+2)
			w.ptr(b, 0, 7)
			w.ptr(b, 8, 10)
			return w.addr(b) + 24
		}, NoHeuristic},
		{"length64", func(w *world) uint64 {
			b := w.block(0, 40)
			w.ptr(b, 0, 32)
			return w.addr(b) + 8
		}, Length64},
		{"length64/newarray zero", func(w *world) uint64 {
			b := w.block(0, 40)
			w.ptr(b, 0, 0)
			return w.addr(b) + 8
		}, NoHeuristic},
		{"newarray", func(w *world) uint64 {
			b := w.block(0, 8+3*16)
			w.ptr(b, 0, 3)
			return w.addr(b) + 8
		}, NewArray},
		{"newarray count does not divide", func(w *world) uint64 {
			b := w.block(0, 8+3*16)
			w.ptr(b, 0, 5)
			return w.addr(b) + 8
		}, NoHeuristic},
		{"newarray at the wrong offset", func(w *world) uint64 {
			b := w.block(0, 8+3*16)
			w.ptr(b, 8, 3)
			return w.addr(b) + 16
		}, NoHeuristic},
		{"multipleinheritance", func(w *world) uint64 {
			v1, v2 := vtables(w)
			b := w.block(0, 64)
			w.ptr(b, 0, v1)
			w.ptr(b, 16, v2)
			return w.addr(b) + 16
		}, MultipleInheritance},
		{"multipleinheritance data pointer in vtable", func(w *world) uint64 {
			v1, v2 := vtables(w)
			w.a.put(v2, tBase+0x8800) // readable, not executable
			b := w.block(0, 64)
			w.ptr(b, 0, v1)
			w.ptr(b, 16, v2)
			return w.addr(b) + 16
		}, NoHeuristic},
		{"multipleinheritance without mappings", func(w *world) uint64 {
			v1, v2 := vtables(w)
			w.opt.Mappings = nil
			b := w.block(0, 64)
			w.ptr(b, 0, v1)
			w.ptr(b, 16, v2)
			return w.addr(b) + 16
		}, NoHeuristic},
		{"multipleinheritance first word not a vtable", func(w *world) uint64 {
			_, v2 := vtables(w)
			b := w.block(0, 64)
			w.ptr(b, 0, 0x5000)
			w.ptr(b, 16, v2)
			return w.addr(b) + 16
		}, NoHeuristic},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			p := c.setup(w)
			w.root(p)
			r := w.run()
			if c.want == NoHeuristic {
				w.expect(r, Possible)
			} else {
				w.expect(r, Reachable)
			}
			if r.Heuristic[0] != c.want {
				t.Errorf("heuristic %v, want %v", r.Heuristic[0], c.want)
			}
			// Switched off, every heuristic pointer is just interior.
			w.opt.Heuristics = false
			r = w.run()
			w.expect(r, Possible)
			// From a possibly reachable block, a heuristic pointer makes
			// the block possible only.
			w.opt.Heuristics = true
			w.nroot = 0
			w.root(0)
			q := w.block(4096, 16)
			w.root(w.addr(q) + 8)
			w.ptr(q, 0, p)
			w.expect(w.run(), Possible, Possible)
		})
	}
}

// A start pointer makes the heuristic needless: not reported.
func TestHeuristicClearedByStartPointer(t *testing.T) {
	w := newWorld(t)
	b := w.block(0, 40)
	w.ptr(b, 0, 32)
	w.root(w.addr(b) + 8)
	w.root(w.addr(b))
	r := w.run()
	w.expect(r, Reachable)
	if r.Heuristic[b] != NoHeuristic {
		t.Errorf("heuristic %v, want none", r.Heuristic[b])
	}
}

func TestRootPartlyUnreadable(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	b := w.block(64, 32)
	c := w.block(128, 32)
	w.a.put(tRoot+0x10, w.addr(a))
	w.a.put(tRoot+0x2010, w.addr(b)) // in the hole
	w.a.put(tRoot+0x5010, w.addr(c)) // after it
	w.a.holes = [][2]uint64{{tRoot + 0x2000, tRoot + 0x3000}}
	r := w.run()
	w.expect(r, Reachable, Definite, Reachable)
	if r.Stats.UnreadableBytes != 0x1000 {
		t.Errorf("UnreadableBytes %#x, want 0x1000", r.Stats.UnreadableBytes)
	}
	if r.Stats.RootBytes != tRootLen-0x1000 {
		t.Errorf("RootBytes %#x, want %#x", r.Stats.RootBytes, tRootLen-0x1000)
	}
}

// A long unreadable stretch is skipped in few reads, and a root entirely
// outside memory is counted, not an error.
func TestLongUnreadableRoot(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 32)
	w.roots = append(w.roots, Root{Addr: 0x4000_0000, Len: 1 << 30, What: "unmapped"})
	w.root(w.addr(a))
	r := w.run()
	w.expect(r, Reachable)
	if r.Stats.UnreadableBytes != 1<<30 {
		t.Errorf("UnreadableBytes %#x, want %#x", r.Stats.UnreadableBytes, 1<<30)
	}
	if n := w.a.calls.Load(); n > 2000 {
		t.Errorf("%d reads to skip 1 GiB", n)
	}
}

func TestBlockUnreadable(t *testing.T) {
	w := newWorld(t)
	a := w.block(0, 8192)
	b := w.block(16384, 32)
	w.root(w.addr(a))
	w.ptr(a, 4096+8, w.addr(b))
	w.a.holes = [][2]uint64{{w.addr(a) + 4096, w.addr(a) + 8192}}
	r := w.run()
	w.expect(r, Reachable, Definite)
	if r.Stats.UnreadableBytes != 4096 {
		t.Errorf("UnreadableBytes %d, want 4096", r.Stats.UnreadableBytes)
	}
}

// A block bigger than a read batch is read in pieces; a pointer near its
// end counts like any other.
func TestBigBlock(t *testing.T) {
	w := newWorld(t)
	w.a = newArena(tBase, 24<<20)
	big := w.block(0, 20<<20)
	small := w.block(21<<20, 32)
	w.root(w.addr(big))
	w.ptr(big, 20<<20-8, w.addr(small))
	r := w.run()
	w.expect(r, Reachable, Reachable)
	if r.Stats.BlockBytes < 20<<20 {
		t.Errorf("BlockBytes %d, want at least %d", r.Stats.BlockBytes, 20<<20)
	}
}

func TestOverlappingBlocks(t *testing.T) {
	for _, bs := range [][]Block{
		{{Addr: tHeap, Size: 32}, {Addr: tHeap + 16, Size: 32}},
		{{Addr: tHeap + 64, Size: 8}, {Addr: tHeap, Size: 0}, {Addr: tHeap, Size: 16}},
		{{Addr: tHeap, Size: 32}, {Addr: tHeap + 8, Size: 0}},
	} {
		_, err := Classify(bs, nil, nil, newArena(tBase, 1<<20), DefaultOptions())
		if err == nil || !strings.Contains(err.Error(), "overlaps") {
			t.Errorf("%v: error %v, want an overlap", bs, err)
		}
	}
}

func TestProcessGone(t *testing.T) {
	w := newWorld(t)
	w.block(0, 32)
	w.a.fail = &ptrace.Error{Op: "read memory", Pid: 42, Err: ptrace.ErrExited}
	_, err := Classify(w.blocks, nil, w.roots, w.a, w.opt)
	if !errors.Is(err, ptrace.ErrExited) {
		t.Fatalf("error %v, want ErrExited", err)
	}
	// Nothing readable at all is an error too: the result would say
	// every block leaked.
	w.a.fail = fmt.Errorf("read: %w", errUnreadable)
	if _, err := Classify(w.blocks, nil, w.roots, w.a, w.opt); err == nil {
		t.Fatal("no error when nothing could be read")
	}
}

func TestUnsortedInputAndProgress(t *testing.T) {
	w := newWorld(t)
	var idx []int
	for i := range 50 {
		idx = append(idx, w.block(uint64(49-i)*64, 48))
	}
	// Root -> 49 (lowest address) -> ... -> 11, a reachable list; 0-10 leaked.
	w.root(w.addr(idx[49]))
	for i := 49; i > 11; i-- {
		w.ptr(idx[i], 0, w.addr(idx[i-1]))
	}
	w.ptr(idx[5], 0, w.addr(idx[3])+8)
	var last, calls uint64
	w.opt.Progress = func(done, total uint64) {
		calls++
		if done < last || done > total {
			t.Errorf("progress %d of %d after %d", done, total, last)
		}
		last = done
	}
	r := w.run()
	for i := range 50 {
		want := Reachable
		switch {
		case i == 3:
			want = Indirect
		case i <= 10:
			want = Definite
		}
		if r.Kinds[i] != want {
			t.Errorf("block %d: %v, want %v", i, r.Kinds[i], want)
		}
	}
	if r.Owner[3] != 5 {
		t.Errorf("owner of 3: %d, want 5", r.Owner[3])
	}
	if calls == 0 || last != tRootLen+50*48 {
		t.Errorf("progress: %d calls, last %d, want %d", calls, last, tRootLen+50*48)
	}
}

func TestKindStrings(t *testing.T) {
	want := []string{"unclassified", "definite", "indirect", "possible", "reachable"}
	for k, s := range want {
		if Kind(k).String() != s {
			t.Errorf("Kind(%d) = %q, want %q", k, Kind(k).String(), s)
		}
	}
	if MultipleInheritance.String() != "multipleinheritance" {
		t.Errorf("MultipleInheritance = %q", MultipleInheritance.String())
	}
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 100, 5000} {
		keys := make([]uint64, n)
		vals := make([]int32, n)
		for i := range keys {
			keys[i] = 0x5555_0000_0000 + rng.Uint64N(1<<20)*16
			if rng.IntN(3) == 0 {
				keys[i] = 0x7fff_0000_0000 + rng.Uint64N(1<<30)
			}
			if i > 0 && rng.IntN(10) == 0 {
				keys[i] = keys[i-1] // ties keep their order
			}
			vals[i] = int32(i)
		}
		orig := slices.Clone(keys)
		radixSort(keys, vals)
		for i := range keys {
			if keys[i] != orig[vals[i]] {
				t.Fatalf("n=%d: key %d is %#x, its value %d had %#x", n, i, keys[i], vals[i], orig[vals[i]])
			}
			if i > 0 && (keys[i] < keys[i-1] || keys[i] == keys[i-1] && vals[i] < vals[i-1]) {
				t.Fatalf("n=%d: not sorted (stably) at %d", n, i)
			}
		}
	}
}

func TestSortBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	blocks := make([]Block, 100000)
	for i := range blocks {
		blocks[i] = Block{Addr: 0x7f0000000000 + uint64(i)*48, Size: uint64(i), Runtime: i%3 == 0}
	}
	r.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	SortBlocks(blocks)
	for i, b := range blocks {
		if b.Addr != 0x7f0000000000+uint64(i)*48 || b.Size != uint64(i) || b.Runtime != (i%3 == 0) {
			t.Fatalf("block %d after the sort: %+v", i, b)
		}
	}
}
