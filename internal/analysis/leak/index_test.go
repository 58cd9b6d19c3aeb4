package leak

import (
	"math/rand/v2"
	"testing"
)

// TestIndexFind checks find and locate against a linear search, over
// blocks in several clusters (far apart, big blocks), aligned (rank
// bitmaps) or not (tables), with probes at starts, inside, at ends, in
// gaps and outside.
func TestIndexFind(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ranks, tables := 0, 0
	for iter := range 100 {
		align := []uint64{16, 8, 1}[rng.IntN(3)]
		var spans []span
		addr := uint64(0x5555_0000_0000) + rng.Uint64N(1<<20)*align
		for range 1 + rng.IntN(300) {
			switch rng.IntN(20) {
			case 0:
				addr += 2<<20 + rng.Uint64N(1<<24) // a new cluster
			case 1:
				addr += rng.Uint64N(1 << 16)
			}
			addr = (addr + align - 1) / align * align
			size := uint64(rng.IntN(200))
			if rng.IntN(30) == 0 {
				size = 1<<20 + rng.Uint64N(1<<22) // a big block
			}
			end := addr + size
			if size == 0 {
				end++
			}
			spans = append(spans, span{addr, end})
			addr = end + uint64(rng.IntN(3))*align
		}
		var x index
		x.build(spans, func(n int) []rankWord { return make([]rankWord, n) })
		for _, c := range x.clusters {
			if c.rank != nil {
				ranks++
			} else {
				tables++
			}
		}
		linear := func(v uint64) (int32, bool) {
			for k, s := range spans {
				if v >= s.start && v < s.end {
					return int32(k), v == s.start
				}
			}
			return -1, false
		}
		var probes []uint64
		for range 2000 {
			s := spans[rng.IntN(len(spans))]
			switch rng.IntN(6) {
			case 0:
				probes = append(probes, s.start)
			case 1:
				probes = append(probes, s.start+rng.Uint64N(s.end-s.start+1))
			case 2:
				probes = append(probes, s.end, s.end-1, s.start-1)
			case 3:
				probes = append(probes, rng.Uint64N(1<<48))
			case 4:
				probes = append(probes, spans[0].start-rng.Uint64N(1<<21), spans[len(spans)-1].end+rng.Uint64N(1<<21))
			default:
				probes = append(probes, s.start+rng.Uint64N(1<<22)-1<<21)
			}
		}
		for _, v := range probes {
			wk, ws := linear(v)
			if k, st := x.find(v); k != wk || st != ws {
				t.Fatalf("iteration %d (align %d, %d clusters): find(%#x) = %d, %v; want %d, %v", iter, align, len(x.clusters), v, k, st, wk, ws)
			}
		}
		var hs []hit
		for off := 0; off < len(probes); off += lookBatch {
			hs = x.locate(probes[off:], hs, int32(off))
		}
		i := 0
		for pos, v := range probes {
			wk, ws := linear(v)
			if wk < 0 {
				continue
			}
			want := hit{v: v, k: wk, pos: int32(pos), start: ws}
			if i >= len(hs) || hs[i] != want {
				t.Fatalf("iteration %d: locate: hit %d is %+v, want %+v", iter, i, hs[min(i, len(hs)-1)], want)
			}
			i++
		}
		if i != len(hs) {
			t.Fatalf("iteration %d: locate found %d hits, want %d", iter, len(hs), i)
		}
	}
	if ranks < 50 || tables < 50 {
		t.Errorf("%d clusters with rank bitmaps, %d with tables: too few to test both", ranks, tables)
	}
}
