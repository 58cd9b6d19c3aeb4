package heap

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
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
			old, rep := tab.putB(addr, b)
			want, had := live[addr]
			if rep != had || rep && old != want {
				t.Fatalf("step %d put %d: replaced %v %+v, want %v %+v", step, addr, rep, old, had, want)
			}
			live[addr] = b
		} else {
			got, ok := tab.takeB(addr)
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
			checkBlockTable(t, tab, live)
		}
	}
}

// putBlocks puts blocks of size i at i*stride, for i in [from, to], in
// tab and in live, the test's own account of what tab holds.
func putBlocks(tab *blockTable, live map[uint64]Block, from, to, stride uint64) {
	for i := from; i <= to; i++ {
		tab.putB(i*stride, Block{Size: i})
		live[i*stride] = Block{Size: i}
	}
}

// checkBlockTable compares tab with live: its count, a lookup of every
// live block, each (every live block once), and its insides: every slot
// names a live entry whose hash it keeps, no entry is named twice, and
// every entry is live or free, once.
func checkBlockTable(t *testing.T, tab *blockTable, live map[uint64]Block) {
	t.Helper()
	if tab.n != len(live) {
		t.Fatalf("%d live, want %d", tab.n, len(live))
	}
	for a, want := range live {
		if b, ok := tab.get(a); !ok || b != want {
			t.Fatalf("get %#x: %+v %v, want %+v", a, b, ok, want)
		}
	}
	seen := map[uint64]bool{}
	tab.each(func(a uint64, b Block) {
		if seen[a] {
			t.Fatalf("each visits %#x twice", a)
		}
		seen[a] = true
		if want, ok := live[a]; !ok || b != want {
			t.Fatalf("each visits %#x with %+v, want %+v (live %v)", a, b, want, ok)
		}
	})
	if len(seen) != len(live) {
		t.Fatalf("each visits %d blocks, want %d", len(seen), len(live))
	}
	named := map[uint32]bool{}
	slots, dead := 0, 0
	for g := 0; g < len(tab.words); g += groupWords {
		if b := tab.words[g] >> 56; b != ctrlDeleted {
			t.Fatalf("group %d: control word %#x, its last byte not %#x", g/groupWords, tab.words[g], ctrlDeleted)
		}
		for j := 0; j < groupSlots; j++ {
			c := tab.words[g] >> (j * 8) & 0xff
			v := tab.words[g+1+j]
			if c == ctrlDeleted {
				dead++
			}
			if c&0x80 != 0 {
				if v != 0 {
					t.Fatalf("group %d slot %d: %#x, control byte %#x", g/groupWords, j, v, c)
				}
				continue
			}
			if c != h2(uint32(v>>32)) {
				t.Fatalf("group %d slot %d: %#x, control byte %#x, want %#x", g/groupWords, j, v, c, h2(uint32(v>>32)))
			}
			slots++
			n := uint32(v) - 1
			if n >= tab.used || named[n] {
				t.Fatalf("slot %#x names entry %d (of %d) out of range or twice", v, n, tab.used)
			}
			named[n] = true
			e := tab.ent(n)
			if e.addr == 0 || tagOf(e.addr) != uint32(v>>32) {
				t.Fatalf("slot %#x names entry %d of %#x", v, n, e.addr)
			}
		}
	}
	if slots != tab.n || dead != tab.dead {
		t.Fatalf("%d slots taken, %d deleted; %d live, %d deleted", slots, dead, tab.n, tab.dead)
	}
	for _, n := range tab.free {
		if named[n] || tab.ent(n).addr != 0 {
			t.Fatalf("free entry %d is live", n)
		}
		named[n] = true
	}
	if len(named) != int(tab.used) {
		t.Fatalf("%d entries live or free, %d handed out", len(named), tab.used)
	}
}

// sameHome returns n addresses whose probes start at the same group of a
// new table, its last: past 7 (a group's slots) they wrap around to the
// first groups.
func sameHome(n int) []uint64 {
	tab := newBlockTable()
	var out []uint64
	for a := uint64(0x1000); len(out) < n; a += 16 {
		if uint64(tagOf(a))&tab.gmask == tab.gmask {
			out = append(out, a)
		}
	}
	return out
}

