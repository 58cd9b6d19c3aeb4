package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// epoch is a stale epoch over a pool of 4 pages from 0x10000 that saw
// the pages touched.
func epoch(t uint64, touched ...uint32) event.Event {
	var bits uint64
	for _, i := range touched {
		bits |= 1 << i
	}
	return event.Event{Kind: event.StaleEpoch, Time: t, X: &event.Extra{Stale: &event.StaleInfo{
		Base: 0x10000, Page: 0x1000, Count: 4, Watched: 4, Referenced: []uint64{bits}}}}
}

// TestStaleAges: a block touched every epoch stays young; one never
// touched ages from its allocation; one touched once ages from then; a
// new block in a freed slot starts over. Stale groups extrapolate the
// share of a site's watched blocks to its live blocks.
func TestStaleAges(t *testing.T) {
	evs := append([]event.Event{start()}, stackDefs(2)...)
	evs = append(evs,
		at(alloc(50, 0x10000, 100, 1), 1), // slot 0: hot
		at(alloc(51, 0x11000, 200, 1), 1), // slot 1: never touched
		at(alloc(52, 0x12000, 300, 1), 2), // slot 2: touched at epoch 3
		at(alloc(53, 0x13000, 400, 1), 2), // slot 3: freed, then a new block
		at(alloc(54, 0x90000, 100, 1), 1), // site 1, not watched
		at(alloc(55, 0x91000, 100, 1), 1), // site 1, not watched
	)
	for k := uint64(1); k <= 12; k++ {
		touched := []uint32{0}
		if k == 3 {
			touched = append(touched, 2)
		}
		if k == 6 {
			evs = append(evs, free(550, 0x13000, 1), at(alloc(560, 0x13000, 40, 1), 2))
		}
		evs = append(evs, epoch(100*k, touched...))
	}
	s := NewSession()
	s.Apply(evs)
	p := s.Procs[0]
	type want struct {
		age        uint32
		lastAccess uint64
		accesses   uint32
	}
	wants := map[uint64]want{
		0x10000: {0, 1200, 12},
		0x11000: {12, 51, 0},
		0x12000: {9, 300, 1},
		0x13000: {7, 560, 0}, // epochs 6 to 12
	}
	for addr, w := range wants {
		a := p.Stale.Slots[addr]
		if a == nil {
			t.Errorf("no age for %#x", addr)
			continue
		}
		if g := (want{a.Age, a.LastAccess, a.Accesses}); g != w {
			t.Errorf("%#x: %+v, want %+v", addr, g, w)
		}
	}
	groups, c := p.StaleGroups(3, 8)
	if c != (StaleCounts{Epochs: 12, Watched: 4, AreaB: 3, Stale: 2}) {
		t.Errorf("counts %+v", c)
	}
	if len(groups) != 2 {
		t.Fatalf("%d groups, want 2: %+v", len(groups), groups)
	}
	// Site 1: 1 of its 2 watched blocks is stale, of 4 live: ~2 (200 B of 400).
	g1, g2 := groups[0], groups[1]
	if g1.Site != p.StackOf(1) {
		g1, g2 = g2, g1
	}
	if len(g1.Blocks) != 1 || g1.Blocks[0].Addr != 0x11000 || g1.Watched != 2 || g1.EstBlocks != 2 || g1.EstBytes != 250 || g1.SiteLiveBlocks != 4 {
		t.Errorf("site 1: %+v", g1)
	}
	if len(g2.Blocks) != 1 || g2.Blocks[0].Addr != 0x12000 || !g2.Blocks[0].Accessed || g2.Watched != 2 || g2.EstBlocks != 1 {
		t.Errorf("site 2: %+v", g2)
	}
	// A leaked block is a leak, not stale.
	p.blocks.setKind(0x11000, 200, event.Definite)
	if groups, _ := p.StaleGroups(3, 8); len(groups) != 1 {
		t.Errorf("a definite leak counted stale: %+v", groups)
	}
}

// TestStaleBetween: a reading between epochs (Aux 1, before a scan) takes
// the accesses and ages nothing.
func TestStaleBetween(t *testing.T) {
	evs := append([]event.Event{start()}, stackDefs(1)...)
	evs = append(evs, at(alloc(50, 0x10000, 100, 1), 1), at(alloc(51, 0x11000, 100, 1), 1),
		epoch(100), epoch(200))
	between := epoch(250, 1)
	between.Aux = 1
	evs = append(evs, between)
	s := NewSession()
	s.Apply(evs)
	p := s.Procs[0]
	if a, b := p.Stale.Slots[0x10000], p.Stale.Slots[0x11000]; a.Age != 2 || b.Age != 0 || b.LastAccess != 250 || p.Stale.Epochs != 2 {
		t.Errorf("ages %d and %d (last access %d), %d epochs; want 2, 0 (250), 2", a.Age, b.Age, b.LastAccess, p.Stale.Epochs)
	}
}
