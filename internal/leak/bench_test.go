package leak

import (
	"math/rand/v2"
	"os"
	"testing"
)

// synthHeap is a synthetic process image for benchmarks: a root region,
// then blocks laid out like malloc's (16-byte headers, sizes 16 to 248
// bytes), 80% of them live and 20% leaked. Words are zeros, small numbers,
// start and interior pointers (live blocks point to live ones, leaked to
// leaked) and addresses outside the heap, as in real heaps but denser in
// pointers.
type synthHeap struct {
	a      *arena
	blocks []Block
	roots  []Root
	regs   []uint64
	bytes  uint64 // roots and blocks
}

func newSynthHeap(nblocks int, rootLen uint64) *synthHeap {
	rng := rand.New(rand.NewPCG(7, 11))
	const base = 0x5555_0000_0000
	sizes := make([]uint64, nblocks)
	var heap uint64
	for i := range sizes {
		sizes[i] = 16 + 8*uint64(rng.IntN(30))
		heap += sizes[i] + 16
	}
	h := &synthHeap{a: newArena(base, int(rootLen+heap+4096))}
	addr := uint64(base) + rootLen + 16
	for _, s := range sizes {
		h.blocks = append(h.blocks, Block{Addr: addr, Size: s})
		addr += s + 16
		h.bytes += s
	}
	var live, leaked []int
	for i := range h.blocks {
		if i%5 == 0 {
			leaked = append(leaked, i)
		} else {
			live = append(live, i)
		}
	}
	word := func(group []int) uint64 {
		switch r := rng.IntN(20); {
		case r < 9:
			return 0
		case r < 12:
			return uint64(rng.IntN(1 << 16))
		case r < 17:
			return h.blocks[group[rng.IntN(len(group))]].Addr
		case r < 18:
			b := h.blocks[group[rng.IntN(len(group))]]
			return b.Addr + 8 + uint64(rng.IntN(int(b.Size)-8))
		default:
			return 0x7f00_0000_0000 + rng.Uint64N(1<<40)
		}
	}
	for i, b := range h.blocks {
		group := live
		if i%5 == 0 {
			group = leaked
		}
		for off := uint64(0); off < b.Size; off += 8 {
			h.a.put(b.Addr+off, word(group))
		}
	}
	for off := uint64(0); off < rootLen; off += 8 {
		if rng.IntN(16) == 0 {
			h.a.put(base+off, h.blocks[live[rng.IntN(len(live))]].Addr)
		}
	}
	h.roots = []Root{{Addr: base, Len: rootLen, What: "data"}}
	h.bytes += rootLen
	h.regs = []uint64{h.blocks[live[0]].Addr}
	// Callers hand blocks over in hash-table order.
	rng.Shuffle(len(h.blocks), func(i, j int) { h.blocks[i], h.blocks[j] = h.blocks[j], h.blocks[i] })
	return h
}

func benchClassify(b *testing.B, h *synthHeap) {
	b.SetBytes(int64(h.bytes))
	b.ReportAllocs()
	var r *Result
	for b.Loop() {
		var err error
		r, err = Classify(h.blocks, h.regs, h.roots, h.a, DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(h.blocks))*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
	var n [Reachable + 1]int
	for _, k := range r.Kinds {
		n[k]++
	}
	scanned := r.Stats.RootBytes + r.Stats.BlockBytes
	b.ReportMetric(float64(scanned)/r.Stats.Duration.Seconds()/1e6, "scanMB/s")
	b.Logf("%d blocks: %d reachable, %d possible, %d definite, %d indirect; scanned %d MB in %v",
		len(r.Kinds), n[Reachable], n[Possible], n[Definite], n[Indirect], scanned>>20, r.Stats.Duration)
}

// BenchmarkClassify scans about 130 MB: 1.2 million blocks and 4 MB of
// roots. LEAK_BENCH_LARGE=1 adds the target case, about 500 MB in 5
// million blocks.
func BenchmarkClassify(b *testing.B) {
	b.Run("130MB", func(b *testing.B) {
		benchClassify(b, newSynthHeap(1_200_000, 4<<20))
	})
	if os.Getenv("LEAK_BENCH_LARGE") != "" {
		b.Run("500MB", func(b *testing.B) {
			benchClassify(b, newSynthHeap(5_000_000, 16<<20))
		})
	}
}
