package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func poolEv(kind event.Kind, t, pool, addr, size uint64, stack uint32) event.Event {
	ev := event.Event{Kind: kind, Time: t, Thread: 1, Stack: stack}
	switch kind {
	case event.PoolCreate, event.PoolDestroy:
		ev.Addr = pool
	default:
		ev.Addr, ev.Size, ev.Aux = addr, size, pool
	}
	return ev
}

// TestPoolModel: a pool's objects live apart from the malloc'd block they
// lie in, even at its address, and from a nested pool's objects at the
// same address; they count at their sites, not in the totals; a free of
// an object the pool does not have is an invalid free; a destroy ends
// the objects left, each reported.
func TestPoolModel(t *testing.T) {
	const super, outer, inner = 0x10000, 0xa0, 0xb0
	s := NewSession()
	s.Apply([]event.Event{start(), stackDef(1, 0x401000), stackDef(2, 0x402000), stackDef(3, 0x403000),
		alloc(1, super, 4096, 1),
		poolEv(event.PoolCreate, 2, outer, 0, 0, 0),
		poolEv(event.PoolAlloc, 3, outer, super, 1024, 1), // inner's memory, at super's address
		poolEv(event.PoolCreate, 4, inner, 0, 0, 0),
		poolEv(event.PoolAlloc, 5, inner, super, 64, 2), // at the same address again
		poolEv(event.PoolAlloc, 6, inner, super+64, 32, 2),
		poolEv(event.PoolFree, 7, inner, super+64, 0, 0),
		poolEv(event.PoolFree, 8, inner, super+64, 0, 0), // again: invalid
		poolEv(event.PoolAlloc, 9, outer, super+2048, 16, 3),
		poolEv(event.PoolDestroy, 10, outer, 0, 0, 3),
	})
	s.Finish()
	p := s.Procs[0]
	if p.Totals.LiveBlocks != 1 || p.Totals.LiveBytes != 4096 {
		t.Errorf("totals: %d live blocks, %d B; want the malloc'd block alone", p.Totals.LiveBlocks, p.Totals.LiveBytes)
	}
	if p.PoolObjects() != 1 {
		t.Errorf("%d pool objects live, want 1 (inner's 64 B)", p.PoolObjects())
	}
	if st := p.Site(p.stackOf(2)); st == nil || st.Allocs != 2 || st.Frees != 1 || st.LiveBlocks != 1 || st.LiveBytes != 64 {
		t.Errorf("inner's site: %+v", st)
	}
	var invalid, destroyed int
	for _, e := range p.Errors {
		switch e.Kind {
		case InvalidFree:
			invalid++
			if e.Fn != event.PoolFreeFn || e.Addr != super+64 {
				t.Errorf("invalid free %+v", e)
			}
		case PoolDestroyedLive:
			destroyed += int(e.Count)
		}
	}
	if invalid != 1 || destroyed != 2 {
		t.Errorf("%d invalid frees (want 1), %d objects live at the destroy (want 2): %+v", invalid, destroyed, p.Errors)
	}
	// The malloc'd block holds inner's object: left out of scans and
	// listings, as the pool's memory.
	var spans []SpanBlock
	p.Live(func(key uint64, b Block) { spans = append(spans, SpanBlock{key, b.Size}) })
	holders, overlapping := PoolLayout(spans)
	if len(holders) != 1 || !holders[super] || len(overlapping) != 0 {
		t.Errorf("holders %v, overlapping %v; want the malloc'd block alone", holders, overlapping)
	}
	for _, g := range p.Leaks() {
		if g.Bytes == 4096 {
			t.Errorf("the pool's memory is listed: %+v", g)
		}
	}
}

// TestPoolLayout: nesting makes holders at every level; a block that
// overlaps another without lying in it is left out, as are two of the
// allocator's blocks that overlap.
func TestPoolLayout(t *testing.T) {
	obj := func(addr uint64, pool uint64) uint64 { return addr | pool<<poolShift }
	bs := []SpanBlock{
		{0x1000, 0x1000},        // malloc'd: pool 1's memory
		{obj(0x1000, 1), 0x400}, // pool 1: pool 2's memory
		{obj(0x1000, 2), 0x40},  // pool 2's object at the same address
		{obj(0x1040, 2), 0x40},  //
		{obj(0x1400, 1), 0x20},  // pool 1's object
		{obj(0x1410, 1), 0x20},  // overlaps the one before: left out
		{0x3000, 0x100},         // malloc'd, no pool
		{obj(0x2ff0, 3), 0x20},  // straddles into it: left out
		{obj(0x5000, 3), 0},     // zero-size, alone
		{0x4000, 0x100},         // two malloc'd blocks that overlap
		{0x4080, 0x100},         // (the model's own error): the later left out
	}
	holders, overlapping := PoolLayout(bs)
	wantH := map[uint64]bool{0x1000: true, obj(0x1000, 1): true}
	wantO := map[uint64]bool{obj(0x1410, 1): true, 0x3000: true, 0x4080: true}
	if len(holders) != len(wantH) || len(overlapping) != len(wantO) {
		t.Errorf("holders %v, overlapping %v; want %v, %v", holders, overlapping, wantH, wantO)
	}
	for k := range wantH {
		if !holders[k] {
			t.Errorf("%#x is no holder", k)
		}
	}
	for k := range wantO {
		if !overlapping[k] {
			t.Errorf("%#x is not left out", k)
		}
	}
	if h, o := PoolLayout([]SpanBlock{{0x1000, 16}, {0x1008, 16}}); h != nil || o != nil {
		t.Errorf("without pools: %v, %v; want nil", h, o)
	}
}