// TestBlockTableCollisions: blocks sharing a group, more than it holds,
// the rest in the first groups after the wrap around the table's end, are
// found as blocks are taken from the run's start, middle and end and put
// back (the full group's slots become deleted, not empty, and are taken
// again).
func TestBlockTableCollisions(t *testing.T) {
	addrs := sameHome(12)
	for _, order := range [][]int{
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
		{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0},
		{5, 0, 11, 6, 1, 10, 2, 9, 3, 8, 4, 7},
	} {
		tab := newBlockTable()
		live := map[uint64]Block{}
		// Blocks of the first group, which the run fills.
		for a := uint64(0x900000); len(live) < 4; a += 16 {
			if h := uint64(tagOf(a)) & tab.gmask; h == 0 {
				tab.putB(a, Block{Size: a})
				live[a] = Block{Size: a}
			}
		}
		for i, a := range addrs {
			tab.putB(a, Block{Size: uint64(i + 1), Site: StackID(i)})
			live[a] = Block{Size: uint64(i + 1), Site: StackID(i)}
		}
		checkBlockTable(t, tab, live)
		for _, k := range order {
			b, ok := tab.takeB(addrs[k])
			if want := live[addrs[k]]; !ok || b != want {
				t.Fatalf("take %#x: %+v %v, want %+v", addrs[k], b, ok, want)
			}
			delete(live, addrs[k])
			checkBlockTable(t, tab, live)
			if _, ok := tab.takeB(addrs[k]); ok {
				t.Fatalf("%#x taken twice", addrs[k])
			}
		}
		for i, a := range addrs[:6] {
			tab.putB(a, Block{Size: uint64(100 + i)})
			live[a] = Block{Size: uint64(100 + i)}
		}
		checkBlockTable(t, tab, live)
	}
}

// TestBlockTableDeletedSlots: blocks of one group, more than it holds,
// put and taken over and over leave deleted slots in the full groups;
// the index is never grown for them, and every block stays found (its
// rebuild at its size: TestBlockTableRebuildsInPlace).
func TestBlockTableDeletedSlots(t *testing.T) {
	addrs := sameHome(40)
	rng := rand.New(rand.NewSource(3))
	tab := newBlockTable()
	live := map[uint64]Block{}
	sawDead := false
	for step := 0; step < 20000; step++ {
		a := addrs[rng.Intn(len(addrs))]
		if _, ok := live[a]; ok {
			if _, ok := tab.takeB(a); !ok {
				t.Fatalf("step %d: take %#x: not found", step, a)
			}
			delete(live, a)
		} else {
			tab.putB(a, Block{Size: uint64(step + 1)})
			live[a] = Block{Size: uint64(step + 1)}
		}
		sawDead = sawDead || tab.dead > 0
		if step%1000 == 0 {
			checkBlockTable(t, tab, live)
		}
	}
	checkBlockTable(t, tab, live)
	if !sawDead {
		t.Error("no slot was ever left deleted: the test misses that path")
	}
	if len(tab.words) != minBlockGrp*groupWords {
		t.Errorf("%d words for at most %d blocks, want %d", len(tab.words), len(addrs), minBlockGrp*groupWords)
	}
}

