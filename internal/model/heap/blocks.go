package heap

import (
	"math/bits"
	"unsafe"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/sys/prefetch"
)

// blockTable maps the addresses of live blocks to the blocks. The blocks
// sit in a dense array of entries, in chunks that never move; an
// open-addressing index maps an address to its entry in 8 bytes a slot:
// 32 bits of the address's hash and the entry's number. A program keeping
// millions of blocks live then touches one index line at random per
// allocation, not a 40-byte entry; the entries fill in order, and growing
// the index copies slots, not blocks. The hash bits in the slot skip the
// entries of other addresses and give each slot's group without reading
// its entry. Freed entries are reused last-freed first, so a program
// freeing what it just allocated keeps reusing the same few, in cache.
// Millions of operations per second are the norm, so the cost per
// operation matters.
//
// The index is probed a group of slots at a time, a group a cache line:
// a control word, a byte a slot (7 more bits of the hash of the address
// there, or empty or deleted), then 7 slots; at most 4 a group are taken
// on average (see full). One word operation finds the slots of a group that may hold an
// address, or its empty ones, as in the "Swiss tables" of Abseil and of
// Go's maps. A lookup then takes the same branches whatever the
// addresses: probing a slot at a time, as this table did, met runs of
// every length at loads of 1/4 to 1/2 and mispredicted a branch or two a
// lookup, most of its cost when the index is in cache (BenchmarkSinkStages
// on a trace of bench/workloads/longlived.c: 34 -> 30 ns an event).
//
// An index of 2^32 words holds 2^31 blocks, ~86 GB of entries: the tables
// of a collector that could hold as many are not expected to grow past it.
type blockTable struct {
	// words are the index, 8 a group: the control word, its byte i
	// ctrlEmpty, ctrlDeleted, or the h2 of the address in slot i (its
	// last byte ctrlDeleted, for no slot); then the slots, each the low
	// 32 bits of the address's hash (the tag) << 32 | the entry's number
	// + 1, or 0 when its control byte is not full.
	words []uint64
	gmask uint64 // len(words)/8 - 1; a slot's group is its tag & gmask
	n     int    // live blocks
	dead  int    // slots deleted
	ents  [][]blockEnt
	ents0 []blockEnt // ents[0]
	used  uint32     // entries handed out, live or free
	free  []uint32   // the free entries, the last freed last
}

// Control bytes: a full slot's is the h2 of its address (below 0x80). A
// slot freed in a group with no empty one becomes ctrlDeleted: a probe
// for another address may have gone past the group when it was full, and
// must still go past. Deleted slots are taken again by inserts, and
// dropped when the index is rebuilt.
const (
	ctrlEmpty   = 0x80
	ctrlDeleted = 0xfe
	ctrlLSB     = 0x0101010101010101
	ctrlMSB     = 0x0080808080808080 // of the 7 slots' bytes
	// ctrlNew is a new group's control word: every slot empty.
	ctrlNew     = ctrlDeleted<<56 | ctrlEmpty*(ctrlLSB>>8)
	groupWords  = 8
	groupSlots  = groupWords - 1
	minBlockGrp = 1 << 7 // groups of a new index: 8 KB
)

// h2 is the hash bits a control byte keeps of tag: its top 7, apart from
// the bits that pick the group until the index has 2^25 groups.
func h2(tag uint32) uint64 { return uint64(tag >> 25) }

// matchH2 returns the bytes of control word c that may be h2: the top bit
// of each set. It may set a byte's above one that is h2, never miss one
// (the slot's tag is checked next anyway).
func matchH2(c, h2 uint64) uint64 {
	x := c ^ h2*ctrlLSB
	return (x - ctrlLSB) &^ x & ctrlMSB
}

// matchEmpty returns the empty bytes of c: the top bit set and, unlike
// ctrlDeleted, the second lowest clear.
func matchEmpty(c uint64) uint64 { return c &^ (c << 6) & ctrlMSB }

// matchFree returns the empty or deleted bytes of c.
func matchFree(c uint64) uint64 { return c & ctrlMSB }

// slotIn returns the word of group g's slot that match m's lowest byte
// is.
func slotIn(g, m uint64) uint64 { return g*groupWords + 1 + uint64(bits.TrailingZeros64(m))>>3 }

// full reports whether the index is too full to take another slot: taken
// or deleted slots may be half its words, 4 of a group's 7 slots, as many
// a word as a slot at a time would take at its load of at most 1/2.
func (t *blockTable) full() bool { return (t.n+t.dead+1)*2 > len(t.words) }

// blockEnt is one entry of a blockTable.
type blockEnt struct {
	addr uint64 // 0: free (the allocator never returns 0)
	Block
}

const (
	// entChunkBits sets the entries a chunk holds: 4096 of 40 bytes. The
	// first chunk starts at firstEntChunk and grows to that.
	entChunkBits  = 12
	entChunk      = 1 << entChunkBits
	firstEntChunk = 64
)

func newBlockTable() *blockTable {
	t := &blockTable{}
	t.resize(minBlockGrp)
	return t
}

