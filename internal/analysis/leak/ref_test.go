package leak

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// refIndirect is the reference's state of an indirect block (after
// stUnreached, stPossible, stReachable).
const refIndirect = 3

// refResult is what the reference classifier finds, in the caller's order.
type refResult struct {
	kinds []Kind
	owner []int32
	indB  []uint64
	indN  []uint32
	heur  []bool
}

// reference is a plain transcription of memcheck's algorithm
// (mc_leakcheck.c): linear block search, one word read at a time, a
// recursive-free mark stack processed one block at a time, heuristics
// tested on the spot, and the clique pass run leader by leader with former
// leaders rescanned. Slow, but obviously memcheck's; Classify must agree.
func reference(a *arena, blocks []Block, words []uint64, roots []Root, opt Options) refResult {
	n := len(blocks)
	ord := make([]int, n)
	for i := range ord {
		ord[i] = i
	}
	slices.SortFunc(ord, func(x, y int) int {
		if blocks[x].Addr < blocks[y].Addr {
			return -1
		}
		if blocks[x].Addr > blocks[y].Addr {
			return 1
		}
		return 0
	})
	b := make([]Block, n)
	for j, i := range ord {
		b[j] = blocks[i]
	}
	end := func(j int) uint64 {
		if b[j].Size == 0 {
			return b[j].Addr + 1
		}
		return b[j].Addr + b[j].Size
	}
	find := func(v uint64) int {
		for j := range b {
			if v >= b[j].Addr && v < end(j) {
				return j
			}
		}
		return -1
	}
	mapping := func(p uint64) *Mapping {
		for i := range opt.Mappings {
			if m := &opt.Mappings[i]; p >= m.Start && p < m.End {
				return m
			}
		}
		return nil
	}
	isVtable := func(p uint64) bool {
		seg := mapping(p)
		if seg == nil || !seg.File || !seg.Read {
			return false
		}
		scanMax := p + 20*8
		if segEnd := seg.End - 1; scanMax > segEnd-8 {
			scanMax = segEnd - 8
		}
		fns := 0
		for s := p; s <= scanMax; s += 8 {
			if !a.readable(s, 8) {
				return false
			}
			fn := a.word(s)
			if fn == 0 {
				continue
			}
			if m := mapping(fn); m == nil || !m.File || !m.Exec {
				return false
			}
			if fns++; fns == 2 {
				return true
			}
		}
		return false
	}
	heuristic := func(v uint64, j int) Heuristic {
		start, size := b[j].Addr, b[j].Size
		valid := func(w uint64) bool {
			return w%8 == 0 && w >= start && w+8 <= start+size && a.readable(w, 8)
		}
		if v == start+24 && valid(start+8) {
			capacity := a.word(start + 8)
			if 3*8+capacity+1 == size && valid(start) && a.word(start) <= capacity {
				return StdString
			}
		}
		if v == start+8 && valid(start) {
			if s := a.word(start); s > 0 && size-8 == s {
				return Length64
			}
		}
		if v == start+8 && valid(start) {
			if e := a.word(start); e > 0 && (size-8)%e == 0 {
				return NewArray
			}
		}
		if len(opt.Mappings) > 0 && v%8 == 0 && valid(v) {
			inner := a.word(v)
			if inner%8 == 0 && inner >= 4096 && valid(start) {
				first := a.word(start)
				if first%8 == 0 && first >= 4096 && isVtable(inner) && isVtable(first) {
					return MultipleInheritance
				}
			}
		}
		return NoHeuristic
	}

	st := make([]uint8, n)
	pending := make([]bool, n)
	heur := make([]bool, n)
	var stack []int
	push := func(j int) {
		if !pending[j] {
			pending[j] = true
			stack = append(stack, j)
		}
	}
	reach := func(v uint64, def bool) {
		j := find(v)
		if j < 0 {
			return
		}
		start := v == b[j].Addr
		if st[j] == stReachable {
			if def && start {
				heur[j] = false
			}
			return
		}
		if b[j].Runtime {
			st[j], heur[j] = stReachable, false
			push(j)
			return
		}
		h := NoHeuristic
		if !start && opt.Heuristics {
			h = heuristic(v, j)
		}
		if (start || h != NoHeuristic) && def {
			st[j], heur[j] = stReachable, !start
			push(j)
		} else if st[j] == stUnreached {
			st[j] = stPossible
			push(j)
		}
	}
	// scanWords calls f on the readable aligned words of [lo, hi) that
	// no block overlaps if roots, else all of them.
	scanWords := func(lo, hi uint64, root bool, f func(uint64)) {
		for w := (lo + 7) &^ 7; w+8 <= hi && w+8 > w; w += 8 {
			if !a.readable(w, 8) {
				continue
			}
			if root {
				inBlock := false
				for j := range b {
					if b[j].Size > 0 && w < b[j].Addr+b[j].Size && w+8 > b[j].Addr {
						inBlock = true
						break
					}
				}
				if inBlock {
					continue
				}
			}
			f(a.word(w))
		}
	}
	for _, r := range roots {
		scanWords(r.Addr, r.Addr+r.Len, true, func(v uint64) { reach(v, true) })
	}
	for _, v := range words {
		reach(v, true)
	}
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		pending[j] = false
		def := st[j] != stPossible
		scanWords(b[j].Addr, b[j].Addr+b[j].Size, false, func(v uint64) { reach(v, def) })
	}

	owner := make([]int, n)
	indB := make([]uint64, n)
	indN := make([]uint32, n)
	for i := range b {
		if st[i] != stUnreached {
			continue
		}
		push(i)
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			pending[top] = false
			scanWords(b[top].Addr, b[top].Addr+b[top].Size, false, func(v uint64) {
				j := find(v)
				if j < 0 || st[j] != stUnreached || j == i {
					return
				}
				push(j)
				indB[i] += b[j].Size + indB[j]
				indN[i] += 1 + indN[j]
				indB[j], indN[j] = 0, 0
				st[j] = refIndirect
				owner[j] = i
				for x := range b {
					if st[x] == refIndirect && owner[x] == j {
						owner[x] = i
					}
				}
			})
		}
	}

	res := refResult{
		kinds: make([]Kind, n), owner: make([]int32, n),
		indB: make([]uint64, n), indN: make([]uint32, n), heur: make([]bool, n),
	}
	for j, i := range ord {
		res.owner[i] = -1
		switch st[j] {
		case stReachable:
			res.kinds[i] = Reachable
			res.heur[i] = heur[j]
		case stPossible:
			res.kinds[i] = Possible
		case stUnreached:
			res.kinds[i] = Definite
			res.indB[i], res.indN[i] = indB[j], indN[j]
		case refIndirect:
			res.kinds[i] = Indirect
			res.owner[i] = int32(ord[owner[j]])
		}
	}
	return res
}