// TestBlockTableRebuildsInPlace: full groups whose blocks are taken
// keep their slots deleted; once live and deleted slots fill half the
// index while the live ones stay under 3/4 of what it may hold, the index
// is rebuilt at its size, without deleted slots, and every block is
// found.
func TestBlockTableRebuildsInPlace(t *testing.T) {
	tab := newBlockTable()
	groups := len(tab.words) / groupWords
	home := map[uint64][]uint64{} // groupSlots addresses for each group
	for a, done := uint64(0x1000), 0; done < groups; a += 16 {
		if g := uint64(tagOf(a)) & tab.gmask; len(home[g]) < groupSlots {
			if home[g] = append(home[g], a); len(home[g]) == groupSlots {
				done++
			}
		}
	}
	live := map[uint64]Block{}
	put := func(a uint64) {
		tab.putB(a, Block{Size: a & 0xfff})
		live[a] = Block{Size: a & 0xfff}
	}
	// The first 70 groups full, then 4 blocks of each taken: deleted.
	for g := uint64(0); g < 70; g++ {
		for _, a := range home[g] {
			put(a)
		}
	}
	for g := uint64(0); g < 70; g++ {
		for _, a := range home[g][:4] {
			if _, ok := tab.takeB(a); !ok {
				t.Fatalf("take %#x: not found", a)
			}
			delete(live, a)
		}
	}
	if tab.dead != 280 {
		t.Fatalf("%d slots deleted, want 280 (4 in each of 70 full groups)", tab.dead)
	}
	words := len(tab.words)
	rebuilt := false
	for g := uint64(70); g < uint64(groups) && !rebuilt; g++ {
		for _, a := range home[g] {
			put(a)
			if tab.dead == 0 {
				rebuilt = true
				break
			}
		}
	}
	if !rebuilt {
		t.Fatalf("no rebuild with %d live and %d deleted slots in %d", tab.n, tab.dead, len(tab.words))
	}
	if len(tab.words) != words {
		t.Errorf("rebuilt to %d words for %d blocks, want %d: only deleted slots were to go", len(tab.words), tab.n, words)
	}
	checkBlockTable(t, tab, live)
}

// TestBlockTableSameTag: two addresses whose slots keep the same hash
// bits are told apart by their entries.
func TestBlockTableSameTag(t *testing.T) {
	byTag := map[uint32]uint64{}
	var a, b uint64
	for x := uint64(0x7f0000000010); b == 0; x += 16 {
		if y, ok := byTag[tagOf(x)]; ok {
			a, b = y, x
		}
		byTag[tagOf(x)] = x
	}
	tab := newBlockTable()
	live := map[uint64]Block{a: {Size: 1}, b: {Size: 2}}
	tab.putB(a, live[a])
	tab.putB(b, live[b])
	checkBlockTable(t, tab, live)
	if old, rep := tab.putB(b, Block{Size: 3}); !rep || old.Size != 2 {
		t.Fatalf("put again at %#x replaced %+v %v, want size 2", b, old, rep)
	}
	live[b] = Block{Size: 3}
	checkBlockTable(t, tab, live)
	// b's slot is after a's: a lookup of b meets a's first.
	if got, ok := tab.takeB(b); !ok || got.Size != 3 {
		t.Fatalf("take %#x: %+v %v, want size 3", b, got, ok)
	}
	delete(live, b)
	checkBlockTable(t, tab, live)
	if _, ok := tab.takeB(b); ok {
		t.Fatalf("%#x taken twice", b)
	}
	if got, ok := tab.takeB(a); !ok || got.Size != 1 {
		t.Fatalf("take %#x: %+v %v, want size 1", a, got, ok)
	}
	delete(live, a)
	checkBlockTable(t, tab, live)
}

// TestBlockTableGrow: a table grown from its first size to 2^19 slots,
// across many chunks of entries, keeps every block; taking half and
// putting as many back reuses the freed entries.
func TestBlockTableGrow(t *testing.T) {
	tab := newBlockTable()
	live := map[uint64]Block{}
	const n = 200000
	for i := uint64(0); i < n; i++ {
		a := 0x55a000000000 + i*48
		tab.putB(a, Block{Size: i, Time: i * 3})
		live[a] = Block{Size: i, Time: i * 3}
	}
	if len(tab.words) != 1<<19 {
		t.Errorf("%d blocks in %d words, want %d", n, len(tab.words), 1<<19)
	}
	checkBlockTable(t, tab, live)
	for i := uint64(0); i < n; i += 2 {
		a := 0x55a000000000 + i*48
		if b, ok := tab.takeB(a); !ok || b.Size != i {
			t.Fatalf("take %#x: %+v %v", a, b, ok)
		}
		delete(live, a)
	}
	checkBlockTable(t, tab, live)
	for i := uint64(0); i < n/2; i++ {
		a := 0x7f0000000000 + i*4096
		tab.putB(a, Block{Size: i + 7})
		live[a] = Block{Size: i + 7}
	}
	if tab.used != n {
		t.Errorf("%d entries handed out for at most %d live blocks", tab.used, n)
	}
	checkBlockTable(t, tab, live)
}

