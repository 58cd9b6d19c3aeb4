package heap

import (
	"unsafe"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/sys/prefetch"
)

// blockTable maps the addresses of live blocks to the blocks. The blocks
// sit in a dense array of entries, in chunks that never move; an
// open-addressing index (linear probing, backward-shift deletion, load at
// most 1/2) maps an address to its entry in 8 bytes a slot: 32 bits of the
// address's hash and the entry's number. A program keeping millions of
// blocks live then touches one 8-byte slot at random per allocation, not a
// 40-byte one; the entries fill in order, and growing the index copies
// slots, not blocks. The hash bits in the slot skip the entries of other
// addresses and give each slot's home without reading its entry. Freed
// entries are reused last-freed first, so a program freeing what it just
// allocated keeps reusing the same few, in cache. Millions of operations
// per second are the norm, so the cost per operation matters.
//
// An index of 2^32 slots holds 2^31 blocks, ~86 GB of entries: the tables
// of a collector that could hold as many are not expected to grow past it.
type blockTable struct {
	// slots are the index: the low 32 bits of the address's hash (the
	// tag) << 32 | the entry's number + 1; 0 is empty.
	slots []uint64
	mask  uint64 // len(slots) - 1; a slot's home is its tag & mask
	n     int    // live blocks
	ents  [][]blockEnt
	ents0 []blockEnt // ents[0]
	used  uint32     // entries handed out, live or free
	free  []uint32   // the free entries, the last freed last
}

// blockEnt is one entry of a blockTable.
type blockEnt struct {
	addr uint64 // 0: free (the allocator never returns 0)
	Block
}

const (
	minBlockSlots = 1 << 10
	// entChunkBits sets the entries a chunk holds: 4096 of 40 bytes. The
	// first chunk starts at firstEntChunk and grows to that.
	entChunkBits  = 12
	entChunk      = 1 << entChunkBits
	firstEntChunk = 64
)

func newBlockTable() *blockTable {
	return &blockTable{
		slots: make([]uint64, minBlockSlots),
		mask:  minBlockSlots - 1,
	}
}

func hashAddr(a uint64) uint64 {
	a ^= a >> 33
	a *= 0xff51afd7ed558ccd
	a ^= a >> 33
	return a
}

// tagOf is the hash bits a slot keeps of addr: the low half, whose low
// bits are the home. The slots at home h of a table, grown to twice the
// size, go to homes h and h+size: growing reads the old index in order
// and writes the new one in two runs, each in order, instead of at
// random. (Homes from the top bits of the low half would keep one run,
// but made BenchmarkApplyLoop's allocation loop 1.3 ns an event slower;
// from the top bits of the high half, blocks 5056 bytes apart took 8
// probes a lookup.)
func tagOf(addr uint64) uint32 { return uint32(hashAddr(addr)) }

// home is the slot where the probe for the slot value v starts.
func (t *blockTable) home(v uint64) uint64 { return v >> 32 & t.mask }

// ent returns entry i. The first chunk's are found without reading its
// slice from ents: that read would wait for the slot's, and a program
// with few blocks live has all its blocks there.
func (t *blockTable) ent(i uint32) *blockEnt {
	if i < uint32(len(t.ents0)) {
		return &t.ents0[i]
	}
	return &t.ents[i>>entChunkBits][i&(entChunk-1)]
}

// find returns addr's entry, or nil.
func (t *blockTable) find(addr uint64) *blockEnt {
	tag := tagOf(addr)
	for i := uint64(tag) & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return nil
		}
		if uint32(v>>32) == tag {
			if e := t.ent(uint32(v) - 1); e.addr == addr {
				return e
			}
		}
	}
}

// get returns the live block at addr.
func (t *blockTable) get(addr uint64) (Block, bool) {
	if e := t.find(addr); e != nil {
		return e.Block, true
	}
	return Block{}, false
}

// put makes *b the live block at addr. If addr had a live block, put
// copies it to *old and reports true. (Blocks go by pointer here and in
// take: as values, every call moved 40 bytes in and out through registers
// and the stack.)
func (t *blockTable) put(addr uint64, b, old *Block) (replaced bool) {
	e, replaced := t.insert(addr)
	if replaced {
		*old = e.Block
	}
	e.set(b)
	return replaced
}

