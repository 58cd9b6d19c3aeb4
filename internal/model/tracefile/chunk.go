package tracefile

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/leakpath/leakpath/internal/model/event"
)

// A chunk's payload (what its zstd frame decompresses to) is a set of
// byte streams, each holding one kind of value, so that zstd sees
// homogeneous data:
//
//	flags byte (bit 0: timeEMA; the others are 0)
//	uvarint len(stream 0) ... uvarint len(stream numStreams-2)
//	stream 0 | stream 1 | ... | stream numStreams-1 (the rest)
const (
	sOps    = iota // op bytes: one per event, plus pseudo-ops
	sTime          // time residuals
	sAddr          // addresses: deltas, back-references
	sSize          // sizes: the low byte
	sSizeHi        // sizes: uvarint of the rest (size >> 8)
	sStack         // stack ids
	sFn            // Fn bytes that were not predicted
	sFrames        // frame counts and frame deltas
	sMisc          // everything else
	numStreams
)

var streamNames = [numStreams]string{"ops", "time", "addr", "size", "sizehi", "stack", "fn", "frames", "misc"}

// Op bytes: the low 5 bits are the code, the high 3 bits flags. Codes 1-5
// are the compact encodings of the event kinds of the same value, code 6
// that of scope markers.
const (
	opScope = 0x06 // a ScopeBegin or ScopeEnd (format version 5): see encoder.addScope
	opAgg   = 0x07 // an Agg (format version 7): see encoder.addAgg
	// Codes 0x08-0x1b (format version 10) are an Alloc or a Free whose
	// code also says whether its time is the previous event's (hotTime:
	// nothing in the time stream) and its stack the predicted one
	// (hotStack: nothing in the stack stream); an Alloc's bits 2-3 say
	// whether it is late and how.
	opAllocHot  = 0x08 // codes 0x08-0x17: see encoder.addAllocHot
	opFreeHot   = 0x18 // codes 0x18-0x1b: see encoder.addFree
	opLateAlloc = 0x1c // an Alloc with Addr2 (its own time, earlier): coded as an Alloc, then time: uvarint Time-Addr2 (both >> shift)
	opSetProc   = 0x1d // misc: uvarint Proc
	opSetThread = 0x1e // flags 1-7: thread at that MRU position; 0: misc zigzag delta
	opGeneric   = 0x1f // ops: kind byte; misc: uvarint field mask; fields
	codeMask    = 0x1f
	f0          = 0x20
	f1          = 0x40
	f2          = 0x80
)

// The bits of the hot codes (format version 10), and an Alloc's late
// states: its own time is that of the event (lateSame) or one tick
// before (latePrev), else in the time stream (lateCoded).
const (
	hotTime   = 1
	hotStack  = 2
	lateShift = 2
	lateNone  = 0
	lateSame  = 1
	latePrev  = 2
	lateCoded = 3
)

// Payload flags.
const (
	// timeEMA: the time stream holds residuals from an exponential
	// average of the deltas, not the deltas themselves. Plain deltas win
	// when the deltas repeat exactly (loops, coarse clocks: zstd finds
	// the repeats), residuals when they jitter at random.
	timeEMA    = 1
	flagsKnown = timeEMA
	emaShift   = 3
)

// Fields of a generic event, as bits of its mask.
const (
	gFn = 1 << iota
	gStack
	gTime
	gAddr
	gAddr2
	gSize
	gAux
	gFrames
	gModule
	gText
	gProcess
	gClock
	gScan      // since format version 2; with flags since 3
	gRootCause // since format version 4
	gStale     // since format version 6
	gAll       = 1<<iota - 1
)

// Sizes of the prediction tables. The tables of the encoder are direct
// mapped caches (a collision loses a prediction, never correctness); the
// decoder keeps rings of the last allocWindow allocated and freeWindow
// freed addresses of the chunk.
const (
	allocWindow = 1 << 16
	freeWindow  = 1 << 12
	addrTab     = 1 << 14
	freeTab     = 1 << 12
	stackTab    = 1 << 14
	numThreads  = 8
)

// The entries of the address tables are kept to 16 bytes: they are hit at
// random for every event, and their cache misses are most of the cost.
// (A program's stacks are fewer: their entries stay in the cache.)
type stackEntry struct {
	size uint64
	id   uint32
	// nextAlloc and nextFree: the stack of the Alloc (Free) that came
	// after the latest Alloc (Free) of this stack (format version 10):
	// call sites follow each other in the same order loop after loop.
	nextAlloc, nextFree uint32
	epoch               uint16
	fn                  event.Fn
}

// addrSlot is the encoder's record of an address: its latest allocation
// and its latest free, in one entry, so that an event reads and writes a
// single line of the table (the allocation a free releases and the free
// an allocation reuses are those of the same address). A sequence number
// is valid if it is at least the chunk's first (0 never is).
type addrSlot struct {
	// key: the address (below 1<<48: others are not kept) | the class of
	// its allocation's size << 48.
	key uint64
	// seqs: the allocation's sequence number (below 1<<30) | freeFns
	// index of its Fn's free << 30 | the free's sequence number << 32.
	seqs uint64
}

type freeEntry struct {
	addr uint64
	seq  uint32
}

const (
	slotAddr  = 1<<48 - 1
	slotSeq   = 1<<30 - 1
	slotFnBit = 30
	// seqRestart: the sequence numbers start over at a chunk's start once
	// beyond it; a chunk (at most maxChunkSize bytes, at least a byte an
	// event) cannot take them past slotSeq.
	seqRestart = 1 << 29
)

// freeFns are the Fns that normally free memory, by their index in an
// addrSlot (freeFnIndex of the allocating Fn: 0-2; the fourth entry lets
// an index masked to 2 bits go unchecked).
var freeFns = [4]event.Fn{event.FreeFn, event.Delete, event.DeleteArray, event.FreeFn}

// freeFnIndex is the index in freeFns of the Fn that normally frees
// memory allocated by f.
func freeFnIndex(f event.Fn) uint64 {
	switch f {
	case event.New:
		return 1
	case event.NewArray:
		return 2
	}
	return 0
}

// encClass is the encoder's copy of a classEntry: instead of the addresses
// it holds the sequence numbers of the frees that pushed them (unique: a
// number names one free of one address), and an address is on top if the
// top one is the free its entry knows of. (Two-thirds the size: a class is
// looked up for nearly every event.)
type encClass struct {
	key    uint64
	n, top uint16
	frees  [classDepth]uint32
}

type ringEntry struct {
	addr uint64
	cls  uint16
	fn   event.Fn
}

// classEntry is a LIFO of the addresses of blocks of one size class
// freed by one thread: what a malloc of that class in that thread (with
// glibc's tcache and fastbins) most likely returns next.
type classEntry struct {
	key   uint64 // classKey: the class, the thread and the model's epoch
	n     uint16 // addresses held
	top   uint16 // index of the latest in addrs, a ring
	addrs [classDepth]uint64
}

// pop removes and returns the latest address; c.n must be > 0.
func (c *classEntry) pop() uint64 {
	a := c.addrs[c.top%classDepth]
	c.top--
	c.n--
	return a
}

const (
	classTab   = 1 << 11
	classDepth = 4
)

// classOf is the size class of a block of size bytes (glibc's chunk size
// / 16), or 0 for none.
func classOf(size uint64) uint16 {
	if size >= 1<<20-32 {
		return 0
	}
	return uint16(max(32, (size+23)&^15) >> 4)
}

