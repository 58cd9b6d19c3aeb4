package heap

import (
	"math/rand"
	"testing"
)

// TestBlockTableAgainstMap runs random operations on the table and on a Go
// map side by side (addresses drawn from a small range so that probe runs
// collide, wrap and shift) and compares every answer.
func TestBlockTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	tab := newBlockTable()
	live := map[uint64]Block{}
	for step := 0; step < 300000; step++ {
		addr := uint64(1 + rng.Intn(5000))
		if rng.Intn(3) < 2 {
			b := Block{Size: uint64(step), Site: StackID(step % 7)}
			old, rep := tab.put(addr, b)
			want, had := live[addr]
			if rep != had || rep && old != want {
				t.Fatalf("step %d put %d: replaced %v %+v, want %v %+v", step, addr, rep, old, had, want)
			}
			live[addr] = b
		} else {
			got, ok := tab.take(addr)
			want, had := live[addr]
			if ok != had || ok && got != want {
				t.Fatalf("step %d take %d: %v %+v, want %v %+v", step, addr, ok, got, had, want)
			}
			delete(live, addr)
		}
		if step%997 == 0 {
			for a := uint64(1); a <= 5000; a++ {
				b, ok := tab.get(a)
				w, had := live[a]
				if ok != had || ok && b != w {
					t.Fatalf("step %d get %d: %v %+v, want %v %+v", step, a, ok, b, had, w)
				}
			}
			if tab.n != len(live) {
				t.Fatalf("step %d: %d live, want %d", step, tab.n, len(live))
			}
		}
	}
}

func TestFreeLogFindsTheLatestFree(t *testing.T) {
	l := newFreeLog(4)
	l.add(freeEntry{addr: 1, stack: 10})
	l.add(freeEntry{addr: 2, stack: 20})
	l.add(freeEntry{addr: 1, stack: 11})
	if e, ok := l.last(1); !ok || e.stack != 11 {
		t.Errorf("last(1) = %+v %v, want the free at stack 11", e, ok)
	}
	l.add(freeEntry{addr: 3})
	l.add(freeEntry{addr: 4}) // wraps: the oldest (1 at 10) goes
	l.add(freeEntry{addr: 5}) // 2 goes
	if _, ok := l.last(2); ok {
		t.Error("an aged-out free is still found")
	}
	if e, ok := l.last(1); !ok || e.stack != 11 {
		t.Errorf("after wrapping, last(1) = %+v %v", e, ok)
	}
}

// TestFreeLogGrows: a log starts small, grows as frees come, keeps every
// one of its last max frees, then forgets the oldest.
func TestFreeLogGrows(t *testing.T) {
	const max = 5000 // not a multiple of the start
	l := newFreeLog(max)
	if len(l.ents) >= max {
		t.Fatalf("a new log holds %d entries already", len(l.ents))
	}
	for i := uint64(1); i <= max; i++ {
		l.add(freeEntry{addr: i, stack: StackID(i)})
	}
	if len(l.ents) != max {
		t.Fatalf("%d entries after %d frees, want %d", len(l.ents), max, max)
	}
	for i := uint64(1); i <= max; i++ {
		if e, ok := l.last(i); !ok || e.stack != StackID(i) {
			t.Fatalf("free %d of %d: %+v %v", i, max, e, ok)
		}
	}
	for i := uint64(max + 1); i <= max+10; i++ {
		l.add(freeEntry{addr: i, stack: StackID(i)})
	}
	if len(l.ents) != max {
		t.Errorf("the log grew past its %d entries: %d", max, len(l.ents))
	}
	for i := uint64(1); i <= 10; i++ {
		if _, ok := l.last(i); ok {
			t.Errorf("free %d, 10 past the last %d, is still found", i, max)
		}
	}
	for i := uint64(11); i <= max+10; i++ {
		if e, ok := l.last(i); !ok || e.stack != StackID(i) {
			t.Fatalf("free %d after wrapping: %+v %v", i, e, ok)
		}
	}
	// Round and round (a long run's frees).
	for i := uint64(max + 11); i <= 4*max+3; i++ {
		l.add(freeEntry{addr: i, stack: StackID(i)})
	}
	if len(l.ents) != max {
		t.Errorf("%d entries after wrapping three times more, want %d", len(l.ents), max)
	}
	for i := uint64(3*max + 4); i <= 4*max+3; i++ {
		if e, ok := l.last(i); !ok || e.stack != StackID(i) {
			t.Fatalf("free %d after wrapping three times more: %+v %v", i, e, ok)
		}
	}
	if _, ok := l.last(3*max + 3); ok {
		t.Errorf("free %d, %d back, is still found", 3*max+3, max+1)
	}
}

// TestBlockTableProbes: heap-like addresses, blocks packed in pages and
// blocks one per page or at larger powers of two apart, find their slot
// within a few probes on average: strides must not pile up on a few homes.
// (Linear probing with random homes at the table's load, at most 1/2,
// expects (1 + 1/(1-load))/2 <= 1.5 probes a successful lookup; 4 leaves
// room for the strides' luck, and fails well short of a pile-up.)
// (A home keeping a page's blocks near each other, for the cache, made
// 32-byte blocks take 14-29 probes.)
func TestBlockTableProbes(t *testing.T) {
	for _, c := range []struct {
		name         string
		base, stride uint64
		n            int
	}{
		{"112-byte blocks", 0x55a000000000, 112, 200000},
		{"32-byte blocks", 0x55a000000000, 32, 200000},
		{"a block a page", 0x7f0000000000, 4096, 100000},
		{"16 KiB apart", 0x7f0000000000, 16 << 10, 100000},
		{"1 MiB apart", 0x7f0000000000, 1 << 20, 50000},
		{"64 MiB apart (arenas)", 0x7f0000000000, 64 << 20, 20000},
	} {
		tab := newBlockTable()
		for i := 0; i < c.n; i++ {
			tab.put(c.base+uint64(i)*c.stride, Block{Size: 1})
		}
		probes := 0
		for i := 0; i < c.n; i++ {
			addr := c.base + uint64(i)*c.stride
			for j := hashAddr(addr) & tab.mask; ; j = (j + 1) & tab.mask {
				probes++
				if tab.slots[j].addr == addr {
					break
				}
			}
		}
		if avg := float64(probes) / float64(c.n); avg > 4 {
			t.Errorf("%s: %.1f probes a lookup on average, want at most 4", c.name, avg)
		} else {
			t.Logf("%s: %.2f probes a lookup", c.name, avg)
		}
	}
}