// insert returns the entry of addr for the caller to fill: addr's live
// block's, reporting true, or a new one with its address set and the
// rest left as a freed block had it. The entry stays where it is until
// the next insert. The fast path fills it from the event, a field at a
// time: a Block built first and copied in moved 32 bytes through the
// stack an allocation.
func (t *blockTable) insert(addr uint64) (e *blockEnt, found bool) {
	if (t.n+1)*2 > len(t.slots) {
		t.grow()
	}
	// The probe of find, inline, as in take: no call on the way.
	tag := tagOf(addr)
	i := uint64(tag) & t.mask
	for ; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			break
		}
		if uint32(v>>32) == tag {
			if e := t.ent(uint32(v) - 1); e.addr == addr {
				return e, true
			}
		}
	}
	var n uint32 // the entry
	if k := len(t.free) - 1; k >= 0 {
		n = t.free[k]
		t.free = t.free[:k]
	} else {
		n = t.newEnt()
	}
	e = t.ent(n)
	e.addr = addr
	t.slots[i] = uint64(tag)<<32 | uint64(n+1)
	t.n++
	return e, false
}

// set stores b in e a field at a time, in statements of their own. The
// Block came in registers and was written to the stack a field at a
// time; copied whole, or two fields at once (as a tuple assignment
// compiles), it is read back in wider loads that wait for those writes
// to land, a store-forwarding stall (BenchmarkBlockTableLoop: 15.3 ns an
// allocation and free with the Block copied whole, 12.6 with set).
func (e *blockEnt) set(b *Block) {
	e.Size = b.Size
	e.Time = b.Time
	e.Site = b.Site
	e.Thread = b.Thread
	e.Fn = b.Fn
	e.Kind = b.Kind
	e.Late = b.Late
}

// newEnt adds an entry after the last and returns its number.
func (t *blockTable) newEnt() uint32 {
	last := len(t.ents) - 1
	if last < 0 || len(t.ents[last]) == entChunk {
		c := entChunk
		if last < 0 {
			c = firstEntChunk
		}
		t.ents = append(t.ents, make([]blockEnt, 0, c))
		last++
	}
	if c := t.ents[last]; len(c) == cap(c) { // the first chunk, growing
		t.ents[last] = append(make([]blockEnt, 0, min(2*cap(c), entChunk)), c...)
	}
	t.ents[last] = t.ents[last][:len(t.ents[last])+1]
	t.ents0 = t.ents[0]
	t.used++
	return t.used - 1
}

// take removes the block at addr, copying it to *b, and reports whether
// there was one.
func (t *blockTable) take(addr uint64, b *Block) bool {
	e := t.remove(addr)
	if e == nil {
		return false
	}
	*b = e.Block
	return true
}

// remove removes the block at addr and returns its entry, nil if none:
// freed, but its Block as it was until the next insert (the fast path
// reads the fields it needs there, not a copy). It empties the block's
// slot and shifts back the slots after it that would otherwise become
// unreachable. (One function: with the shift a call of its own,
// BenchmarkBlockTableLoop took 14.2 ns an allocation and free, inline
// 12.6.)
func (t *blockTable) remove(addr uint64) *blockEnt {
	tag := tagOf(addr)
	slots, mask := t.slots, t.mask
	i := uint64(tag) & mask
	var e *blockEnt
	for ; ; i = (i + 1) & mask {
		v := slots[i]
		if v == 0 {
			return nil
		}
		if uint32(v>>32) == tag {
			if e = t.ent(uint32(v) - 1); e.addr == addr {
				e.addr = 0
				t.free = append(t.free, uint32(v)-1)
				break
			}
		}
	}
	t.n--
	for j := i; ; {
		slots[j] = 0
		k := j
		for {
			k = (k + 1) & mask
			v := slots[k]
			if v == 0 {
				return e
			}
			home := t.home(v)
			// Move k to j if its home is not in (j, k] cyclically.
			if (k > j && (home <= j || home > k)) || (k < j && home <= j && home > k) {
				break
			}
		}
		slots[j] = slots[k]
		j = k
	}
}