func (m *model) classKey(cls uint16, t int32) uint64 {
	return uint64(cls) | uint64(uint32(t))<<16 | uint64(m.epoch)<<48
}

// classHash is where the entry of key k is: the epoch (bits 48-63) does
// not change it.
func classHash(k uint64) uint64 { return (k ^ (k>>16)*0x9e37) & (classTab - 1) }

func addrHash(a uint64) uint64 { return a>>4 ^ a>>19 }

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// freeFnFor is the Fn that normally frees memory allocated by f: the
// encoder's and the decoder's prediction must be one mapping.
func freeFnFor(f event.Fn) event.Fn { return freeFns[freeFnIndex(f)] }

// model is the state that encoder and decoder share; it is reset at each
// chunk start.
type model struct {
	proc     uint32
	threads  [numThreads]int32 // MRU list; threads[0] is the current thread
	prevTime uint64
	pred     int64 // exponential average of the time deltas
	timeMode byte  // timeEMA or 0: how the time stream is coded
	shift    uint8 // times are stored >> shift (Options.TimeShift)
	// threadState: the current thread's predictions.
	threadState
	prevFrame uint64 // first frame of the previous stack
	lastStack uint32 // id of the previous StackDef
	// perThread: each thread has its own prevAddr, bump, stack chains,
	// freeFn and lastFreed (format version 11): the merged events of
	// threads running at once alternate every few events, and each broke
	// the others' predictions. own[slots[i]] holds those of threads[i]
	// (i > 0): a switch moves a byte a thread, not a state.
	perThread bool
	slots     [numThreads]uint8
	own       [numThreads]threadState
	epoch     uint16
	// The tables are arrays, so that an index masked to their size needs
	// no bounds check.
	stacks *[stackTab]stackEntry
	names  []string // the scope names of the chunk, in the order first coded
}

// threadState is what the model predicts from one thread's own events.
type threadState struct {
	prevAddr uint64
	// bump: where the allocator would put the next block if it carved it
	// right after the previous allocation (glibc's top chunk): what an
	// allocation's address delta is from (format version 6).
	bump uint64
	// lastFreed names the allocation the chunk's last back-referenced
	// free released (0: none yet; see freedCode): the encoder's sequence
	// number, the decoder's 1 + index in the chunk.
	lastFreed uint64
	// The stacks of the previous Alloc and Free, and those predicted for
	// the next (format version 10): see chainAlloc, chainFree.
	prevAlloc, allocNext uint32
	prevFree, freeNext   uint32
	freeFn               event.Fn
}

// newThreadState is a thread's state when it first appears in a chunk.
var newThreadState = threadState{freeFn: event.FreeFn}

// toFront moves thread t, at MRU position i (numThreads: not in the list;
// the last one drops out), to the front; with perThread, its state
// becomes the current one.
func (m *model) toFront(i int, t int32) {
	was := m.slots[0]
	if i >= numThreads {
		i = numThreads - 1
		m.own[m.slots[i]] = newThreadState
	}
	now := m.slots[i]
	// (The lists are moved by hand: copy calls memmove, for a few bytes.)
	for j := i; j > 0; j-- {
		m.threads[j], m.slots[j] = m.threads[j-1], m.slots[j-1]
	}
	m.threads[0], m.slots[0] = t, now
	if !m.perThread {
		return
	}
	// Field by field, as the events store them: a state gathered first
	// and stored whole loads wider than those stores, and waits for
	// them to retire.
	w := &m.own[was]
	w.prevAddr, w.bump, w.lastFreed = m.prevAddr, m.bump, m.lastFreed
	w.prevAlloc, w.allocNext = m.prevAlloc, m.allocNext
	w.prevFree, w.freeNext, w.freeFn = m.prevFree, m.freeNext, m.freeFn
	next := &m.own[now]
	m.prevAddr, m.bump, m.lastFreed = next.prevAddr, next.bump, next.lastFreed
	m.prevAlloc, m.allocNext = next.prevAlloc, next.allocNext
	m.prevFree, m.freeNext, m.freeFn = next.prevFree, next.freeNext, next.freeFn
}

// maxChunkNames bounds the scope names a chunk's table holds; later ones
// are coded in full each time.
const maxChunkNames = 1024

// classPush records that thread t freed addr, a block of class cls, not
// 0 (blocks of no class are not kept). (Small enough to inline.)
func (d *decoder) classPush(addr uint64, cls uint16, t int32) {
	k := d.classKey(cls, t)
	c := &d.classes[classHash(k)]
	if c.key != k {
		c.key, c.n = k, 0
	}
	c.top++
	c.addrs[c.top%classDepth] = addr
	c.n = min(c.n+1, classDepth)
}

// classTop returns the class list for an allocation of size bytes by
// thread t, or nil if it is empty.
func (d *decoder) classTop(cls uint16, t int32) *classEntry {
	if cls == 0 {
		return nil
	}
	k := d.classKey(cls, t)
	c := &d.classes[classHash(k)]
	if c.key != k || c.n == 0 {
		return nil
	}
	return c
}

// reset starts a chunk, and says whether the epochs wrapped: the tables
// keyed by the epoch (the stacks', the classes') hold entries that could
// look current, and are cleared.
func (m *model) reset() (wrapped bool) {
	m.proc = 0
	m.threads = [numThreads]int32{}
	m.prevTime, m.pred, m.prevFrame, m.lastStack = 0, 0, 0, 0
	m.threadState = newThreadState
	m.slots = [numThreads]uint8{0, 1, 2, 3, 4, 5, 6, 7}
	for i := range m.own {
		m.own[i] = newThreadState
	}
	clear(m.names)
	m.names = m.names[:0]
	if m.stacks == nil {
		m.stacks = new([stackTab]stackEntry)
	}
	m.epoch++
	if m.epoch == 0 {
		clear(m.stacks[:])
		m.epoch = 1
		return true
	}
	return false
}

// coarse is t as times are stored: t >> shift. (shift is at most
// maxTimeShift: the mask spares the code for shifts of 64 and more.)
func (m *model) coarse(t uint64) uint64 { return t >> (m.shift & 63) }

// timeFrom decodes a time delta or residual.
func (m *model) timeFrom(u uint64) uint64 {
	d := unzigzag(u)
	if m.timeMode == timeEMA {
		d += m.pred
	}
	m.prevTime += uint64(d)
	m.pred += (d - m.pred) >> emaShift
	return m.prevTime << m.shift
}

// encoder appends the events of one chunk to its streams.
type encoder struct {
	model
	s       [numStreams][]byte
	alt     []byte // with dual, the time stream coded the other way
	dual    bool   // code times both ways, so the writer can compare them
	n       int    // events in the chunk
	big     bool   // an event other than Alloc, Free, ReallocBegin, Realloc was added
	addrs   *[addrTab]addrSlot
	free    *[freeTab]freeEntry // the frees whose address's entry held another's allocation
	classes *[classTab]encClass // the decoder's classes, for the encoder
	// nameIdx: the index of each name in model.names.
	nameIdx map[string]int
	callers callerTrie
	// defFrames holds copies of the frames of the chunk's stack
	// definitions, back to back (the caller may reuse an event's slices
	// once Write returns); defEnd[i] is where the i-th one ends.
	defFrames []uint64
	defEnd    []int
	// Sequence numbers of allocations and frees since the encoder was
	// made, and of the first ones in this chunk.
	allocSeq, allocStart uint32
	freeSeq, freeStart   uint32
	// before7 codes as format versions before 7 did: frees only as
	// distances back, aggregates the generic way.
	before7 bool
	// before8 codes stack ids plain, not from the latest StackDef's.
	before8 bool
	// before10 codes Allocs and Frees without the hot codes.
	before10 bool
	room     int // events that may still be added without makeRoom
	// clsBase and clsMix: what the current thread and the epoch add to
	// the key of a class and to its hash (see class).
	clsBase, clsMix uint64
}

