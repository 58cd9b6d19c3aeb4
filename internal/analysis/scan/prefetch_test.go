package scan

import (
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// fakeMem is memory whose byte at a is byte(a*7), readable in [lo, hi)
// but for the page at hole; it counts the ranges it is asked for.
type fakeMem struct {
	lo, hi, hole uint64
	asked        atomic.Int64 // (the copy reads in two halves at once)
}

func (m *fakeMem) ReadRanges(rs []ptrace.Range) (int, error) {
	total := 0
	var err error
	for i := range rs {
		r := &rs[i]
		m.asked.Add(1)
		r.N = 0
		for a := r.Addr; a < r.Addr+uint64(len(r.Buf)); a++ {
			if a < m.lo || a >= m.hi || a&^4095 == m.hole {
				if err == nil {
					err = errors.New("unreadable")
				}
				break
			}
			r.Buf[r.N] = byte(a * 7)
			r.N++
		}
		total += r.N
	}
	return total, err
}

// TestPrefetch: reads through the copy return what the memory holds,
// whether they fall in a run, across runs, in a gap, on the unreadable
// page or outside the heap; and blocks in the copy cost no further reads.
func TestPrefetch(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	mem := &fakeMem{lo: 0x10000, hi: 0x90000, hole: 0x40000}
	var blocks []leak.Block
	for a := uint64(0x10010); a < 0x80000; {
		size := uint64(16 * (1 + r.IntN(20)))
		blocks = append(blocks, leak.Block{Addr: a, Size: size})
		a += size + uint64(16*r.IntN(3))
		if r.IntN(100) == 0 {
			a += 8192 // a new run
		}
	}
	got, read := prefetch(mem, blocks, 1<<30)
	h, ok := got.(*heapCopy)
	if !ok || len(h.runs) < 2 || read == 0 {
		t.Fatalf("prefetch made %T with %d runs, read %d", got, len(h.runs), read)
	}
	if small, _ := prefetch(mem, blocks, 4096); small != leak.Memory(mem) {
		t.Errorf("prefetch over its limit copied anyway")
	}
	mem.asked.Store(0)
	var rs []ptrace.Range
	for _, b := range blocks {
		rs = append(rs, ptrace.Range{Addr: b.Addr, Buf: make([]byte, b.Size)})
	}
	for i := 0; i < 200; i++ {
		a := 0x8000 + uint64(r.IntN(0x90000))
		rs = append(rs, ptrace.Range{Addr: a, Buf: make([]byte, 1+r.IntN(9000))})
	}
	r.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	want := make([]ptrace.Range, len(rs))
	for i := range rs {
		want[i] = ptrace.Range{Addr: rs[i].Addr, Buf: make([]byte, len(rs[i].Buf))}
	}
	wantN, wantErr := (&fakeMem{lo: mem.lo, hi: mem.hi, hole: mem.hole}).ReadRanges(want)
	n, err := h.ReadRanges(rs)
	if n != wantN || (err == nil) != (wantErr == nil) {
		t.Errorf("ReadRanges: %d bytes, error %v; the memory itself: %d, %v", n, err, wantN, wantErr)
	}
	for i := range rs {
		if rs[i].N != want[i].N || string(rs[i].Buf[:rs[i].N]) != string(want[i].Buf[:want[i].N]) {
			t.Fatalf("range %d at %#x+%d: read %d bytes, the memory gives %d (or other bytes)", i, rs[i].Addr, len(rs[i].Buf), rs[i].N, want[i].N)
		}
	}
	if mem.asked.Load() > 200 {
		t.Errorf("the memory was asked for %d ranges; only the 200 random ones may miss the copy", mem.asked.Load())
	}
}

// TestPrefetchSplit: a copy large enough to be read in two halves at
// once holds what the memory does, the run cut at the middle included,
// wherever the unreadable page lies: before the cut, after it, or none.
// Every 256 KiB a gap of 8 KiB starts a new run: the cut falls in one of
// a dozen.
func TestPrefetchSplit(t *testing.T) {
	const lo, size = 0x100000, 3 << 20
	for _, hole := range []uint64{0x101000, lo + size/2 - 4096, lo + size/2 + 8192, 0} {
		mem := &fakeMem{lo: lo, hi: lo + size, hole: hole}
		var blocks []leak.Block
		for a := uint64(lo); a+512 <= lo+size; a += 512 {
			if (a-lo)%(256<<10) < 8192 && a > lo {
				continue
			}
			blocks = append(blocks, leak.Block{Addr: a, Size: 496})
		}
		got, _ := prefetch(mem, blocks, 1<<30)
		h, ok := got.(*heapCopy)
		if !ok {
			t.Fatalf("hole %#x: prefetch made %T", hole, got)
		}
		asked := mem.asked.Load()
		for _, b := range blocks {
			rs := []ptrace.Range{{Addr: b.Addr, Buf: make([]byte, b.Size)}}
			want := []ptrace.Range{{Addr: b.Addr, Buf: make([]byte, b.Size)}}
			(&fakeMem{lo: mem.lo, hi: mem.hi, hole: hole}).ReadRanges(want)
			h.ReadRanges(rs)
			if rs[0].N != want[0].N || string(rs[0].Buf[:rs[0].N]) != string(want[0].Buf[:want[0].N]) {
				t.Fatalf("hole %#x: block %#x: read %d bytes, the memory gives %d (or other bytes)", hole, b.Addr, rs[0].N, want[0].N)
			}
		}
		// Only the blocks on the unreadable page are asked again.
		if again := mem.asked.Load() - asked; again > 16 {
			t.Errorf("hole %#x: %d blocks missed the copy", hole, again)
		}
	}
}