// prefetchSlot asks for the line of the slot where a probe for addr
// starts, and for the next line when that slot is one of its line's last
// two: a take reads the slots after the one it empties, to the end of the
// run (the C++ map's report: 240-264 -> 228-243 ms).
func (t *blockTable) prefetchSlot(addr uint64) {
	i := uint64(tagOf(addr)) & t.mask
	prefetch.Line(unsafe.Pointer(&t.slots[i]))
	if i&7 >= 6 {
		prefetch.Line(unsafe.Pointer(&t.slots[(i+2)&t.mask]))
	}
}

// prefetchEnt asks for the entry of the first slot of addr's probe that
// holds its tag (a freed block's, nearly always): with 600,000 blocks
// in 2M slots, one in seven is past its home slot.
// It reads the slots: ask for their line first.
func (t *blockTable) prefetchEnt(addr uint64) {
	tag := tagOf(addr)
	for i := uint64(tag) & t.mask; ; i = (i + 1) & t.mask {
		v := t.slots[i]
		if v == 0 {
			return
		}
		if uint32(v>>32) == tag {
			// Half the entries (40 bytes) straddle two lines.
			e := unsafe.Pointer(t.ent(uint32(v) - 1))
			prefetch.Line(e)
			prefetch.Line(unsafe.Add(e, unsafe.Sizeof(blockEnt{})-1))
			return
		}
	}
}

// grow doubles the index. It reads the old slots in order and writes
// the new ones in two runs, each nearly in order (see tagOf): no entry is
// read, and few cache lines are missed at random.
func (t *blockTable) grow() {
	old := t.slots
	t.slots = make([]uint64, 2*len(old))
	// A large slice is fresh memory from the kernel. Its pages are
	// written once here, before the probes below read them: a page read
	// first maps the shared zero page, and the write after it faults
	// again and flushes the TLB of every core (bigheap: 10 % of the
	// collector's CPU in do_wp_page).
	for i := 0; i < len(t.slots); i += 512 { // 4 KiB
		t.slots[i] = 0
	}
	t.mask = uint64(len(t.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := t.home(v)
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = v
	}
}

// setKind sets the kind of the live block at addr if it has size; it
// reports whether it had.
func (t *blockTable) setKind(addr, size uint64, k event.LeakKind) bool {
	if e := t.find(addr); e != nil && e.Size == size {
		e.Kind = k
		return true
	}
	return false
}

// clearKinds makes every live block unclassified.
func (t *blockTable) clearKinds() {
	for _, c := range t.ents {
		for i := range c {
			c[i].Kind = event.Unclassified
		}
	}
}

// each calls fn for every live block.
func (t *blockTable) each(fn func(addr uint64, b Block)) {
	for _, c := range t.ents {
		for i := range c {
			if e := &c[i]; e.addr != 0 {
				fn(e.addr, e.Block)
			}
		}
	}
}

// clone copies the table.
func (t *blockTable) clone() *blockTable {
	c := *t
	c.slots = append([]uint64(nil), t.slots...)
	c.free = append([]uint32(nil), t.free...)
	c.ents = make([][]blockEnt, len(t.ents))
	for i, ch := range t.ents {
		c.ents[i] = append(make([]blockEnt, 0, cap(ch)), ch...)
	}
	if len(c.ents) > 0 {
		c.ents0 = c.ents[0]
	}
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
	afn   event.Fn // the function that allocated it
	site1 bool     // stack is the free's call site alone (a folded pair's)
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

func (l *freeLog) add(e freeEntry) { *l.next() = e }

// next returns the entry the next free goes in, for the caller to fill
// a field at a time (see blockEnt.set): the fast path's frees.
func (l *freeLog) next() *freeEntry {
	if l.pos == len(l.ents) {
		if len(l.ents) < l.max { // grows only until full: then len is max
			l.ents = append(l.ents, make([]freeEntry, min(len(l.ents), l.max-len(l.ents)))...)
		} else {
			l.pos, l.full = 0, true
		}
	}
	l.pos++
	return &l.ents[l.pos-1]
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