func newEncoder() *encoder {
	// Sequence numbers start at 1 so that a zero entry is never valid.
	e := &encoder{addrs: new([addrTab]addrSlot), free: new([freeTab]freeEntry), classes: new([classTab]encClass), allocSeq: 1, freeSeq: 1,
		nameIdx: map[string]int{}}
	e.perThread = true
	e.reset()
	return e
}

// setStack records fn and size as those of the latest Alloc of stack id,
// whose table entry is se.
func (m *model) setStack(se *stackEntry, id uint32, size uint64, fn event.Fn) {
	if se.epoch != m.epoch || se.id != id {
		*se = stackEntry{size: size, id: id, epoch: m.epoch, fn: fn, nextAlloc: id, nextFree: id}
		return
	}
	se.size, se.fn = size, fn
}

// chainAlloc records that an Alloc of stack id, whose valid table entry
// is se, came after the previous Alloc, and predicts the next Alloc's
// stack: the one that followed id last time. If id was the predicted
// stack (hit), the previous Alloc's entry, if still valid, already says
// so.
func (m *model) chainAlloc(se *stackEntry, id uint32, hit bool) {
	if !hit {
		if p := &m.stacks[m.prevAlloc&(stackTab-1)]; p.epoch == m.epoch && p.id == m.prevAlloc {
			p.nextAlloc = id
		}
	}
	m.prevAlloc, m.allocNext = id, se.nextAlloc
}

// chainFree is chainAlloc for a Free of stack id (0: none). A predicted
// stack that repeats the previous Free's changes nothing: the previous
// Free's entry says that it comes next, or if another stack took the
// entry since, it would say so again once taken back.
// (Small enough to inline.)
func (m *model) chainFree(id uint32, hit bool) {
	if !hit || id != m.prevFree {
		m.chainNewFree(id, hit)
	}
}

func (m *model) chainNewFree(id uint32, hit bool) {
	var next uint32
	if id != 0 {
		se := &m.stacks[id&(stackTab-1)]
		if se.epoch != m.epoch || se.id != id {
			*se = stackEntry{id: id, epoch: m.epoch, nextAlloc: id, nextFree: id}
		}
		if p := &m.stacks[m.prevFree&(stackTab-1)]; !hit && m.prevFree != 0 && p.epoch == m.epoch && p.id == m.prevFree {
			p.nextFree = id
		}
		next = se.nextFree
	}
	m.prevFree, m.freeNext = id, next
}

// reset starts a new chunk.
func (e *encoder) reset() {
	if e.model.reset() {
		clear(e.classes[:])
	}
	e.setClass()
	clear(e.nameIdx)
	e.callers.reset()
	e.defFrames, e.defEnd = e.defFrames[:0], e.defEnd[:0]
	for i := range e.s {
		e.s[i] = e.s[i][:0]
	}
	e.alt = e.alt[:0]
	e.n, e.big, e.room = 0, false, 0
	if e.allocSeq > seqRestart || e.freeSeq > seqRestart {
		// Restart the sequence numbers before they outgrow an addrSlot.
		clear(e.addrs[:])
		clear(e.free[:])
		e.allocSeq, e.freeSeq = 1, 1
	}
	e.allocStart, e.freeStart = e.allocSeq, e.freeSeq
}

// putStack codes the stack id of a heap event (format version 8): as a
// zigzag delta from the chunk's latest StackDef's, which the agent writes
// just before the first event of a stack (python3: 30 % of the events'
// stacks; the stack stream a third smaller). A predicted stack (hotStack)
// skips it.
func (e *encoder) putStack(id uint32) {
	v := zigzag(int64(id) - int64(e.lastStack))
	if e.before8 {
		v = uint64(id)
	}
	e.putUv(sStack, v)
}

// freedCode codes the allocation a free releases, dist allocations back
// (format version 7): 2*dist-1, or, counted from the allocation after the
// one the previous free released, 2+2*zigzag(delta), whichever is smaller.
// Programs free blocks in the order they allocated them at least as often
// as the newest first (sqlite3 closing its database: 94 % of its frees):
// then every free codes as 2. dist 0 (none known) codes as 0.
// (Small enough to inline: the callers append the uvarint of what it
// returns.)
func (e *encoder) freedCode(dist uint64) uint64 {
	if e.before7 || dist == 0 {
		return dist
	}
	target := e.allocSeq - uint32(dist)
	v := 2*dist - 1
	if e.lastFreed != 0 {
		v = min(v, 2+2*zigzag(int64(target)-int64(e.lastFreed)-1))
	}
	e.lastFreed = uint64(target)
	return v
}

// full reports whether the chunk has reached size bytes. It looks at the
// size only every 16 events unless a variable-sized event came, so a chunk
// may exceed size by 16 heap events.
func (e *encoder) full(size int) bool {
	if e.n&15 != 0 && !e.big {
		return false
	}
	e.big = false
	return e.size() >= size
}

// size is the length of the payload so far, less the stream lengths.
func (e *encoder) size() int {
	n := 0
	for i := range e.s {
		n += len(e.s[i])
	}
	return n
}

// payload appends the chunk's payload to b.
func (e *encoder) payload(b []byte) []byte {
	return appendPayload(b, &e.s, e.alt, e.timeMode, e.timeMode)
}

// appendPayload appends a payload of streams s, whose time stream is coded
// as primary says, to b. If flags asks for the other time coding, alt
// replaces the time stream.
func appendPayload(b []byte, s *[numStreams][]byte, alt []byte, primary, flags byte) []byte {
	st := *s
	if flags&timeEMA != primary {
		st[sTime] = alt
	}
	b = appendHead(b, &st, flags)
	for i := range st {
		b = append(b, st[i]...)
	}
	return b
}

// appendHead appends the head of a payload of streams s: flags and the
// lengths of all streams but the last.
func appendHead(b []byte, s *[numStreams][]byte, flags byte) []byte {
	b = append(b, flags)
	for i := range numStreams - 1 {
		b = binary.AppendUvarint(b, uint64(len(s[i])))
	}
	return b
}

// ownTime is ev.Addr2, as coarse as times when it is a late allocation's
// own time (and not 0 so: 0 would say it is not late).
func (e *encoder) ownTime(ev *event.Event) uint64 {
	if ev.Kind == event.Alloc && ev.Addr2 <= ev.Time && ev.Addr2>>e.shift != 0 {
		return ev.Addr2 >> e.shift << e.shift
	}
	return ev.Addr2
}

// allocBase is what an allocation's address is coded as a delta from: the
// end of the previous allocation's chunk, if the chunk had one, else the
// previous address.
func (m *model) allocBase() uint64 {
	if m.bump != 0 {
		return m.bump
	}
	return m.prevAddr
}

// chunkSize is the size of the glibc chunk that holds a block of size
// bytes (its 8-byte header, 16-byte alignment, 32 bytes at least): blocks
// carved one after another from the top of the heap lie that far apart.
func chunkSize(size uint64) uint64 {
	return max(32, (size+8+15)&^15)
}