// randomWorld builds a small random heap: blocks (some empty, some of the
// runtime, a few at odd addresses) whose words are zeros, small numbers,
// start and interior pointers, heuristic-shaped headers and vtables; a
// root region with an unreadable page; registers.
func randomWorld(rng *rand.Rand) (*arena, []Block, []uint64, []Root, Options) {
	const base = 0x10000
	a := newArena(base, 16*4096)
	// Pages 0-1: vtables and their "code"; 2-5: roots (page 3 unreadable,
	// sometimes 3 and 4); 6-15: heap.
	opt := Options{Heuristics: rng.IntN(4) != 0}
	code := uint64(0x7000_0000)
	vt := []uint64{base, base + 256, base + 512}
	a.put(vt[0], code+0x10, code+0x20)
	a.put(vt[1], 0, code+0x30, 0, code+0x40)
	a.put(vt[2], code+0x10, base+100) // not a vtable: a data pointer
	if rng.IntN(2) == 0 {
		opt.Mappings = []Mapping{
			{Start: base, End: base + 2*4096, Read: true, File: true},
			{Start: code, End: code + 4096, Read: true, Exec: true, File: true},
			{Start: base + 6*4096, End: base + 16*4096, Read: true, Write: true},
		}
	}
	a.holes = [][2]uint64{{base + 3*4096, base + 4*4096}}
	if rng.IntN(3) == 0 {
		a.holes[0][1] += 4096
	}

	var blocks []Block
	addr := uint64(base + 6*4096)
	nb := 1 + rng.IntN(40)
	for range nb {
		addr += uint64(rng.IntN(3)) * 16
		if rng.IntN(15) == 0 {
			addr += 4 // odd placement
		}
		var size uint64
		switch rng.IntN(6) {
		case 0:
			size = 0
		case 1:
			size = 24 + uint64(rng.IntN(8)) + 1 // stdstring-sized
		default:
			size = uint64(8 + rng.IntN(120))
		}
		if addr+size+16 > a.end() {
			break
		}
		blocks = append(blocks, Block{Addr: addr, Size: size, Runtime: rng.IntN(12) == 0})
		addr += size
		if size == 0 {
			addr += 8
		}
	}
	value := func() uint64 {
		if len(blocks) == 0 {
			return 0
		}
		bl := blocks[rng.IntN(len(blocks))]
		switch rng.IntN(12) {
		case 0, 1, 2:
			return 0
		case 3:
			return uint64(rng.IntN(100))
		case 4, 5, 6:
			return bl.Addr
		case 7:
			return bl.Addr + uint64(rng.IntN(int(bl.Size)+2))
		case 8:
			return bl.Addr + 8
		case 9:
			return bl.Addr + 24
		case 10:
			return vt[rng.IntN(len(vt))]
		default:
			return rng.Uint64()
		}
	}
	// Fill the heap pages, then give some blocks heuristic headers.
	for w := uint64(base + 6*4096); w+8 <= a.end(); w += 8 {
		if rng.IntN(3) == 0 {
			a.put(w, value())
		}
	}
	for _, bl := range blocks {
		if bl.Size < 16 || bl.Addr%8 != 0 || rng.IntN(3) != 0 {
			continue
		}
		switch rng.IntN(4) {
		case 0:
			a.put(bl.Addr, bl.Size-8)
		case 1:
			a.put(bl.Addr, uint64(1+rng.IntN(4)))
		case 2:
			if bl.Size >= 25 {
				c := bl.Size - 25
				a.put(bl.Addr, uint64(rng.IntN(int(c)+2)), c)
			}
		case 3:
			a.put(bl.Addr, vt[rng.IntN(len(vt))])
		}
	}
	for w := uint64(base + 2*4096); w < base+6*4096; w += 8 {
		if rng.IntN(6) == 0 {
			a.put(w+uint64(rng.IntN(2))*4, value()) // some unaligned
		}
	}
	roots := []Root{{Addr: base + 2*4096, Len: 4 * 4096, What: "data"}}
	if rng.IntN(4) == 0 && len(blocks) > 0 {
		// A root over part of the heap: its block words must not count.
		roots = append(roots, Root{Addr: blocks[0].Addr, Len: 256, What: "overlap"})
	}
	var regs []uint64
	for range rng.IntN(4) {
		regs = append(regs, value())
	}
	rng.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	return a, blocks, regs, roots, opt
}

