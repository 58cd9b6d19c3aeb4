package leak

import (
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time: on a shared machine the
// wall time of a benchmark says more about the neighbours than about the
// code.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// synthHeap is a synthetic process image for benchmarks: a root region,
// then blocks laid out like glibc malloc's (sizes 16 to 248 bytes, an
// 8-byte header, chunks rounded up to 16 bytes), 80% of them live and 20%
// leaked. Of the words of blocks, 45% are
// zeros, 15% small numbers, 25% start pointers, 5% interior pointers (live
// blocks point to live ones, leaked to leaked) and 10% addresses outside
// the heap: denser in pointers than most heaps. With sparse, pointers are
// a third of that (10% of the words), the rest zeros. With local, 7
// pointers in 8 go to blocks allocated nearby (within 256 blocks), as in
// real heaps, where what is allocated together points together; else they
// go anywhere in the heap, the worst case for caches.
type synthHeap struct {
	a      *arena
	blocks []Block
	roots  []Root
	regs   []uint64
	bytes  uint64 // roots and blocks
}

func newSynthHeap(nblocks int, rootLen uint64, local, sparse bool) *synthHeap {
	rng := rand.New(rand.NewPCG(7, 11))
	const base = 0x5555_0000_0000
	sizes := make([]uint64, nblocks)
	var heap uint64
	chunk := func(size uint64) uint64 { return max(32, (size+8+15)&^15) }
	for i := range sizes {
		sizes[i] = 16 + 8*uint64(rng.IntN(30))
		heap += chunk(sizes[i])
	}
	h := &synthHeap{a: newArena(base, int(rootLen+heap+4096))}
	addr := uint64(base) + rootLen + 16
	for _, s := range sizes {
		h.blocks = append(h.blocks, Block{Addr: addr, Size: s})
		addr += chunk(s)
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
	// target picks a block of group for a pointer from the block at
	// position at in group.
	target := func(group []int, at int) Block {
		if local && rng.IntN(8) != 0 {
			return h.blocks[group[max(0, min(len(group)-1, at+rng.IntN(512)-256))]]
		}
		return h.blocks[group[rng.IntN(len(group))]]
	}
	word := func(group []int, at int) uint64 {
		r := rng.IntN(20)
		if sparse && r >= 12 && r < 18 && rng.IntN(3) != 0 {
			return 0
		}
		switch {
		case r < 9:
			return 0
		case r < 12:
			return uint64(rng.IntN(1 << 16))
		case r < 17:
			return target(group, at).Addr
		case r < 18:
			b := target(group, at)
			return b.Addr + 8 + uint64(rng.IntN(int(b.Size)-8))
		default:
			return 0x7f00_0000_0000 + rng.Uint64N(1<<40)
		}
	}
	for i, b := range h.blocks {
		group, at := live, i-i/5-1
		if i%5 == 0 {
			group, at = leaked, i/5
		}
		for off := uint64(0); off < b.Size; off += 8 {
			h.a.put(b.Addr+off, word(group, at))
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
	var cpu time.Duration
	for b.Loop() {
		c0 := cpuTime()
		var err error
		r, err = Classify(h.blocks, h.regs, h.roots, h.a, DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
	}
	// Throughput per CPU second (GOMAXPROCS=1: one core), blocks and
	// bytes of roots and blocks.
	b.ReportMetric(float64(len(h.blocks))*float64(b.N)/cpu.Seconds(), "blocks/cpu-s")
	b.ReportMetric(float64(h.bytes)*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
	var n [Reachable + 1]int
	for _, k := range r.Kinds {
		n[k]++
	}
	scanned := r.Stats.RootBytes + r.Stats.BlockBytes
	b.Logf("%d blocks: %d reachable, %d possible, %d definite, %d indirect; scanned %d MB in %v",
		len(r.Kinds), n[Reachable], n[Possible], n[Definite], n[Indirect], scanned>>20, r.Stats.Duration)
}

// BenchmarkClassify scans about 130 MB: 1.2 million blocks and 4 MB of
// roots, pointers local, uniform, or local and sparse. LEAK_BENCH_LARGE=1 adds the target
// case, about 500 MB in 5 million blocks.
func BenchmarkClassify(b *testing.B) {
	for _, c := range []struct {
		name          string
		local, sparse bool
	}{{"local", true, false}, {"uniform", false, false}, {"sparse", true, true}} {
		b.Run("130MB-"+c.name, func(b *testing.B) {
			benchClassify(b, newSynthHeap(1_200_000, 4<<20, c.local, c.sparse))
		})
		if os.Getenv("LEAK_BENCH_LARGE") != "" {
			b.Run("500MB-"+c.name, func(b *testing.B) {
				benchClassify(b, newSynthHeap(5_000_000, 16<<20, c.local, c.sparse))
			})
		}
	}
}