// putSize codes a size as its low byte and the uvarint of the rest: one
// byte-wide column and one mostly of zeros entropy-code better than
// varints whose first and second bytes share one distribution.
func (e *encoder) putSize(n uint64) {
	e.put1(sSize, byte(n))
	e.putUv(sSizeHi, n>>8)
}

// putTime codes time t in the time stream as timeMode says, and with dual
// the other way in alt. A one-byte plain delta in a chunk that is not
// probed needs no average.
func (e *encoder) putTime(t uint64) {
	t = e.coarse(t)
	d := int64(t - e.prevTime)
	e.prevTime = t
	if v := zigzag(d); v < 0x80 && e.timeMode != timeEMA && !e.dual {
		e.put1(sTime, byte(v))
		return
	}
	e.putDelta(d)
}

// putDelta is putTime's coding of delta d in every other case.
func (e *encoder) putDelta(d int64) {
	p, a := zigzag(d), zigzag(d-e.pred)
	if e.timeMode == timeEMA {
		p, a = a, p
	}
	e.putUv(sTime, p)
	if e.dual {
		e.putAlt(a)
	}
	e.pred += (d - e.pred) >> emaShift
}

func (e *encoder) putAlt(v uint64) { e.alt = uv(e.alt, v) }

// hotTimeOf codes time t for a hot code: hotTime if it is the previous
// time (coarse times mostly are: nothing is coded, and the average of
// the deltas stays as it is), else 0 with the delta coded as putTime
// does.
// (Small enough to inline.)
func (e *encoder) hotTimeOf(t uint64) byte {
	if e.coarse(t) == e.prevTime {
		return hotTime
	}
	e.putTime(t)
	return 0
}

// The streams are written without a check of their capacity (which
// would make each write a call that might grow the slice, and then store
// all of it): add makes room for roomEvents events of at most
// maxEventBytes bytes a stream, and an event that may write more (a
// StackDef, a generic event, a new scope name) appends as usual and
// takes the room away.
const (
	roomEvents    = 64
	maxEventBytes = 32
)

// makeRoom gives each stream room for roomEvents events.
func (e *encoder) makeRoom() {
	for i := range e.s {
		e.s[i] = slices.Grow(e.s[i], roomEvents*maxEventBytes)
	}
	e.room = roomEvents
}

// put1 appends b to stream k, which has room.
func (e *encoder) put1(k int, b byte) {
	n := len(e.s[k])
	e.s[k] = e.s[k][:n+1]
	e.s[k][n] = b
}

// putUv appends the uvarint of v to stream k, which has room.
func (e *encoder) putUv(k int, v uint64) {
	b := e.s[k]
	n := len(b)
	b = b[:n+binary.MaxVarintLen64]
	for v >= 0x80 {
		b[n] = byte(v) | 0x80
		v >>= 7
		n++
	}
	b[n] = byte(v)
	e.s[k] = e.s[k][:n+1]
}