// TestBlockTableReusesEntries: a program allocating and freeing at a few
// blocks live keeps as many entries, however long it runs.
func TestBlockTableReusesEntries(t *testing.T) {
	tab := newBlockTable()
	var window [64]uint64
	for i := 0; i < 100000; i++ {
		if a := window[i%64]; a != 0 {
			if _, ok := tab.takeB(a); !ok {
				t.Fatalf("take %#x: not found", a)
			}
		}
		a := 0x10000 + uint64(i)*32
		tab.putB(a, Block{Size: 32})
		window[i%64] = a
	}
	if tab.used > 64 {
		t.Errorf("%d entries handed out for 64 blocks live", tab.used)
	}
}

// TestBlockTableKeepsEveryField: put, get, take and a replacing put give
// back the block with every field as it was put (the table copies a
// Block a field at a time).
func TestBlockTableKeepsEveryField(t *testing.T) {
	var b Block
	v := reflect.ValueOf(&b).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(0xf0 + i))
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(0xf0 + i))
		default:
			t.Fatalf("Block.%s: a field of kind %s this test cannot fill", v.Type().Field(i).Name, f.Kind())
		}
	}
	tab := newBlockTable()
	tab.putB(0x1000, b)
	if got, ok := tab.get(0x1000); !ok || got != b {
		t.Errorf("get: %+v, want %+v", got, b)
	}
	if old, rep := tab.putB(0x1000, b); !rep || old != b {
		t.Errorf("put again replaced %+v, want %+v", old, b)
	}
	if got, ok := tab.get(0x1000); !ok || got != b {
		t.Errorf("get after replacing: %+v, want %+v", got, b)
	}
	if got, ok := tab.takeB(0x1000); !ok || got != b {
		t.Errorf("take: %+v, want %+v", got, b)
	}
}

// TestBlockTableKinds: setKind marks only a live block of the size
// given; clearKinds unmarks every one; a grown table keeps the kinds.
func TestBlockTableKinds(t *testing.T) {
	tab := newBlockTable()
	live := map[uint64]Block{}
	putBlocks(tab, live, 1, 3000, 64)
	if tab.setKind(64, 2, event.Definite) {
		t.Error("setKind with the wrong size marked a block")
	}
	if tab.setKind(1<<40, 1, event.Definite) {
		t.Error("setKind marked a block never put")
	}
	for i := uint64(1); i <= 3000; i += 3 {
		if !tab.setKind(i*64, i, event.Indirect) {
			t.Fatalf("setKind %#x: not found", i*64)
		}
		live[i*64] = Block{Size: i, Kind: event.Indirect}
	}
	putBlocks(tab, live, 3001, 6000, 64) // grows, into a second chunk
	checkBlockTable(t, tab, live)
	for i := uint64(5000); i <= 6000; i += 2 {
		if !tab.setKind(i*64, i, event.Reachable) {
			t.Fatalf("setKind %#x: not found", i*64)
		}
		live[i*64] = Block{Size: i, Kind: event.Reachable}
	}
	checkBlockTable(t, tab, live)
	tab.clearKinds()
	for a, b := range live {
		b.Kind = event.Unclassified
		live[a] = b
	}
	checkBlockTable(t, tab, live)
}