func TestClassifyMatchesReference(t *testing.T) {
	testClassifyMatchesReference(t)
}

// TestClassifyMatchesReferenceInHalves: so it does when the leaked
// blocks are scanned in two halves at once, whatever their size.
func TestClassifyMatchesReferenceInHalves(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one processor: leakGraph scans in one piece")
	}
	defer func(was uint64) { parallelGraph = was }(parallelGraph)
	parallelGraph = 0
	testClassifyMatchesReference(t)
}

func testClassifyMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := map[Kind]int{}
	heurs := 0
	for iter := range 3000 {
		a, blocks, regs, roots, opt := randomWorld(rng)
		want := reference(a, blocks, regs, roots, opt)
		got, err := Classify(blocks, regs, roots, a, opt)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		for i := range blocks {
			kinds[want.kinds[i]]++
			if want.heur[i] {
				heurs++
			}
			if got.Kinds[i] != want.kinds[i] || got.Owner[i] != want.owner[i] ||
				got.IndirectBytes[i] != want.indB[i] || got.IndirectBlocks[i] != want.indN[i] ||
				(got.Heuristic[i] != NoHeuristic) != want.heur[i] {
				t.Fatalf("iteration %d, block %d %+v: got %v owner %d ind %d/%d heur %v; reference %v owner %d ind %d/%d heur %v",
					iter, i, blocks[i], got.Kinds[i], got.Owner[i], got.IndirectBytes[i], got.IndirectBlocks[i], got.Heuristic[i],
					want.kinds[i], want.owner[i], want.indB[i], want.indN[i], want.heur[i])
			}
		}
	}
	// The generator must exercise every kind and the heuristics, or the
	// comparison proves little.
	for k := Definite; k <= Reachable; k++ {
		if kinds[k] < 100 {
			t.Errorf("only %d %v blocks generated", kinds[k], k)
		}
	}
	if heurs < 50 {
		t.Errorf("only %d blocks reachable by heuristics generated", heurs)
	}
	t.Logf("kinds %v, %d by heuristic", kinds, heurs)
}