func uv(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// slot returns the table entry of addr.
func (e *encoder) slot(addr uint64) *addrSlot { return &e.addrs[addrHash(addr)&(addrTab-1)] }

// pushAlloc records an allocation of addr, whose entry is s.
func (e *encoder) pushAlloc(s *addrSlot, addr uint64, cls uint16, fn event.Fn) {
	seqs := uint64(e.allocSeq) | freeFnIndex(fn)<<slotFnBit
	if s.key&slotAddr == addr {
		s.seqs = s.seqs&^(1<<32-1) | seqs
		s.key = addr | uint64(cls)<<48
	} else if addr <= slotAddr {
		*s = addrSlot{addr | uint64(cls)<<48, seqs}
	}
	e.allocSeq++
}

// pushFree records a free of addr, whose entry is s; if s holds another
// address's allocation, still in the window, in the table of frees
// instead (the free of that address would be coded in full without it).
func (e *encoder) pushFree(s *addrSlot, addr uint64) {
	if s.key&slotAddr == addr {
		s.seqs = s.seqs&(1<<32-1) | uint64(e.freeSeq)<<32
	} else if seq := uint32(s.seqs & slotSeq); addr <= slotAddr && (seq < e.allocStart || e.allocSeq-seq > allocWindow) {
		*s = addrSlot{addr, uint64(e.freeSeq) << 32}
	} else {
		e.free[addrHash(addr)&(freeTab-1)] = freeEntry{addr, e.freeSeq}
	}
	e.freeSeq++
}

// findAlloc returns the distance (1: the latest) to the allocation of addr,
// whose entry is s, in the chunk's window, or 0, and that allocation's
// class and Fn's free.
func (e *encoder) findAlloc(s *addrSlot, addr uint64) (dist uint64, cls uint16, free event.Fn) {
	if s.key&slotAddr != addr {
		return 0, 0, 0
	}
	seq := uint32(s.seqs & slotSeq)
	if seq < e.allocStart || e.allocSeq-seq > allocWindow {
		return 0, 0, 0
	}
	return uint64(e.allocSeq - seq), uint16(s.key >> 48), freeFns[s.seqs>>slotFnBit&3]
}

// freed returns the sequence number of a free of addr, whose entry is s:
// the latest, unless s lost it; or 0 for none.
func (e *encoder) freed(s *addrSlot, addr uint64) uint32 {
	if f := uint32(s.seqs >> 32); s.key&slotAddr == addr && f != 0 {
		return f
	}
	return e.freedAside(addr)
}

func (e *encoder) freedAside(addr uint64) uint32 {
	if f := &e.free[addrHash(addr)&(freeTab-1)]; f.addr == addr {
		return f.seq
	}
	return 0
}

// setClass sets clsBase and clsMix for the current thread and epoch.
func (e *encoder) setClass() {
	e.clsBase = e.classKey(0, e.threads[0])
	e.clsMix = (e.clsBase >> 16) * 0x9e37
}

// class returns the key and the entry of class cls (not 0) and the
// current thread: classKey and classHash, less what only the thread and
// the epoch change.
func (e *encoder) class(cls uint16) (uint64, *encClass) {
	return uint64(cls) | e.clsBase, &e.classes[(uint64(cls)^e.clsMix)&(classTab-1)]
}

// classPush is decoder.classPush for the encoder and the current thread:
// seq is the free's sequence number.
func (e *encoder) classPush(seq uint32, cls uint16) {
	k, c := e.class(cls)
	if c.key != k {
		c.key, c.n = k, 0
	}
	c.top++
	c.frees[c.top%classDepth] = seq
	c.n = min(c.n+1, classDepth)
}

// classPop pops the top of the class list of cls (not 0) and the
// current thread if it is the address freed by the free of sequence
// number seq (not 0), and reports whether it did.
func (e *encoder) classPop(seq uint32, cls uint16) bool {
	k, c := e.class(cls)
	if c.key != k || c.n == 0 || c.frees[c.top%classDepth] != seq {
		return false
	}
	c.top--
	c.n--
	return true
}

// checkEvent reports why ev cannot be stored, or nil.
func checkEvent(ev *event.Event) error {
	if ev.Kind == event.StackDef && ev.Stack >= event.MaxStackID {
		return fmt.Errorf("stack id %d (limit %d)", ev.Stack, event.MaxStackID)
	}
	if len(ev.Frames()) > MaxFrames {
		return fmt.Errorf("%v event with %d frames (limit %d)", ev.Kind, len(ev.Frames()), MaxFrames)
	}
	if len(ev.Text()) > MaxString {
		return fmt.Errorf("%v event with %d bytes of text (limit %d)", ev.Kind, len(ev.Text()), MaxString)
	}
	if m := ev.ModuleInfo(); m != nil {
		if len(m.Path) > MaxString || len(m.BuildID) > MaxString || len(m.Segments) > MaxSegments {
			return fmt.Errorf("module %q exceeds the limits (path %d bytes, build id %d bytes, %d segments)",
				m.Path, len(m.Path), len(m.BuildID), len(m.Segments))
		}
	}
	if p := ev.ProcessInfo(); p != nil {
		n := 0
		for _, a := range p.Argv {
			if len(a) > MaxString {
				return fmt.Errorf("process argument of %d bytes (limit %d)", len(a), MaxString)
			}
			n += len(a)
		}
		if len(p.Argv) > MaxArgs || n > 4*MaxString || len(p.Exe) > MaxString {
			return fmt.Errorf("process arguments exceed the limits (%d arguments, %d bytes)", len(p.Argv), n)
		}
	}
	return nil
}

// needsCheck reports whether ev has variable parts that checkEvent must
// look at.
func needsCheck(ev *event.Event) bool {
	return ev.Frames() != nil || ev.Text() != "" || ev.ModuleInfo() != nil || ev.ProcessInfo() != nil
}

// checkLimits reports why ev cannot be stored, or nil.
func checkLimits(ev *event.Event) error {
	if ev.Proc >= event.MaxImages {
		return fmt.Errorf("%v event of process image %d (limit %d)", ev.Kind, ev.Proc, event.MaxImages)
	}
	if ev.X != nil && needsCheck(ev) {
		return checkEvent(ev)
	}
	return nil
}

// add appends one event to the chunk. It returns an error, and adds
// nothing, for an event beyond the format's limits.
func (e *encoder) add(ev *event.Event) error {
	// Most events are Allocs and Frees of the current process with the
	// hot codes: they take a function of their own, which has nothing to
	// keep across its calls (the rest, addAny, does).
	// A switch of thread takes them too: threads running at once
	// alternate every few events.
	if ev.X == nil && ev.Aux == 0 && ev.Proc == e.proc && e.room > 0 && !e.before10 {
		switch ev.Kind {
		case event.Free:
			if ev.Addr2 == 0 && ev.Size == 0 {
				e.room--
				e.n++
				if ev.Thread != e.threads[0] {
					e.setThread(ev.Thread)
				}
				e.addFree(ev, true)
				return nil
			}
		case event.Alloc:
			if late, before, ok := e.lateState(ev); ok {
				if ev.Thread != e.threads[0] {
					e.setThread(ev.Thread)
				}
				if e.addAllocHot(ev, late, before) {
					e.room--
					e.n++
					return nil
				}
			}
		}
	}
	return e.addAny(ev)
}

// lateState returns the late state of an Alloc (lateNone...lateCoded),
// how many ticks before its Time it was made, and whether the hot codes
// can say it.
func (e *encoder) lateState(ev *event.Event) (late byte, before uint64, ok bool) {
	if ev.Addr2 == 0 { // (AllocTime: not late)
		return lateNone, 0, true
	}
	at := e.coarse(ev.Addr2)
	if ev.Addr2 > ev.Time || at == 0 {
		return 0, 0, false
	}
	before = e.coarse(ev.Time) - at
	return lateSame + byte(min(before, 2)), before, true // (lateCoded from 2 on)
}

// addAny is add for any event.
func (e *encoder) addAny(ev *event.Event) error {
	// (A heap event has no Extra: one test for the common case.)
	plain := ev.Aux == 0 && (ev.X == nil || ev.Frames() == nil && ev.ModuleInfo() == nil && ev.Text() == "" &&
		ev.ProcessInfo() == nil && ev.ClockInfo() == nil)
	if !plain && needsCheck(ev) {
		if err := checkEvent(ev); err != nil {
			return err
		}
	}
	if e.room == 0 {
		e.makeRoom()
	}
	e.room--
	if ev.Proc != e.proc {
		if ev.Proc >= event.MaxImages {
			return fmt.Errorf("%v event of process image %d (limit %d)", ev.Kind, ev.Proc, event.MaxImages)
		}
		e.put1(sOps, opSetProc)
		e.putUv(sMisc, uint64(ev.Proc))
		e.proc = ev.Proc
	}
	if ev.Thread != e.threads[0] {
		e.setThread(ev.Thread)
	}
	e.n++
	if plain {
		switch ev.Kind {
		case event.Alloc:
			state, before, ok := e.lateState(ev)
			if !ok {
				break // late, but not close before Time: generic
			}
			if !e.before10 && e.addAllocHot(ev, state, before) {
				return nil
			}
			e.addAlloc(ev)
			if state != lateNone {
				// A late allocation: its own time is close before Time,
				// and as coarse (version 6: before, it was exact).
				ops := e.s[sOps]
				ops[len(ops)-1] = ops[len(ops)-1]&^codeMask | opLateAlloc
				e.putUv(sTime, before)
				if e.dual {
					e.alt = uv(e.alt, before)
				}
			}
			return nil
		case event.Free, event.ReallocBegin:
			if ev.Addr2 == 0 && ev.Size == 0 {
				e.addFree(ev, ev.Kind == event.Free && !e.before10)
				return nil
			}
		case event.Realloc:
			if ev.Fn < 32 {
				e.addRealloc(ev)
				return nil
			}
		}
	} else if scopeMarker(ev) {
		e.addScope(ev)
		return nil
	} else if compactAgg(ev) && !e.before7 {
		e.addAgg(ev)
		return nil
	} else if ev.Kind == event.StackDef && len(ev.Frames()) != 0 && ev.Aux == 0 && ev.ModuleInfo() == nil && ev.Text() == "" &&
		ev.ProcessInfo() == nil && ev.ClockInfo() == nil && ev.Fn == 0 && ev.Addr == 0 && ev.Addr2 == 0 && ev.Size == 0 {
		e.addStackDef(ev)
		e.big, e.room = true, 0
		return nil
	}
	e.addGeneric(ev)
	e.big, e.room = true, 0
	return nil
}

func (e *encoder) setThread(t int32) {
	for i := 1; i < numThreads; i++ {
		if e.threads[i] == t {
			e.toFront(i, t)
			e.setClass()
			e.s[sOps] = append(e.s[sOps], opSetThread|byte(i)<<5)
			return
		}
	}
	e.put1(sOps, opSetThread)
	e.putUv(sMisc, zigzag(int64(t)-int64(e.threads[0])))
	e.toFront(numThreads, t)
	e.setClass()
}

func (e *encoder) addAlloc(ev *event.Event) {
	op := byte(event.Alloc)
	e.putTime(ev.Time)
	e.putStack(ev.Stack)
	se := &e.stacks[ev.Stack&(stackTab-1)]
	if se.epoch == e.epoch && se.id == ev.Stack && se.size == ev.Size && se.fn == ev.Fn {
		op |= f0
	} else {
		e.put1(sFn, byte(ev.Fn))
		e.putSize(ev.Size)
		e.setStack(se, ev.Stack, ev.Size, ev.Fn)
	}
	if !e.before10 {
		e.chainAlloc(se, ev.Stack, false)
	}
	e.s[sOps] = append(e.s[sOps], e.allocAddr(op, ev))
}

// addAllocHot codes an Alloc (format version 10): op opAllocHot +
// (hotTime | hotStack | late<<lateShift) with flags as for 0x01; time
// unless hotTime; stack unless hotStack (the one that followed the
// previous Alloc's stack last time, see chainAlloc); Fn: that of the
// stack's latest Alloc in the chunk, or if it had none, coded; size
// unless f0 (as the stack's latest Alloc's); the address; with lateCoded,
// time: uvarint how many ticks before Time the allocation was made
// (before). It codes nothing and returns false for an Alloc whose Fn is
// not its stack's latest (the codes 0x01 and 0x1c say it).
func (e *encoder) addAllocHot(ev *event.Event, late byte, before uint64) bool {
	id := ev.Stack
	se := &e.stacks[id&(stackTab-1)]
	valid := se.epoch == e.epoch && se.id == id
	if valid && se.fn != ev.Fn {
		return false
	}
	op := opAllocHot + (late<<lateShift | e.hotTimeOf(ev.Time))
	hit := id == e.allocNext
	if hit {
		op += hotStack
	} else {
		e.putStack(id)
	}
	switch {
	case !valid:
		e.put1(sFn, byte(ev.Fn))
		e.putSize(ev.Size)
		e.setStack(se, id, ev.Size, ev.Fn)
	case se.size == ev.Size:
		op |= f0
	default:
		// (putSize, inlined by hand: sizes vary in most loops.)
		e.put1(sSize, byte(ev.Size))
		e.putUv(sSizeHi, ev.Size>>8)
		se.size = ev.Size
	}
	e.chainAlloc(se, id, hit)
	if late == lateCoded {
		e.putUv(sTime, before)
		if e.dual {
			e.alt = uv(e.alt, before)
		}
	}
	e.s[sOps] = append(e.s[sOps], e.allocAddr(op, ev))
	return true
}

// allocAddr codes the address of an Alloc whose op is op so far and
// returns the op with the address's flags.
func (e *encoder) allocAddr(op byte, ev *event.Event) byte {
	addr := ev.Addr
	s := e.slot(addr)
	cls := classOf(ev.Size)
	if f := e.freed(s, addr); f != 0 && cls != 0 && e.classPop(f, cls) {
		op |= 1 << 6
	} else if f >= e.freeStart && e.freeSeq-f <= freeWindow {
		op |= 3 << 6
		e.putUv(sAddr, uint64(e.freeSeq-f-1))
	} else if d := zigzag(int64(addr - e.allocBase())); d <= addr {
		e.putUv(sAddr, d)
	} else {
		op |= 2 << 6
		e.putUv(sAddr, addr)
	}
	e.prevAddr = addr
	e.bump = addr + chunkSize(ev.Size)
	e.pushAlloc(s, addr, cls, ev.Fn)
	return op
}

// addFree codes a Free or a ReallocBegin; with hot, a Free with the code
// opFreeHot (format version 10): op opFreeHot + (hotTime | hotStack) with
// flags as for 0x02, f0 only without hotStack; time unless hotTime; with
// hotStack the stack is the one that followed the previous Free's last
// time (see chainFree), else as for 0x02; then as 0x02.
func (e *encoder) addFree(ev *event.Event, hot bool) {
	var op byte
	if hot {
		op = opFreeHot + e.hotTimeOf(ev.Time)
		hit := ev.Stack == e.freeNext
		if hit {
			op += hotStack
		} else if ev.Stack != 0 {
			op |= f0
			e.putStack(ev.Stack)
		}
		e.chainFree(ev.Stack, hit)
	} else {
		op = byte(ev.Kind)
		e.putTime(ev.Time)
		if ev.Stack != 0 {
			op |= f0
			e.putStack(ev.Stack)
		}
	}
	addr := ev.Addr
	s := e.slot(addr)
	dist, cls, free := e.findAlloc(s, addr)
	if addr == 0 || dist != 0 {
		op |= f2
		e.putUv(sAddr, e.freedCode(dist))
	} else {
		e.putUv(sAddr, zigzag(int64(addr-e.prevAddr)))
	}
	want := event.ReallocFn
	if ev.Kind == event.Free {
		want = e.freeFn
		if dist != 0 {
			want = free
			if cls != 0 {
				e.classPush(e.freeSeq, cls)
			}
			// pushFree, where s is addr's.
			s.seqs = s.seqs&(1<<32-1) | uint64(e.freeSeq)<<32
			e.freeSeq++
		} else {
			e.pushFree(s, addr)
		}
		e.freeFn = ev.Fn
	}
	if ev.Fn == want {
		op |= f1
	} else {
		e.put1(sFn, byte(ev.Fn))
	}
	e.prevAddr = addr
	e.put1(sOps, op)
}

func (e *encoder) addRealloc(ev *event.Event) {
	op := byte(event.Realloc)
	e.putTime(ev.Time)
	if ev.Stack != 0 {
		op |= f0
		e.putStack(ev.Stack)
	}
	addr, addr2 := ev.Addr, ev.NewAddr()
	s := e.slot(addr)
	dist, oldCls, _ := e.findAlloc(s, addr)
	if addr == 0 || dist != 0 {
		op |= f2
		e.putUv(sAddr, e.freedCode(dist))
	} else {
		e.putUv(sAddr, zigzag(int64(addr-e.prevAddr)))
	}
	fb := byte(ev.Fn)
	switch {
	case addr2 == addr:
	case addr2 == 0:
		fb |= 1 << 5
	default:
		fb |= 2 << 5
		e.putUv(sAddr, zigzag(int64(addr2-addr)))
	}
	e.put1(sFn, fb)
	e.putSize(ev.Size)
	if addr2 != 0 {
		e.pushAlloc(e.slot(addr2), addr2, classOf(ev.Size), event.Malloc)
		e.prevAddr = addr2
	} else {
		e.prevAddr = addr
	}
	if addr != 0 && addr2 != addr && (addr2 != 0 || ev.Size == 0) {
		if dist != 0 && oldCls != 0 {
			e.classPush(e.freeSeq, oldCls)
		}
		e.pushFree(s, addr)
	}
	e.put1(sOps, op)
}

// scopeMarker reports whether ev is a scope marker as the collector makes
// them, which opScope codes: a ScopeBegin with a name or a ScopeEnd
// without, a time and a depth and nothing else.
func scopeMarker(ev *event.Event) bool {
	if ev.Fn != 0 || ev.Stack != 0 || ev.Addr != 0 || ev.Addr2 != 0 || ev.Size != 0 {
		return false
	}
	x := ev.X
	if x != nil && (x.Frames != nil || x.Module != nil || x.Process != nil || x.Clock != nil || x.Scan != nil || x.RootCause != nil) {
		return false
	}
	switch ev.Kind {
	case event.ScopeBegin:
		return ev.Text() != ""
	case event.ScopeEnd:
		return ev.Text() == ""
	}
	return false
}

// addScope codes a scope marker: op opScope, f0 for an end; time; misc:
// uvarint depth (Aux); for a begin, with f1 misc: uvarint k, the name is
// the k-th of the chunk's names, else misc: the name as a string, which
// becomes the next of them (while the table has room).
func (e *encoder) addScope(ev *event.Event) {
	op := byte(opScope)
	e.putTime(ev.Time)
	b := e.s[sMisc]
	if e.shift != 0 {
		// A scope's duration is its markers' difference: they keep
		// their exact times (version 6).
		b = uv(b, ev.Time&(1<<e.shift-1))
	}
	b = uv(b, ev.ScopeDepth())
	if ev.Kind == event.ScopeEnd {
		op |= f0
	} else if k, ok := e.nameIdx[ev.Text()]; ok {
		op |= f1
		b = uv(b, uint64(k))
	} else {
		b = putString(b, ev.Text())
		if len(e.names) < maxChunkNames {
			e.nameIdx[ev.Text()] = len(e.names)
			e.names = append(e.names, ev.Text())
		}
		e.big, e.room = true, 0
	}
	e.s[sMisc] = b
	e.put1(sOps, op)
}

// compactAgg reports whether addAgg can code ev: its free's function
// (AggFree) is one byte as packed, not only once truncated.
func compactAgg(ev *event.Event) bool {
	ffn := ev.Aux >> 32
	return ev.Kind == event.Agg && ev.X == nil && ev.Fn != 0 && ffn != 0 && ffn < 256
}

// addAgg codes an aggregate of folded pairs (version 7; before, the
// generic way, its free's function shifted into a 5-byte Aux): time; fn:
// the allocating function, then the free's unless f1 (the one that frees
// what it allocates); stack: uvarint allocation stack, then with f0 the
// free's; misc: uvarint pairs (Addr); size: bytes (Size); with f2 misc:
// uvarint temporaries (Addr2).
func (e *encoder) addAgg(ev *event.Event) {
	op := byte(opAgg)
	e.putTime(ev.Time)
	e.put1(sFn, byte(ev.Fn))
	fstack, ffn := ev.AggFree()
	if ffn == freeFnFor(ev.Fn) {
		op |= f1
	} else {
		e.put1(sFn, byte(ffn))
	}
	e.putStack(ev.Stack)
	if fstack != 0 {
		op |= f0
		e.putStack(fstack)
	}
	e.putUv(sMisc, ev.AggPairs())
	e.putSize(ev.Size)
	if temp := ev.AggTemporary(); temp != 0 {
		op |= f2
		e.putUv(sMisc, temp)
	}
	e.put1(sOps, op)
}

func (e *encoder) addStackDef(ev *event.Event) {
	op := byte(event.StackDef)
	if ev.Time>>e.shift != 0 {
		op |= f0
		e.putTime(ev.Time)
	}
	if ev.Stack == e.lastStack+1 {
		op |= f1
	} else {
		e.putUv(sStack, uint64(ev.Stack))
	}
	e.lastStack = ev.Stack
	fr := ev.Frames()
	if ref, k := e.callers.add(fr); k >= minSharedCallers {
		// Only the frames below the callers it shares are coded.
		op |= f2
		e.putUv(sFrames, uint64(ref))
		e.putUv(sFrames, uint64(k))
		e.putInner(fr, len(fr)-k, e.defined(len(e.defEnd)-ref))
	} else {
		e.putFrames(fr)
	}
	e.defFrames = append(e.defFrames, fr...)
	e.defEnd = append(e.defEnd, len(e.defFrames))
	e.put1(sOps, op)
}

// defined returns the frames of the chunk's i-th stack definition.
func (e *encoder) defined(i int) []uint64 {
	from := 0
	if i > 0 {
		from = e.defEnd[i-1]
	}
	return e.defFrames[from:e.defEnd[i]]
}

// minSharedCallers: a stack shares at least so many outermost frames with
// an earlier one of the chunk before it is coded as a reference to it.
const minSharedCallers = 2

// putInner codes the first n frames of fr, those below the callers it
// shares with the earlier stack from: their count, then from the outermost
// in, each as a delta from the one above it; the outermost from the frame
// at its depth in from if there is one (a return address in the same
// function, called from the same shared caller), else from the innermost
// shared frame. The first frame of fr becomes the previous first frame.
func (e *encoder) putInner(fr []uint64, n int, from []uint64) {
	b := uv(e.s[sFrames], uint64(n))
	if n > 0 {
		b = uv(b, zigzag(int64(fr[n-1]-innerAnchor(fr, n, from))))
		for i := n - 2; i >= 0; i-- {
			b = uv(b, zigzag(int64(fr[i]-fr[i+1])))
		}
	}
	e.prevFrame = fr[0]
	e.s[sFrames] = b
}

// innerAnchor is what the outermost of the n inner frames of fr is coded
// from (see putInner); fr[n:] are the frames shared with from.
func innerAnchor(fr []uint64, n int, from []uint64) uint64 {
	if k := len(fr) - n; len(from) > k {
		return from[len(from)-k-1]
	}
	return fr[n]
}

// callerTrie holds the stacks defined in a chunk, outermost frame first,
// to find the earlier stack that shares the most callers with a new one.
type callerTrie struct {
	nodes map[trieKey]trieNode
	defs  int32 // stacks defined in the chunk
}

type trieKey struct {
	parent int32 // 0: the root
	frame  uint64
}

type trieNode struct {
	id   int32
	last int32 // the latest stack (its index in the chunk) through this node
}

// maxTrieNodes bounds a chunk's trie; past it, stacks share with those
// already in it only.
const maxTrieNodes = 1 << 16

// add enters the stack fr as the chunk's next one and returns how many
// stacks back (1: the latest) the earlier stack sharing the most
// outermost frames with it is, and how many it shares (0: none).
func (c *callerTrie) add(fr []uint64) (ref, shared int) {
	if c.nodes == nil {
		c.nodes = map[trieKey]trieNode{}
	}
	idx := c.defs
	c.defs++
	var parent int32
	var from int32 = -1
	matching := true
	for i := len(fr) - 1; i >= 0; i-- {
		k := trieKey{parent, fr[i]}
		nd, ok := c.nodes[k]
		if !ok {
			if len(c.nodes) >= maxTrieNodes {
				break
			}
			matching = false
			nd.id = int32(len(c.nodes)) + 1
		} else if matching {
			from = nd.last
			shared++
		}
		nd.last = idx
		c.nodes[k] = nd
		parent = nd.id
	}
	if shared == 0 {
		return 0, 0
	}
	return int(idx - from), shared
}

func (c *callerTrie) reset() {
	clear(c.nodes)
	c.defs = 0
}

// putFrames codes a stack: the count, the first frame as a delta from the
// previous stack's first frame, each next one as a delta from the one
// before it (so that shared callers give the same bytes).
func (e *encoder) putFrames(fr []uint64) {
	b := uv(e.s[sFrames], uint64(len(fr)))
	if len(fr) > 0 {
		b = uv(b, zigzag(int64(fr[0]-e.prevFrame)))
		e.prevFrame = fr[0]
		for i := 1; i < len(fr); i++ {
			b = uv(b, zigzag(int64(fr[i]-fr[i-1])))
		}
	}
	e.s[sFrames] = b
}

func putString(b []byte, s string) []byte {
	b = uv(b, uint64(len(s)))
	return append(b, s...)
}

func (e *encoder) addGeneric(ev *event.Event) {
	var mask uint64
	if ev.Fn != 0 {
		mask |= gFn
	}
	if ev.Stack != 0 {
		mask |= gStack
	}
	if ev.Time>>e.shift != 0 {
		mask |= gTime
	}
	if ev.Addr != 0 {
		mask |= gAddr
	}
	if ev.Addr2 != 0 {
		mask |= gAddr2
	}
	if ev.Size != 0 {
		mask |= gSize
	}
	if ev.Aux != 0 {
		mask |= gAux
	}
	if len(ev.Frames()) != 0 {
		mask |= gFrames
	}
	if ev.ModuleInfo() != nil {
		mask |= gModule
	}
	if ev.Text() != "" {
		mask |= gText
	}
	if ev.ProcessInfo() != nil {
		mask |= gProcess
	}
	if ev.ClockInfo() != nil {
		mask |= gClock
	}
	if ev.ScanInfo() != nil {
		mask |= gScan
	}
	if ev.RootCauseInfo() != nil {
		mask |= gRootCause
	}
	if ev.StaleInfo() != nil {
		mask |= gStale
	}
	e.s[sOps] = append(e.s[sOps], opGeneric, byte(ev.Kind))
	b := uv(e.s[sMisc], mask)
	if mask&gFn != 0 {
		b = append(b, byte(ev.Fn))
	}
	if mask&gStack != 0 {
		b = uv(b, uint64(ev.Stack))
	}
	if mask&gTime != 0 {
		e.putTime(ev.Time)
	}
	if mask&gAddr != 0 {
		b = uv(b, ev.Addr)
	}
	if mask&gAddr2 != 0 {
		b = uv(b, e.ownTime(ev))
	}
	if mask&gSize != 0 {
		b = uv(b, ev.Size)
	}
	if mask&gAux != 0 {
		b = uv(b, ev.Aux)
	}
	if mask&gFrames != 0 {
		e.putFrames(ev.Frames())
	}
	if m := ev.ModuleInfo(); m != nil {
		b = uv(b, uint64(m.ID))
		b = putString(b, m.Path)
		b = uv(b, uint64(len(m.BuildID)))
		b = append(b, m.BuildID...)
		b = uv(b, m.Bias)
		b = uv(b, uint64(len(m.Segments)))
		for _, s := range m.Segments {
			b = uv(b, s.Vaddr)
			b = uv(b, s.Memsz)
			b = uv(b, uint64(s.Flags))
			b = uv(b, s.Offset)
		}
	}
	if mask&gText != 0 {
		b = putString(b, ev.Text())
	}
	if p := ev.ProcessInfo(); p != nil {
		b = uv(b, uint64(p.Index))
		b = uv(b, zigzag(int64(p.PID)))
		b = uv(b, zigzag(int64(p.PPID)))
		b = uv(b, zigzag(int64(p.ParentProc)))
		b = uv(b, p.ForkID)
		b = uv(b, zigzag(int64(p.ExecOf)))
		b = uv(b, uint64(len(p.Argv)))
		for _, a := range p.Argv {
			b = putString(b, a)
		}
		b = putString(b, p.Exe)
		var fl byte
		if p.Exited {
			fl |= 1
		}
		if p.ExecdOut {
			fl |= 2
		}
		if p.Attached {
			fl |= 4
		}
		if p.Detached {
			fl |= 8
		}
		b = append(b, fl)
		b = uv(b, zigzag(int64(p.Code)))
		b = uv(b, zigzag(int64(p.Signal)))
	}
	if c := ev.ClockInfo(); c != nil {
		b = uv(b, c.Ticks)
		b = uv(b, c.Mono)
		b = uv(b, c.Real)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(c.TicksPerSec))
	}
	if sc := ev.ScanInfo(); sc != nil {
		b = putScan(b, sc)
	}
	if rc := ev.RootCauseInfo(); rc != nil {
		b = putRootCause(b, rc)
	}
	if st := ev.StaleInfo(); st != nil {
		b = putStale(b, st)
	}
	e.s[sMisc] = b
}

