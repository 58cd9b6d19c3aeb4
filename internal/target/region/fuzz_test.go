package region

import (
	"encoding/binary"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// Where FuzzRegion's bytes go: the header's fields up to the slot pool's,
// the slot table, ring 0, and fold area 0's FIFO (its first fuzzPend
// entries) and first fuzzAgg aggregates, of a region of fuzzSlots rings
// of fuzzRing bytes, back to back.
const (
	fuzzSlots   = 4
	fuzzRing    = 4096
	fuzzPend    = 8
	fuzzAgg     = 4
	fuzzHeader  = wire.OffStalePage + 4
	fuzzSlotEnd = fuzzHeader + fuzzSlots*wire.SlotSize
	fuzzRingEnd = fuzzSlotEnd + fuzzRing
	fuzzFoldEnd = fuzzRingEnd + wire.OffFoldPend + fuzzPend*wire.PendingSize
	fuzzEnd     = fuzzFoldEnd + fuzzAgg*wire.AggSize
)

// spread copies b over a region as the comment of fuzzHeader says.
func spread(r *Region, b []byte) {
	parts := []struct{ to, from, n int }{
		{0, 0, fuzzHeader},
		{wire.HeaderSize, fuzzHeader, fuzzSlots * wire.SlotSize},
		{r.dataOff, fuzzSlotEnd, fuzzRing},
		{r.foldOff, fuzzRingEnd, fuzzFoldEnd - fuzzRingEnd},
		{r.foldOff + wire.OffFoldAgg, fuzzFoldEnd, fuzzAgg * wire.AggSize},
	}
	for _, p := range parts {
		if p.from < len(b) {
			copy(r.mem[p.to:p.to+p.n], b[p.from:min(len(b), p.from+p.n)])
		}
	}
}

// fuzzSeed is a sound region: one thread's ring with a few records, one
// pending allocation in its fold area.
func fuzzSeed() []byte {
	b := make([]byte, fuzzEnd)
	le := binary.LittleEndian
	le.PutUint32(b[wire.OffSlotsUsed:], 1)
	le.PutUint32(b[fuzzHeader+wire.OffSlotState:], wire.SlotActive)
	le.PutUint32(b[fuzzHeader+wire.OffSlotTID:], 77)
	recs := []uint64{hdr(wire.RecThreadStart, 0, 3, 77), 1, 0,
		hdr(wire.RecStack, 0, 3, 1), 0x401000, 0x401100,
		hdr(wire.RecAlloc, int(event.Malloc), 4, 1), 2, 0x1000, 32}
	for i, w := range recs {
		le.PutUint64(b[fuzzSlotEnd+8*i:], w)
	}
	le.PutUint64(b[fuzzHeader+wire.OffSlotHead:], uint64(8*len(recs)))
	le.PutUint32(b[fuzzRingEnd+wire.OffFoldCount:], 1)
	e := b[fuzzRingEnd+wire.OffFoldPend:]
	le.PutUint64(e[wire.OffPendAddr:], 0x2000)
	le.PutUint64(e[wire.OffPendSize:], 48)
	e[wire.OffPendFn] = byte(event.Malloc)
	return b
}

// fuzzWrapped is fuzzSeed with ring 0's records wrapped around its end:
// an allocation across it, then a free.
func fuzzWrapped() []byte {
	b := fuzzSeed()
	le := binary.LittleEndian
	tail := uint64(fuzzRing - 16)
	recs := []uint64{hdr(wire.RecAlloc, int(event.Malloc), 4, 1), 2, 0x1000, 32,
		hdr(wire.RecFree, int(event.FreeFn), 3, 0), 3, 0x1000}
	for i, w := range recs {
		le.PutUint64(b[fuzzSlotEnd+int((tail+uint64(8*i))%fuzzRing):], w)
	}
	le.PutUint64(b[fuzzHeader+wire.OffSlotTail:], tail)
	le.PutUint64(b[fuzzHeader+wire.OffSlotHead:], tail+uint64(8*len(recs)))
	return b
}

// FuzzRegion writes arbitrary bytes where the program can write (the
// header, the slot table, a ring and a fold area) and has the collector
// read the region every way it does: it must never panic, never hand out
// more than the region holds, and read nothing once it found it corrupt.
func FuzzRegion(f *testing.F) {
	f.Add(fuzzSeed())
	spoilt := fuzzSeed()
	binary.LittleEndian.PutUint64(spoilt[fuzzHeader+wire.OffSlotHead:], 1<<40)
	f.Add(spoilt)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(fuzzWrapped())
	f.Fuzz(fuzzRegion)
}

func fuzzRegion(t *testing.T, b []byte) {
	// Ring 0 small, and ring 0 big (four times fuzzRing, the bytes in its
	// first quarter).
	for _, big := range []int{0, 2} {
		r := newRegion(t, 0, Options{Slots: fuzzSlots, RingSize: fuzzRing, StaleSlots: 8, BigRings: big})
		rings := r.foldOff - r.ringOff(0)
		spread(r, b)
		// Ring 0's tail where the bytes say, as the collector would have
		// left it (a multiple of 8): its records may wrap around the
		// ring's end.
		tail := r.u64(r.slotOff(0)+wire.OffSlotTail).Load() &^ 7
		r.tails[0] = tail
		r.u64(r.slotOff(0) + wire.OffSlotTail).Store(tail)
		got := &sliceTarget{m: map[int][]event.Event{}}
		total := 0
		for range 2 {
			n, err := r.Drain(got)
			if n < 0 || n > rings || (err != nil) != (r.Corrupt() != nil) {
				t.Fatalf("drained %d bytes, error %v, corrupt %v", n, err, r.Corrupt())
			}
			total += n
			if r.Corrupt() != nil {
				if n, _ := r.Drain(got); n != 0 {
					t.Fatalf("drained %d bytes of a corrupt region", n)
				}
				break
			}
		}
		evs := 0
		for _, e := range got.m {
			evs += len(e)
		}
		if evs > total/8 {
			t.Fatalf("%d events from %d bytes", evs, total)
		}
		if u := r.SlotsUsed(); u < 0 || u > fuzzSlots {
			t.Fatalf("%d slots used of %d", u, fuzzSlots)
		}
		if p := r.PeekPending(); len(p) > fuzzSlots*wire.Pend {
			t.Fatalf("%d pending blocks", len(p))
		}
		if p, ok := r.StalePool(); ok && (p.Count > maxStaleSlots || p.Page < 4096 || p.Page > 1<<20) {
			t.Fatalf("slot pool %+v", p)
		}
		if a, ok := r.TakeAsk(); ok {
			if (a.Kind != wire.AskSnapshot && a.Kind != wire.AskLeakCheck) || len(a.Label) >= wire.AskLabelMax {
				t.Fatalf("request %+v", a)
			}
			r.Answer(0)
		}
		if req, ok := r.PendingTrace(); ok && req.TID <= 0 {
			t.Fatalf("trace request of thread %d", req.TID)
		}
		for i := range r.SlotsUsed() {
			if left := r.Leftovers(i, 1, nil); len(left) > wire.Pend+wire.Agg {
				t.Fatalf("ring %d left %d events", i, len(left))
			}
		}
		r.Reclaim(func(int32) bool { return false }, func(int) {})
	}
}

// TestFuzzWrappedSeed: the wrapped seed decodes to its two records, the
// allocation put together from both ends of the ring.
func TestFuzzWrappedSeed(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: fuzzSlots, RingSize: fuzzRing})
	spread(r, fuzzWrapped())
	tail := r.u64(r.slotOff(0) + wire.OffSlotTail).Load()
	r.tails[0] = tail
	got := drain(t, r)[0]
	if len(got) != 2 || got[0].Kind != event.Alloc || got[0].Addr != 0x1000 || got[0].Size != 32 ||
		got[1].Kind != event.Free || got[1].Addr != 0x1000 {
		t.Fatalf("got %+v", got)
	}
}