// TestBlockTableClone: a clone and its table change apart, in the first
// chunk of entries and in later ones, their free entries too.
func TestBlockTableClone(t *testing.T) {
	tab := newBlockTable()
	live := map[uint64]Block{}
	putBlocks(tab, live, 1, 10000, 32)
	for i := uint64(1); i <= 10000; i += 5 {
		tab.takeB(i * 32)
		delete(live, i*32)
	}
	c := tab.clone()
	cLive := map[uint64]Block{}
	for a, b := range live {
		cLive[a] = b
	}
	// The parent allocates and frees; the child changes the same blocks
	// otherwise.
	for _, i := range []uint64{2, 3, 9000, 9001} {
		tab.putB(i*32+8, Block{Size: 1})
		live[i*32+8] = Block{Size: 1}
		tab.takeB(i * 32)
		delete(live, i*32)
		c.putB(i*32, Block{Size: 77})
		cLive[i*32] = Block{Size: 77}
		c.setKind(i*32+32, i+1, event.Definite)
		b := cLive[i*32+32]
		b.Kind = event.Definite
		cLive[i*32+32] = b
	}
	c.putB(1<<40, Block{Size: 5})
	cLive[1<<40] = Block{Size: 5}
	checkBlockTable(t, tab, live)
	checkBlockTable(t, c, cLive)
	tab.clearKinds()
	checkBlockTable(t, c, cLive)
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
// within a few probes on average: strides must not pile up on a few
// groups. (A lookup reads a control word and the slot it names, 2 probes,
// plus a group more for the few past a full group, and a slot more for
// the 1 in 128 others whose control byte matches; 4 leaves room for the
// strides' luck, and fails well short of a pile-up.) (A home keeping a
// page's blocks near each other, for the cache, made 32-byte blocks take
// 14-29 probes.)
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
			tab.putB(c.base+uint64(i)*c.stride, Block{Size: 1})
		}
		probes := 0
		for i := 0; i < c.n; i++ {
			addr := c.base + uint64(i)*c.stride
			probes += tab.probes(addr)
		}
		if avg := float64(probes) / float64(c.n); avg > 4 {
			t.Errorf("%s: %.1f probes a lookup on average, want at most 4", c.name, avg)
		} else {
			t.Logf("%s: %.2f probes a lookup", c.name, avg)
		}
	}
}

// probes returns the control words and slots a lookup of addr reads, or
// -1 if it finds no block there.
func (t *blockTable) probes(addr uint64) int {
	tag := tagOf(addr)
	n := 0
	for g := uint64(tag) & t.gmask; ; g = (g + 1) & t.gmask {
		n++
		c := t.words[g*groupWords]
		for m := matchH2(c, h2(tag)); m != 0; m &= m - 1 {
			n++
			if v := t.words[slotIn(g, m)]; uint32(v>>32) == tag && t.ent(uint32(v)-1).addr == addr {
				return n
			}
		}
		if matchEmpty(c) != 0 {
			return -1
		}
	}
}

// BenchmarkBlockTableLoop: an allocation and a free a loop, 64 blocks
// live (the common case: the table in cache).
func BenchmarkBlockTableLoop(b *testing.B) {
	tab := newBlockTable()
	var live [64]uint64
	var got Block
	for i := 0; i < b.N; i++ {
		addr := 0x10000 + uint64(i%1024)*64 + uint64(i/1024%16)*0x100000
		if old := live[i%64]; old != 0 {
			tab.take(old, &got)
		}
		blk := Block{Size: uint64(16 + i%500), Time: uint64(i)}
		tab.put(addr, &blk, &got)
		live[i%64] = addr
	}
}

// BenchmarkBlockTableBig: blocks 112 bytes apart put and never freed, as
// by bench/workloads/bigheap.c (the table out of cache, growing).
func BenchmarkBlockTableBig(b *testing.B) {
	tab := newBlockTable()
	var old Block
	for i := 0; i < b.N; i++ {
		blk := Block{Size: 100, Time: uint64(i)}
		tab.put(0x55a000000000+uint64(i)*112, &blk, &old)
	}
}

// putB and takeB are put and take with blocks by value.
func (t *blockTable) putB(addr uint64, b Block) (old Block, replaced bool) {
	replaced = t.put(addr, &b, &old)
	return old, replaced
}

func (t *blockTable) takeB(addr uint64) (b Block, ok bool) {
	ok = t.take(addr, &b)
	return b, ok
}