// putStale appends a stale epoch's reading: the pool, then the bitset of
// the pages touched (at most MaxStaleWords words).
func putStale(b []byte, st *event.StaleInfo) []byte {
	b = uv(b, st.Base)
	b = uv(b, uint64(st.Page))
	b = uv(b, uint64(st.Count))
	b = uv(b, uint64(st.Watched))
	return putList(b, st.Referenced, MaxStaleWords)
}

// putList appends the count of vs (at most max of them), then each.
func putList(b []byte, vs []uint64, max int) []byte {
	n := min(len(vs), max)
	b = uv(b, uint64(n))
	for _, v := range vs[:n] {
		b = uv(b, v)
	}
	return b
}

// putRootCause appends a root cause: its status and counts, the
// functions, the branches (address, target, direction), the note, the
// cost.
func putRootCause(b []byte, rc *event.RootCauseInfo) []byte {
	b = append(b, byte(rc.Status))
	b = uv(b, uint64(rc.Traced))
	b = uv(b, uint64(rc.Freed))
	b = uv(b, uint64(rc.Leaked))
	b = putList(b, rc.Functions, MaxRootCauseItems)
	n := min(len(rc.Branches), MaxRootCauseItems)
	b = uv(b, uint64(n))
	for _, br := range rc.Branches[:n] {
		b = uv(b, br.Addr)
		b = uv(b, br.To)
		var taken byte
		if br.LeaksWhenTaken {
			taken = 1
		}
		b = append(b, taken)
	}
	b = putString(b, truncate(rc.Note, MaxString))
	b = uv(b, rc.WindowNs)
	b = uv(b, rc.Stops)
	return uv(b, rc.FoundAfterNs)
}

