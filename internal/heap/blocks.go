package heap

import "github.com/leakpath/leakpath/internal/event"

// blockTable maps the addresses of live blocks to the blocks. It is an
// open-addressing table with linear probing and backward-shift deletion:
// one short probe sequence per allocation or free, no tombstones, no
// per-entry allocation, and small enough to stay in cache when few blocks
// are live. Millions of operations per second are the norm, so the
// generic map's cost per operation matters.
type blockTable struct {
	slots []blockSlot
	mask  uint64
	n     int // live blocks
}

type blockSlot struct {
	addr uint64 // 0: empty (the allocator never returns 0)
	Block
}

const minBlockSlots = 1 << 10

func newBlockTable() *blockTable {
	return &blockTable{slots: make([]blockSlot, minBlockSlots), mask: minBlockSlots - 1}
}

func hashAddr(a uint64) uint64 {
	a ^= a >> 33
	a *= 0xff51afd7ed558ccd
	a ^= a >> 33
	return a
}

// find returns the slot index of addr, or -1.
func (t *blockTable) find(addr uint64) int {
	for i := hashAddr(addr) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.addr == addr {
			return int(i)
		}
		if s.addr == 0 {
			return -1
		}
	}
}

// get returns the live block at addr.
func (t *blockTable) get(addr uint64) (Block, bool) {
	if i := t.find(addr); i >= 0 {
		return t.slots[i].Block, true
	}
	return Block{}, false
}

// put makes b the live block at addr. It returns the block it replaced,
// if there was one.
func (t *blockTable) put(addr uint64, b Block) (old Block, replaced bool) {
	if (t.n+1)*2 > len(t.slots) {
		t.grow()
	}
	for i := hashAddr(addr) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.addr == addr {
			old = s.Block
			s.Block = b
			return old, true
		}
		if s.addr == 0 {
			s.addr, s.Block = addr, b
			t.n++
			return Block{}, false
		}
	}
}

// take removes the block at addr.
func (t *blockTable) take(addr uint64) (Block, bool) {
	i := t.find(addr)
	if i < 0 {
		return Block{}, false
	}
	b := t.slots[i].Block
	t.remove(i)
	return b, true
}

// remove empties slot i and shifts back the entries after it that would
// otherwise become unreachable.
func (t *blockTable) remove(i int) {
	t.n--
	j := uint64(i)
	for {
		t.slots[j] = blockSlot{}
		k := j
		for {
			k = (k + 1) & t.mask
			if t.slots[k].addr == 0 {
				return
			}
			home := hashAddr(t.slots[k].addr) & t.mask
			// Move k to j if its home is not in (j, k] cyclically.
			if (k > j && (home <= j || home > k)) || (k < j && home <= j && home > k) {
				break
			}
		}
		t.slots[j] = t.slots[k]
		j = k
	}
}

func (t *blockTable) grow() {
	old := t.slots
	t.slots = make([]blockSlot, 2*len(old))
	t.mask = uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.addr == 0 {
			continue
		}
		i := hashAddr(s.addr) & t.mask
		for t.slots[i].addr != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = s
	}
}

// setKind sets the kind of the live block at addr if it has size; it
// reports whether it had.
func (t *blockTable) setKind(addr, size uint64, k event.LeakKind) bool {
	if i := t.find(addr); i >= 0 && t.slots[i].Size == size {
		t.slots[i].Kind = k
		return true
	}
	return false
}

// clearKinds makes every live block unclassified.
func (t *blockTable) clearKinds() {
	for i := range t.slots {
		t.slots[i].Kind = event.Unclassified
	}
}

// each calls fn for every live block.
func (t *blockTable) each(fn func(addr uint64, b Block)) {
	for i := range t.slots {
		if s := &t.slots[i]; s.addr != 0 {
			fn(s.addr, s.Block)
		}
	}
}

// clone copies the table.
func (t *blockTable) clone() *blockTable {
	c := *t
	c.slots = append([]blockSlot(nil), t.slots...)
	return &c
}

// freeLog remembers the most recent frees, for telling a double free from
// a free of an address never allocated. Appending is all a free costs;
// the log is searched only when a free matches no live block, which is
// rare.
type freeLog struct {
	ents []freeEntry // grown up to max as frees come, then a ring
	max  int
	pos  int
	full bool
}

type freeEntry struct {
	addr  uint64
	site  StackID // where the block was allocated
	stack StackID // where it was freed
	fn    event.Fn
}

// freeLogStart is the entries a free log starts with: a short run's
// collector then allocates ~2 MB in all, under the first garbage
// collection's 4 MB (which cost the run ~4 ms on a 2-core machine when the
// log took 1.5 MB at once).
const freeLogStart = 1024

// newFreeLog returns a log of the last max frees.
func newFreeLog(max int) *freeLog {
	return &freeLog{ents: make([]freeEntry, min(max, freeLogStart)), max: max}
}

func (l *freeLog) add(e freeEntry) {
	if l.pos == len(l.ents) {
		if len(l.ents) < l.max { // grows only until full: then len is max
			l.ents = append(l.ents, make([]freeEntry, min(len(l.ents), l.max-len(l.ents)))...)
		} else {
			l.pos, l.full = 0, true
		}
	}
	l.ents[l.pos] = e
	l.pos++
}

// last returns the most recent free of addr still in the log. An address
// freed, allocated again and freed again has its newer free found first;
// an address allocated again and live is never asked about.
func (l *freeLog) last(addr uint64) (freeEntry, bool) {
	for i := l.pos - 1; i >= 0; i-- {
		if l.ents[i].addr == addr {
			return l.ents[i], true
		}
	}
	if l.full {
		for i := len(l.ents) - 1; i >= l.pos; i-- {
			if l.ents[i].addr == addr {
				return l.ents[i], true
			}
		}
	}
	return freeEntry{}, false
}