func hashAddr(a uint64) uint64 {
	a ^= a >> 33
	a *= 0xff51afd7ed558ccd
	a ^= a >> 33
	return a
}

// tagOf is the hash bits a slot keeps of addr: the low half, whose low
// bits are the group. The slots of group g of an index, grown to twice
// the size, go to groups g and g+size: growing reads the old index in
// order and writes the new one in two runs, each in order, instead of at
// random. (Homes from the top bits of the low half would keep one run,
// but made BenchmarkApplyLoop's allocation loop 1.3 ns an event slower;
// from the top bits of the high half, blocks 5056 bytes apart took 8
// probes a lookup.)
func tagOf(addr uint64) uint32 { return uint32(hashAddr(addr)) }

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
	if i, ok := t.lookup(addr); ok {
		return t.ent(uint32(t.words[i]) - 1)
	}
	return nil
}

// lookup returns the word of addr's slot, if it has one.
func (t *blockTable) lookup(addr uint64) (uint64, bool) {
	tag := tagOf(addr)
	h := h2(tag)
	for g := uint64(tag) & t.gmask; ; g = (g + 1) & t.gmask {
		c := t.words[g*groupWords]
		for m := matchH2(c, h); m != 0; m &= m - 1 {
			i := slotIn(g, m)
			if v := t.words[i]; uint32(v>>32) == tag && t.ent(uint32(v)-1).addr == addr {
				return i, true
			}
		}
		if matchEmpty(c) != 0 {
			return 0, false
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
	if t.full() {
		t.rebuild()
	}
	// The probe of lookup, inline: no call on the way. It notes the
	// first slot free on the way, for a new block.
	tag := tagOf(addr)
	h := h2(tag)
	at := ^uint64(0)
	for g := uint64(tag) & t.gmask; ; g = (g + 1) & t.gmask {
		c := t.words[g*groupWords]
		for m := matchH2(c, h); m != 0; m &= m - 1 {
			i := slotIn(g, m)
			if v := t.words[i]; uint32(v>>32) == tag {
				if e := t.ent(uint32(v) - 1); e.addr == addr {
					return e, true
				}
			}
		}
		if m := matchFree(c); m != 0 && at == ^uint64(0) {
			at = slotIn(g, m)
		}
		if matchEmpty(c) != 0 {
			break
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
	if t.setCtrl(at, h) == ctrlDeleted {
		t.dead--
	}
	t.words[at] = uint64(tag)<<32 | uint64(n+1)
	t.n++
	return e, false
}

// setCtrl sets the control byte of the slot at word i to b and returns
// what it was.
func (t *blockTable) setCtrl(i, b uint64) uint64 {
	c := &t.words[i&^(groupWords-1)]
	shift := (i%groupWords - 1) * 8
	was := *c >> shift & 0xff
	*c = *c&^(0xff<<shift) | b<<shift
	return was
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
// reads the fields it needs there, not a copy). The slot becomes empty
// if its group has an empty one (no probe went past the group), else
// deleted.
func (t *blockTable) remove(addr uint64) *blockEnt {
	// The probe of lookup, inline.
	tag := tagOf(addr)
	h := h2(tag)
	for g := uint64(tag) & t.gmask; ; g = (g + 1) & t.gmask {
		c := t.words[g*groupWords]
		for m := matchH2(c, h); m != 0; m &= m - 1 {
			i := slotIn(g, m)
			v := t.words[i]
			if uint32(v>>32) != tag {
				continue
			}
			e := t.ent(uint32(v) - 1)
			if e.addr != addr {
				continue
			}
			e.addr = 0
			t.free = append(t.free, uint32(v)-1)
			t.n--
			t.words[i] = 0
			if matchEmpty(c) != 0 {
				t.setCtrl(i, ctrlEmpty)
			} else {
				t.setCtrl(i, ctrlDeleted)
				t.dead++
			}
			return e
		}
		if matchEmpty(c) != 0 {
			return nil
		}
	}
}

// prefetchSlot asks for the line of the group where a probe for addr
// starts.
func (t *blockTable) prefetchSlot(addr uint64) {
	g := uint64(tagOf(addr)) & t.gmask
	prefetch.Line(unsafe.Pointer(&t.words[g*groupWords]))
}

// prefetchEnt asks for the entry of the first slot of addr's probe that
// may hold it (a freed block's, nearly always). It reads the index: ask
// for its line first.
func (t *blockTable) prefetchEnt(addr uint64) {
	tag := tagOf(addr)
	h := h2(tag)
	for g := uint64(tag) & t.gmask; ; g = (g + 1) & t.gmask {
		c := t.words[g*groupWords]
		for m := matchH2(c, h); m != 0; m &= m - 1 {
			if v := t.words[slotIn(g, m)]; uint32(v>>32) == tag {
				// Half the entries (40 bytes) straddle two lines.
				e := unsafe.Pointer(t.ent(uint32(v) - 1))
				prefetch.Line(e)
				prefetch.Line(unsafe.Add(e, unsafe.Sizeof(blockEnt{})-1))
				return
			}
		}
		if matchEmpty(c) != 0 {
			return
		}
	}
}

// rebuild makes a new index: twice the size when its live slots are more
// than 3/4 of what it may hold, else of the same size, without its deleted slots (a
// program that frees much from full groups). It reads the old index in
// order and writes the new one in two runs, each nearly in order (see
// tagOf): no entry is read, and few cache lines are missed at random.
func (t *blockTable) rebuild() {
	groups := len(t.words) / groupWords
	if (t.n+1)*8 > 3*len(t.words) {
		groups *= 2
	}
	old := t.words
	t.resize(groups)
	for g := 0; g < len(old); g += groupWords {
		c := old[g]
		for m := ^c & ctrlMSB; m != 0; m &= m - 1 { // the full slots
			v := old[g+1+bits.TrailingZeros64(m)>>3]
			tag := uint32(v >> 32)
			h := uint64(tag) & t.gmask
			for matchEmpty(t.words[h*groupWords]) == 0 {
				h = (h + 1) & t.gmask
			}
			j := slotIn(h, matchEmpty(t.words[h*groupWords]))
			t.setCtrl(j, h2(tag))
			t.words[j] = v
		}
	}
}

// resize makes the index empty, of groups groups.
func (t *blockTable) resize(groups int) {
	// A large slice is fresh memory from the kernel. Writing every
	// group's control word writes its pages before the probes read them:
	// a page read first maps the shared zero page, and the write after it
	// faults again and flushes the TLB of every core (bigheap: 10 % of the
	// collector's CPU in do_wp_page).
	t.words = make([]uint64, groups*groupWords)
	for g := 0; g < len(t.words); g += groupWords {
		t.words[g] = ctrlNew
	}
	t.gmask = uint64(groups - 1)
	t.dead = 0
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
	c.words = append([]uint64(nil), t.words...)
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
// rare. Its entries are 16 bytes and the functions 2 more, apart: in one
// array of 24-byte entries, the log of a program that frees millions of
// blocks took 1.5 MB of a 2 MB cache, where the live blocks' entries and
// index are wanted.
type freeLog struct {
	ents []freeSlot // grown up to max as frees come, then a ring
	fns  []freeFn   // ents[i]'s
	max  int
	pos  int
	full bool
}

// freeEntry is one free of the log.
type freeEntry struct {
	addr  uint64
	site  StackID  // where the block was allocated
	stack StackID  // where it was freed
	afn   event.Fn // the function that allocated it
	site1 bool     // stack is the free's call site alone (a folded pair's)
}

// freeSlot and freeFn are a freeEntry as the log keeps it.
type freeSlot struct {
	addr  uint64
	site  StackID
	stack StackID
}

type freeFn struct {
	afn   event.Fn
	site1 bool
}

// freeLogStart is the entries a free log starts with: a short run's
// collector then allocates ~2 MB in all, under the first garbage
// collection's 4 MB (which cost the run ~4 ms on a 2-core machine when the
// log took 1.5 MB at once).
const freeLogStart = 1024

// newFreeLog returns a log of the last max frees.
func newFreeLog(max int) *freeLog {
	n := min(max, freeLogStart)
	return &freeLog{ents: make([]freeSlot, n), fns: make([]freeFn, n), max: max}
}

func (l *freeLog) add(e freeEntry) {
	s, f := l.next()
	*s = freeSlot{addr: e.addr, site: e.site, stack: e.stack}
	*f = freeFn{afn: e.afn, site1: e.site1}
}

// next returns the entry the next free goes in, for the caller to fill
// a field at a time (see blockEnt.set): the fast path's frees.
func (l *freeLog) next() (*freeSlot, *freeFn) {
	if l.pos == len(l.ents) {
		if len(l.ents) < l.max { // grows only until full: then len is max
			n := min(len(l.ents), l.max-len(l.ents))
			l.ents = append(l.ents, make([]freeSlot, n)...)
			l.fns = append(l.fns, make([]freeFn, n)...)
		} else {
			l.pos, l.full = 0, true
		}
	}
	l.pos++
	return &l.ents[l.pos-1], &l.fns[l.pos-1]
}

// last returns the most recent free of addr still in the log. An address
// freed, allocated again and freed again has its newer free found first;
// an address allocated again and live is never asked about.
func (l *freeLog) last(addr uint64) (freeEntry, bool) {
	for i := l.pos - 1; i >= 0; i-- {
		if l.ents[i].addr == addr {
			return l.entry(i), true
		}
	}
	if l.full {
		for i := len(l.ents) - 1; i >= l.pos; i-- {
			if l.ents[i].addr == addr {
				return l.entry(i), true
			}
		}
	}
	return freeEntry{}, false
}

func (l *freeLog) entry(i int) freeEntry {
	s, f := &l.ents[i], &l.fns[i]
	return freeEntry{addr: s.addr, site: s.site, stack: s.stack, afn: f.afn, site1: f.site1}
}