// Flags of a scan (since format version 3; scanTyped since 6).
const (
	scanLive  = 1
	scanTyped = 2
)

// putScan appends a scan: its figures, texts, then its blocks by address,
// each address and owner as a delta from the previous block's address.
func putScan(b []byte, sc *event.ScanInfo) []byte {
	b = uv(b, uint64(sc.Part))
	b = uv(b, sc.PauseNs)
	b = uv(b, sc.RootBytes)
	b = uv(b, sc.HeapBytes)
	var flags uint64
	if sc.Live {
		flags |= scanLive
	}
	if sc.Typed {
		flags |= scanTyped
	}
	b = uv(b, flags)
	b = putString(b, truncate(sc.Suppressions, MaxString))
	b = putString(b, truncate(sc.Error, MaxString))
	if sc.Typed {
		b = uv(b, uint64(len(sc.Types)))
		for _, t := range sc.Types {
			b = putString(b, truncate(t.Name, MaxString))
			b = putString(b, truncate(t.File, MaxString))
			b = uv(b, uint64(t.Line))
			b = uv(b, t.Size)
		}
		b = uv(b, uint64(len(sc.Names)))
		for _, n := range sc.Names {
			b = putString(b, truncate(n, MaxString))
		}
		b = uv(b, sc.TypeNs)
	}
	b = uv(b, uint64(len(sc.Blocks)))
	var prev uint64
	for _, blk := range sc.Blocks {
		b = uv(b, zigzag(int64(blk.Addr-prev)))
		b = uv(b, blk.Size)
		b = append(b, byte(blk.Kind))
		if blk.Owner == 0 {
			b = uv(b, 0)
		} else {
			b = uv(b, 1+zigzag(int64(blk.Owner-blk.Addr)))
		}
		if sc.Typed {
			b = uv(b, uint64(blk.Type))
			b = append(b, blk.Evidence)
			if blk.Holder == 0 {
				b = uv(b, 0)
			} else {
				b = uv(b, 1+zigzag(int64(blk.Holder-blk.Addr)))
			}
			b = uv(b, uint64(blk.Via))
			b = uv(b, blk.Retained)
		}
		prev = blk.Addr
	}
	return b
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
