// Package heap is the heap model: for each recorded process image, the
// live blocks (address → size, site, thread, time), the allocation sites
// (stack → counts, bytes, the stacks that freed its blocks), threads,
// modules, totals and improper uses. Events from a live run and from a
// trace file are applied the same way, so both give the same report.
//
// The model tolerates events that arrive slightly out of order across
// threads (a free seen before the allocation it frees): such a free waits
// for its allocation instead of being reported as invalid.
package heap

import (
	"math"
	"slices"
	"sort"

	"github.com/leakpath/leakpath/internal/model/event"
)

// Block is a live heap block.
type Block struct {
	Size   uint64
	Time   uint64 // ticks when allocated
	Site   StackID
	Thread int32
	Fn     event.Fn
	// Kind is how the last scan classified the block: Unclassified if
	// none ran since it was allocated.
	Kind event.LeakKind
	// Late is how long after Time the agent recorded the block (kept
	// pending, its own time may be a clock tick early), saturated.
	Late uint32
}

// born is when the block was recorded: frees of its address are ordered
// against it (they come after it). A pending allocation's own time is
// coarse; its record's time is exact and, when written by the thread that
// kept it pending, taken before any other thread could free the block
// without taking it over.
func (b *Block) born() uint64 { return b.Time + uint64(b.Late) }

// Site is what is known of one allocation stack.
type Site struct {
	Allocs, Frees         uint64
	AllocBytes, FreeBytes uint64
	LiveBlocks, LiveBytes uint64
	Temporary             uint64
	First, Last           uint64 // ticks of the first and last allocation
	Fn                    event.Fn
	// freeStacks counts the stacks of the frees of this site's blocks
	// (only when free stacks are recorded): the first few inline, the rest
	// in a map.
	freeStacks [4]stackCount
	moreFrees  map[StackID]uint64
}

type stackCount struct {
	stack StackID
	n     uint64
}

// addFreeStack counts one free of the site's blocks at stack (not 0).
func (s *Site) addFreeStack(stack StackID) {
	if i := s.freeStackSlot(stack); s.freeStacks[i].stack == stack {
		s.freeStacks[i].n++
	} else {
		s.addNewFreeStack(stack)
	}
}

// freeStackSlot returns the inline slot holding stack (not 0, what the
// empty slots hold), if one does, else slot 0. It picks it without a
// branch on which one it is: a site whose blocks are freed from several
// stacks in no order (a loop freeing what an earlier pass allocated)
// mispredicted a search nearly every free.
func (s *Site) freeStackSlot(stack StackID) int {
	fs := &s.freeStacks // slots hold distinct stacks: one matches at most
	return b2i(fs[1].stack == stack) | b2i(fs[2].stack == stack)<<1 | b2i(fs[3].stack == stack)*3
}

// addNewFreeStack counts one free of the site's blocks at stack, a stack
// the inline slots may not hold yet. Not inlined: it is rare.
//
//go:noinline
func (s *Site) addNewFreeStack(stack StackID) { s.addFreeStacks(stack, 1) }

// b2i is 1 for true, 0 for false, without a branch.
func b2i(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}

// addFreeStacks counts n frees of the site's blocks at stack.
func (s *Site) addFreeStacks(stack StackID, n uint64) {
	for i := range s.freeStacks {
		fs := &s.freeStacks[i]
		if fs.stack == stack {
			fs.n += n
			return
		}
		if fs.stack == 0 {
			*fs = stackCount{stack, n}
			return
		}
	}
	if s.moreFrees == nil {
		s.moreFrees = map[StackID]uint64{}
	}
	s.moreFrees[stack] += n
}

// FreeStacks returns the stacks that freed this site's blocks, with counts.
func (s *Site) FreeStacks() map[StackID]uint64 {
	out := map[StackID]uint64{}
	for _, fs := range s.freeStacks {
		if fs.stack != 0 {
			out[fs.stack] += fs.n
		}
	}
	for k, v := range s.moreFrees {
		out[k] += v
	}
	return out
}

// Thread is what is known of one thread.
type Thread struct {
	TID         int32
	Start, Exit uint64 // ticks; Exit 0 while running
	Name        string
	Self        uint64 // its pthread_t
	realloc     pendingRealloc
}

type pendingRealloc struct {
	active  bool
	addr    uint64
	known   bool
	block   Block
	ignored bool   // the program said the block is no leak (see lsanState)
	time    uint64 // of the begin
	stack   uint32 // the begin's agent stack id (0: unknown)
}

// Totals are the process-wide counts.
type Totals struct {
	Calls          [event.NumFn]uint64
	Allocations    uint64 // successful allocating calls, reallocs included
	Frees          uint64 // releases of non-NULL pointers, reallocs of non-NULL included
	AllocatedBytes uint64
	FailedAllocs   uint64
	LiveBytes      uint64
	LiveBlocks     uint64
	PeakBytes      uint64
	PeakTime       uint64
	Temporary      uint64
	// Folded: allocation/free pairs the agent folded (counted in
	// Allocations and Frees). They are never live here: PeakBytes counts
	// them only through Pending events (PendingHighs of them), the
	// threads' pending bytes at a thread's highs, added to the bytes in
	// use then.
	Folded       uint64
	PendingHighs uint64
	// UnknownFrees: frees and reallocs of blocks allocated before an
	// attach (ProcessInfo.Attached): not errors, not counted in Frees.
	UnknownFrees uint64
}

// ErrorKind classifies improper uses of the allocator.
type ErrorKind uint8

// The improper uses.
const (
	InvalidFree       ErrorKind = iota + 1 // free of an address never allocated
	DoubleFree                             // free of an address already freed
	MismatchedFree                         // released by the wrong family (free of new, delete of malloc, delete of new[])
	InvalidRealloc                         // realloc of an address never allocated
	PoolDestroyedLive                      // a program's pool ended with this object still live
)

var errorNames = [...]string{InvalidFree: "invalid_free", DoubleFree: "double_free",
	MismatchedFree: "mismatched_free", InvalidRealloc: "invalid_realloc", PoolDestroyedLive: "pool_destroyed_live"}

func (k ErrorKind) String() string {
	if int(k) < len(errorNames) && errorNames[k] != "" {
		return errorNames[k]
	}
	return "unknown"
}

// Error is an improper use, counted once per distinct (kind, stacks).
type Error struct {
	Kind       ErrorKind
	Addr       uint64  // the first address it happened to
	Stack      StackID // where the free/realloc was called (0: unknown)
	AllocStack StackID // where the block was allocated (0: unknown)
	FreeStack  StackID // double free: where it was freed first
	// FreeCallSite: FreeStack is the first free's call site alone (the
	// agent folded the pair, and keeps no more of its free).
	FreeCallSite bool
	Fn           event.Fn // the releasing function
	AllocFn      event.Fn // the allocating function, when known
	Thread       int32
	Time         uint64
	Count        uint64
}

type errKey struct {
	kind              ErrorKind
	stack, alloc, fst StackID
	fn, afn           event.Fn
}

const (
	recentFrees = 1 << 16 // freed addresses remembered for double-free detection
	maxErrors   = 10000   // distinct errors kept
)

// Module is a module as the model knows it.
type Module struct {
	event.Module
	Loaded, Unloaded uint64 // ticks; Unloaded 0 while loaded
}

// Process is the model of one process image.
type Process struct {
	Info    event.ProcessInfo
	End     *event.ProcessInfo // set when the image ended
	Clock   event.ClockInfo
	Modules []*Module // every module ever loaded, in load order
	Stacks  *StackTable
	Threads map[int32]*Thread
	Totals  Totals
	Errors  []Error
	// Scan is the last scan's figures and texts (its blocks are behind
	// LeakKind); nil if none ran.
	Scan *event.ScanInfo
	// RootCauses: why sites' blocks are not freed (--root-cause).
	RootCauses map[StackID]*event.RootCauseInfo
	// Stale: the ages of the blocks in the agent's slot pool (--stale);
	// nil when no stale epoch was read.
	Stale *StaleState
	// Pending, while a snapshot is reported, are the blocks its threads
	// hold pending (allocated, not yet recorded) by address: Leaks and
	// SnapshotTotals count them. nil otherwise.
	Pending map[uint64]Block
	// ExitStatus from the agent's exit record, when it wrote one.
	ExitStatus *int32
	// Anomalies counts events that do not fit the model (a free that
	// never met its allocation counts as an error instead).
	Anomalies uint64
	// InheritedFrees counts frees, in a fork child, of blocks unknown to
	// the model (allocated by the parent and not yet reported at the fork).
	InheritedFrees uint64
	// ScopeAnomalies counts scope ends with no scope open to close, and
	// depths that said begins or ends were lost (see Scopes).
	ScopeAnomalies      uint64
	FreeStacksSeen      bool
	FirstTime, LastTime uint64
	// LeakCheckOff: the program's __lsan_is_turned_off said no leak check
	// at its exit (reports list no leaks of the image).
	LeakCheckOff bool

	sites      []Site           // by StackID
	blocks     *blockTable      // live blocks by address
	frees      *freeLog         // recent frees, for double-free detection
	agentStack []StackID        // agent stack id → StackID
	modByID    map[uint32]int32 // agent module id → index in Modules
	live       []int32          // indexes of loaded modules, sorted by address
	errIndex   map[errKey]int
	parked     map[uint64]event.Event // frees that arrived before their allocation
	limbo      map[uint64]Block       // blocks whose address was reused before their free arrived
	lastTID    int32                  // thread of the previous event, and its state
	lastThread *Thread
	obs        Observer // nil: none (see Session.Observer)
	// Of the last scan: the blocks it classified that the model did not
	// know yet (allocations the threads held pending; they arrive
	// later), and the owners of indirect blocks.
	lateKinds map[uint64]event.ScannedBlock
	owners    map[uint64]uint64
	typed     []event.ScannedBlock // of a typed scan, by address
	now       uint64               // the time of the event being applied
	scopes    *scopeState          // nil until a scope begins
	lsan      lsanState            // what the program told of LeakSanitizer's interface
	pools     *poolState           // the program's pools (pool.go); nil until one is used
	// Families are the allocator functions no hook of the agent sees
	// (the executable's own malloc, prefixed families) that it found,
	// and whether it traced each.
	Families []FamilyFn
}

// FamilyFn is one allocator function the agent found outside its hooks'
// reach (event.AllocFamilyFn).
type FamilyFn struct {
	Name    string
	Addr    uint64
	Fn      event.Fn
	Outcome uint8 // 1 traced; 2 refused (code it cannot move); 3 threads; 4 not writable
}

// maxFamilyFns bounds the functions kept (the agent sends a few dozen).
const maxFamilyFns = 256

func newProcess(info event.ProcessInfo) *Process {
	return &Process{
		Info:     info,
		Stacks:   newStackTable(),
		Threads:  map[int32]*Thread{},
		sites:    make([]Site, 1),
		blocks:   newBlockTable(),
		frees:    newFreeLog(recentFrees),
		modByID:  map[uint32]int32{},
		errIndex: map[errKey]int{},
		parked:   map[uint64]event.Event{},
		limbo:    map[uint64]Block{},
	}
}

// scanned takes the classification of a Scan event: a first part (Part
// 0) replaces any earlier scan, a later part adds to it.
func (p *Process) scanned(sc *event.ScanInfo) {
	if sc == nil {
		return
	}
	if p.Scan == nil || sc.Part == 0 {
		// Blocks may hold an earlier scan's kinds (or, in a fork
		// child, its parent's).
		p.forgetKinds()
		p.lateKinds, p.owners = map[uint64]event.ScannedBlock{}, map[uint64]uint64{}
		head := *sc
		head.Blocks = nil
		p.Scan = &head
	}
	if p.Scan.Typed {
		p.typed = append(p.typed, sc.Blocks...)
	}
	// A scan names every block live, in an order the table does not
	// keep: with the table out of cache, each lookup waits on memory.
	// The lines of the lookups ahead are asked for, as Session.Apply
	// does.
	ahead := len(p.blocks.words) >= prefetchSlots
	for i, sb := range sc.Blocks {
		if ahead {
			if j := i + 2*prefetchAhead; j < len(sc.Blocks) {
				p.blocks.prefetchSlot(sc.Blocks[j].Addr)
			}
			if j := i + prefetchAhead; j < len(sc.Blocks) {
				p.blocks.prefetchEnt(sc.Blocks[j].Addr)
			}
		}
		if !p.blocks.setKind(sb.Addr, sb.Size, sb.Kind) {
			p.lateKinds[sb.Addr] = sb
		}
		if sb.Owner != 0 {
			p.owners[sb.Addr] = sb.Owner
		}
	}
}

// forgetKinds drops the last scan's classification.
func (p *Process) forgetKinds() {
	p.blocks.clearKinds()
	p.Scan, p.lateKinds, p.owners, p.typed = nil, nil, nil, nil
}

// TypedBlocks returns the blocks of the last scan, by address, with
// their types, holders and retained sizes when it typed them
// (Scan.Typed); nil otherwise. The caller must not change them.
func (p *Process) TypedBlocks() []event.ScannedBlock { return p.typed }

// LeakKind returns how live block b at addr was classified by the last
// scan, and the owner of an indirect block: Unclassified if no scan ran,
// or the block came or changed after it.
func (p *Process) LeakKind(addr uint64, b Block) (event.LeakKind, uint64) {
	k := b.Kind
	if k == event.Unclassified && len(p.lateKinds) > 0 {
		// A pending block of the snapshot being reported.
		if sb, ok := p.lateKinds[addr]; ok && sb.Size == b.Size {
			k = sb.Kind
		}
	}
	if k != event.Indirect {
		return k, 0
	}
	return k, p.owners[addr]
}

// Site returns the site of stack id (nil if it allocated nothing).
func (p *Process) Site(id StackID) *Site {
	if int(id) >= len(p.sites) {
		return nil
	}
	return &p.sites[id]
}

// Live calls fn for every live block.
func (p *Process) Live(fn func(addr uint64, b Block)) { p.blocks.each(fn) }

// eachLive calls fn for every live block, the Pending ones included.
func (p *Process) eachLive(fn func(addr uint64, b Block)) {
	p.blocks.each(fn)
	for addr, b := range p.Pending {
		fn(addr, b)
	}
}

// SnapshotTotals returns the totals with the Pending blocks counted as
// allocated and live.
func (p *Process) SnapshotTotals() Totals {
	t := p.Totals
	for _, b := range p.Pending {
		t.Allocations++
		t.AllocatedBytes += b.Size
		t.LiveBlocks++
		t.LiveBytes += b.Size
		if b.Fn > 0 && b.Fn < event.NumFn {
			t.Calls[b.Fn]++
		}
	}
	return t
}

// LiveBlock returns the live block at addr.
func (p *Process) LiveBlock(addr uint64) (Block, bool) { return p.blocks.get(addr) }

// ModuleOf returns the module index of a runtime address among the loaded
// modules, or -1.
func (p *Process) ModuleOf(addr uint64) int32 {
	i := sort.Search(len(p.live), func(i int) bool {
		return p.Modules[p.live[i]].lowest() > addr
	})
	for j := i - 1; j >= 0 && j >= i-4; j-- {
		if p.Modules[p.live[j]].Contains(addr) {
			return p.live[j]
		}
	}
	return -1
}

func (m *Module) lowest() uint64 {
	lo := ^uint64(0)
	for _, s := range m.Segments {
		if m.Bias+s.Vaddr < lo {
			lo = m.Bias + s.Vaddr
		}
	}
	return lo
}

func (p *Process) site(id StackID) *Site {
	for int(id) >= len(p.sites) {
		p.sites = append(p.sites, Site{})
	}
	return &p.sites[id]
}

func (p *Process) thread(tid int32) *Thread {
	if p.lastThread != nil && p.lastTID == tid {
		return p.lastThread
	}
	t := p.Threads[tid]
	if t == nil {
		t = &Thread{TID: tid}
		p.Threads[tid] = t
	}
	p.lastTID, p.lastThread = tid, t
	return t
}

// LastFree returns the stack of the latest free, among the recent ones,
// of a block of site at addr.
func (p *Process) LastFree(addr uint64, site StackID) (StackID, bool) {
	e, ok := p.frees.last(addr)
	if !ok || e.site != site {
		return 0, false
	}
	return e.stack, true
}

// NumSites returns one more than the highest stack id that allocated.
func (p *Process) NumSites() int { return len(p.sites) }

// AgentIDs returns the agent's stack ids of stack site (a thread may
// define a stack another defined already), at most max of them.
func (p *Process) AgentIDs(site StackID, max int) []uint32 {
	var out []uint32
	for id, s := range p.agentStack {
		if s == site && id != 0 {
			out = append(out, uint32(id))
			if len(out) == max {
				break
			}
		}
	}
	return out
}

// StackOf returns the stack the agent calls agentID, or 0 before its
// definition.
func (p *Process) StackOf(agentID uint32) StackID { return p.stackOf(agentID) }

func (p *Process) stackOf(agentID uint32) StackID {
	if int(agentID) < len(p.agentStack) {
		return p.agentStack[agentID]
	}
	return 0
}

func (p *Process) addError(e Error) {
	k := errKey{e.Kind, e.Stack, e.AllocStack, e.FreeStack, e.Fn, e.AllocFn}
	if i, ok := p.errIndex[k]; ok {
		p.Errors[i].Count++
		return
	}
	if len(p.Errors) >= maxErrors {
		p.Anomalies++
		return
	}
	e.Count = 1
	p.errIndex[k] = len(p.Errors)
	p.Errors = append(p.Errors, e)
}

// apply applies one event of this process.
func (p *Process) apply(ev *event.Event) {
	p.now = ev.Time
	times(ev.Time, &p.FirstTime, &p.LastTime)
	switch ev.Kind {
	case event.Alloc:
		p.Totals.Calls[ev.Fn]++
		at, late := ev.AllocTime()
		var in *scopeFrame
		if p.scopes != nil && !late {
			// (A block kept pending was allocated outside any scope.)
			in = p.scopes.call(ev.Thread, ev.Fn)
		}
		if ev.Addr == 0 {
			p.Totals.FailedAllocs++
			p.calledAt(ev)
			return
		}
		b := Block{Size: ev.Size, Time: at, Site: p.stackOf(ev.Stack), Thread: ev.Thread, Fn: ev.Fn}
		if late { // kept pending by the agent: it happened earlier
			if ev.Time > b.Time {
				b.Late = uint32(min(ev.Time-b.Time, math.MaxUint32))
			}
		}
		if p.obs != nil {
			p.obs.Call(p, b, ev.Fn, b.Time)
		}
		if in != nil {
			p.scopes.allocated(in, ev.Addr, b)
		}
		p.alloc(ev.Addr, &b)
	case event.Agg:
		p.agg(ev)
	case event.Pending:
		p.pendingHigh(ev)
	case event.Refree:
		p.refree(ev)
	case event.Ignore:
		p.ignore(ev.Addr)
	case event.RootRegion:
		p.rootRegion(ev.Addr, ev.Size, ev.Registered())
	case event.LeakCheckOff:
		p.LeakCheckOff = true
	case event.PoolCreate:
		p.poolCreate(ev)
	case event.PoolDestroy:
		p.poolDestroy(ev)
	case event.PoolAlloc:
		p.poolAlloc(ev)
	case event.PoolFree:
		p.poolFree(ev)
	case event.AllocFamilyFn:
		if len(p.Families) < maxFamilyFns {
			p.Families = append(p.Families, FamilyFn{Name: ev.Text(), Addr: ev.Addr, Fn: ev.Fn, Outcome: uint8(min(ev.FamilyOutcome(), 255))})
		}
	case event.Scan:
		p.scanned(ev.ScanInfo())
	case event.Free:
		p.Totals.Calls[ev.Fn]++
		if p.scopes != nil {
			p.scopes.call(ev.Thread, ev.Fn)
		}
		p.free(ev)
	case event.ReallocBegin:
		t := p.thread(ev.Thread)
		t.realloc = p.reallocTake(ev.Addr)
		t.realloc.time, t.realloc.stack = ev.Time, ev.Stack
	case event.Realloc:
		p.realloc(ev)
	case event.StackDef:
		if ev.Stack >= event.MaxStackID {
			return // the decoders refuse these: no slot for each id below
		}
		id := p.Stacks.intern(ev.Frames(), p.ModuleOf)
		for int(ev.Stack) >= len(p.agentStack) {
			p.agentStack = append(p.agentStack, 0)
		}
		p.agentStack[ev.Stack] = id
	case event.ModuleLoad:
		m := &Module{Module: *ev.ModuleInfo(), Loaded: ev.Time}
		idx := int32(len(p.Modules))
		p.Modules = append(p.Modules, m)
		p.modByID[m.ID] = idx
		p.live = append(p.live, idx)
		sort.Slice(p.live, func(i, j int) bool {
			return p.Modules[p.live[i]].lowest() < p.Modules[p.live[j]].lowest()
		})
	case event.ModuleUnload:
		if idx, ok := p.modByID[ev.ModuleInfo().ID]; ok {
			p.Modules[idx].Unloaded = ev.Time
			delete(p.modByID, ev.ModuleInfo().ID)
			for i, l := range p.live {
				if l == idx {
					p.live = append(p.live[:i], p.live[i+1:]...)
					break
				}
			}
		}
	case event.ThreadStart:
		t := p.thread(ev.Thread)
		if t.Start == 0 {
			t.Start = ev.Time
		}
		t.Self = ev.Pthread()
	case event.ThreadExit:
		p.thread(ev.Thread).Exit = ev.Time
	case event.ThreadName:
		if ev.Thread == 0 {
			for _, t := range p.Threads {
				if self := ev.Pthread(); t.Self == self && self != 0 && t.Exit == 0 {
					t.Name = ev.Text()
				}
			}
			return
		}
		p.thread(ev.Thread).Name = ev.Text()
	case event.Exit:
		st := ev.ExitStatus()
		p.ExitStatus = &st
	case event.Clock:
		if ev.ClockInfo() != nil {
			p.Clock = *ev.ClockInfo()
		}
	case event.RootCause:
		if rc := ev.RootCauseInfo(); rc != nil {
			if site := p.stackOf(ev.Stack); site != 0 {
				if p.RootCauses == nil {
					p.RootCauses = map[StackID]*event.RootCauseInfo{}
				}
				p.RootCauses[site] = rc
			}
		}
	case event.ScopeBegin:
		p.scopeBegin(ev)
	case event.ScopeEnd:
		p.scopeEnd(ev)
	case event.StaleEpoch:
		p.staleEpoch(ev)
	case event.ProcessEnd:
		if ev.ProcessInfo() != nil {
			end := *ev.ProcessInfo()
			p.End = &end
		}
		if p.Scan != nil && p.Scan.Live && (p.End == nil || !p.End.Detached) {
			// A snapshot's kinds are stale at the end: the blocks left
			// then were never scanned. (The scan before a detach is
			// the last word on the blocks live at the detach.)
			p.forgetKinds()
		}
	}
}

// alloc adds block *b (which it may change).
func (p *Process) alloc(addr uint64, b *Block) {
	if len(p.parked) > 0 {
		if pf, ok := p.parked[addr]; ok && pf.Time >= b.born() {
			// A free that arrived before its allocation: this is the
			// block it released. Both are in the past.
			delete(p.parked, addr)
			p.counted(b)
			p.freedBlock(addr, b, p.stackOf(pf.Stack), pf.Fn, pf.Thread)
			p.checkFamily(addr, *b, &pf, p.stackOf(pf.Stack))
			return
		}
		// A parked free older than this block waits on: it may be the
		// free of an older block at the same address, still on its way.
		// After an attach it is the free of a block from before.
		if pf, ok := p.parked[addr]; ok && p.Info.Attached {
			delete(p.parked, addr)
			p.Totals.UnknownFrees++
			p.calledAt(&pf)
		}
	}
	if len(p.lateKinds) > 0 {
		if sb, ok := p.lateKinds[addr]; ok {
			// Held pending at the scan, recorded now.
			delete(p.lateKinds, addr)
			if sb.Size == b.Size {
				b.Kind = sb.Kind
			}
		}
	}
	var old Block
	if p.blocks.put(addr, b, &old) {
		// The allocator handed out an address we think is live: its free
		// is still on its way from another thread.
		p.released(old)
		p.limbo[addr] = old
	}
	p.counted(b)
	p.site(b.Site).addLive(b.Size)
	p.Totals.addLive(b.Size, b.Time)
}

// counted accounts an allocation to its site and the totals.
func (p *Process) counted(b *Block) {
	p.site(b.Site).allocated(b)
	p.Totals.allocated(b.Size)
	if p.obs != nil {
		p.obs.Allocated(p, *b)
	}
}

// pendingHigh takes the threads' pending bytes as one of them counted
// them (at its high): with the bytes in use then, they may be the peak.
// (The peak may fall between two counts: it may be a little low, never
// high.)
func (p *Process) pendingHigh(ev *event.Event) {
	p.Totals.PendingHighs++
	if v := p.Totals.LiveBytes + ev.Size; v > p.Totals.PeakBytes {
		p.Totals.PeakBytes, p.Totals.PeakTime = v, ev.Time
	}
	if p.obs != nil {
		p.obs.Pending(p, ev.Size, ev.Time)
	}
}

// agg accounts pairs the agent folded: allocated and freed by one thread
// soon after, counted, never live here.
func (p *Process) agg(ev *event.Event) {
	n, bytes, temp := ev.AggPairs(), ev.Size, ev.AggTemporary()
	fstack, ffn := ev.AggFree()
	if ffn >= event.NumFn {
		p.Anomalies++
		return
	}
	p.Totals.Calls[ev.Fn] += n
	p.Totals.Calls[ffn] += n
	p.Totals.Allocations += n
	p.Totals.Frees += n
	p.Totals.AllocatedBytes += bytes
	p.Totals.Temporary += temp
	p.Totals.Folded += n
	s := p.site(p.stackOf(ev.Stack))
	s.Allocs += n
	s.Frees += n
	s.AllocBytes += bytes
	s.FreeBytes += bytes
	s.Temporary += temp
	if s.Fn == 0 {
		s.Fn = ev.Fn
	}
	if s.First == 0 || ev.Time < s.First {
		s.First = ev.Time
	}
	if ev.Time > s.Last {
		s.Last = ev.Time
	}
	if fs := p.stackOf(fstack); fs != 0 {
		p.FreeStacksSeen = true
		s.addFreeStacks(fs, n)
	}
	if p.obs != nil {
		p.obs.Folded(p, p.stackOf(ev.Stack), ev)
	}
}

// refree takes in the agent's word that the release following it on the
// thread is of an address where it folded a pair: unless a block is live
// there, that release frees the folded block again, and the free log gets
// the pair's free (its stack is the frame the free returned to: the
// agent keeps no more of a folded free), as if it had been recorded.
func (p *Process) refree(ev *event.Event) {
	if _, live := p.blocks.get(ev.Addr); live {
		return
	}
	_, ret := ev.RefreeOf()
	var stack StackID
	if ret != 0 {
		stack = p.Stacks.intern([]uint64{ret}, p.ModuleOf)
	}
	p.frees.add(freeEntry{addr: ev.Addr, site: p.stackOf(ev.Stack), stack: stack, afn: ev.Fn, site1: true})
}

// released accounts a block taken out of the live set (free or realloc).
func (p *Process) released(b Block) {
	p.site(b.Site).dropLive(b.Size)
	p.Totals.dropLive(b.Size)
}

// freedBlock accounts a released block's free, by thread tid, to its
// site.
func (p *Process) freedBlock(addr uint64, b *Block, stack StackID, fn event.Fn, tid int32) {
	if p.scopes != nil {
		p.scopes.freed(addr, *b, tid)
	}
	p.frees.add(freeEntry{addr: addr, site: b.Site, stack: stack, afn: b.Fn})
	p.site(b.Site).freed(b.Size, stack)
	p.Totals.Frees++
	if p.obs != nil {
		p.obs.Freed(p, *b, fn, p.now)
	}
}

func (p *Process) free(ev *event.Event) {
	stack := p.stackOf(ev.Stack)
	if stack != 0 {
		p.FreeStacksSeen = true
	}
	if len(p.limbo) > 0 {
		// A free that happened before the live block at its address was
		// allocated is the late free of the block it replaced.
		if old, lok := p.limbo[ev.Addr]; lok {
			if live, ok := p.blocks.get(ev.Addr); !ok || live.born() > ev.Time {
				delete(p.limbo, ev.Addr)
				p.freedBlock(ev.Addr, &old, stack, ev.Fn, ev.Thread)
				return
			}
		}
	}
	var b Block
	if !p.blocks.take(ev.Addr, &b) {
		// Wait for the allocation: it may still be on its way.
		if _, dup := p.parked[ev.Addr]; dup {
			prev := p.parked[ev.Addr]
			p.invalidFree(&prev)
		}
		p.parked[ev.Addr] = *ev
		return
	}
	p.released(b)
	p.unignore(ev.Addr)
	p.freedBlock(ev.Addr, &b, stack, ev.Fn, ev.Thread)
	if ev.Kind == event.Free && ev.Temporary() {
		// The agent saw no allocation on the thread in between.
		p.Totals.Temporary++
		p.site(b.Site).Temporary++
	}
	p.checkFamily(ev.Addr, b, ev, stack)
}

// checkFamily reports a block released by the wrong kind of call. It runs
// at every free: small enough to inline, with the families from tables.
func (p *Process) checkFamily(addr uint64, b Block, ev *event.Event, stack StackID) {
	if allocFamily[b.Fn] != freeFamily[ev.Fn] {
		p.mismatchedFree(addr, b, ev, stack)
	}
}

func (p *Process) mismatchedFree(addr uint64, b Block, ev *event.Event, stack StackID) {
	p.addError(Error{Kind: MismatchedFree, Addr: addr, Stack: stack, AllocStack: b.Site,
		Fn: ev.Fn, AllocFn: b.Fn, Thread: ev.Thread, Time: ev.Time})
}

// allocFamily and freeFamily are Fn.AllocFamily and Fn.FreeFamily of
// every Fn.
var allocFamily, freeFamily = func() (a, f [256]event.Family) {
	for i := range a {
		a[i], f[i] = event.Fn(i).AllocFamily(), event.Fn(i).FreeFamily()
	}
	return a, f
}()

// invalidFree reports a free that matched no allocation.
func (p *Process) invalidFree(ev *event.Event) {
	stack := p.stackOf(ev.Stack)
	kind := InvalidFree
	if ev.Kind == event.Realloc {
		kind = InvalidRealloc
	}
	e := Error{Kind: kind, Addr: ev.Addr, Stack: stack, Fn: ev.Fn, Thread: ev.Thread, Time: ev.Time}
	if f, ok := p.frees.last(ev.Addr); ok {
		e.Kind = DoubleFree
		e.AllocStack = f.site
		e.FreeStack = f.stack
		e.AllocFn = f.afn
		e.FreeCallSite = f.site1
	} else if p.Info.Attached {
		// A block from before the attach: the model never saw it.
		p.Totals.UnknownFrees++
		p.calledAt(ev)
		return
	}
	p.addError(e)
	p.calledAt(ev)
}

// checkReallocFamily reports a realloc that released a block new or new[]
// made, whether it moved the block or freed it (realloc(p, 0)).
func (p *Process) checkReallocFamily(ev *event.Event, b Block, stack StackID) {
	if b.Fn.AllocFamily() != event.FamilyMalloc {
		p.addError(Error{Kind: MismatchedFree, Addr: ev.Addr, Stack: stack, AllocStack: b.Site,
			Fn: ev.Fn, AllocFn: b.Fn, Thread: ev.Thread, Time: ev.Time})
	}
}

// reallocTake takes the block at addr, which a realloc moves or frees,
// out of the live ones, as the realloc's end finds it.
func (p *Process) reallocTake(addr uint64) pendingRealloc {
	pr := pendingRealloc{active: true, addr: addr}
	if pr.known = p.blocks.take(addr, &pr.block); pr.known {
		p.released(pr.block)
		pr.ignored = p.unignore(addr)
	}
	return pr
}

func (p *Process) realloc(ev *event.Event) {
	p.Totals.Calls[ev.Fn]++
	var in *scopeFrame
	if p.scopes != nil {
		in = p.scopes.call(ev.Thread, ev.Fn)
	}
	t := p.thread(ev.Thread)
	pr := t.realloc
	t.realloc = pendingRealloc{}
	if ev.Addr != 0 && (!pr.active || pr.addr != ev.Addr) {
		// No begin record seen for this call: take the block now.
		pr = p.reallocTake(ev.Addr)
	}
	stack, to := p.stackOf(ev.Stack), ev.NewAddr()
	if to == 0 {
		if ev.Size == 0 && ev.Addr != 0 {
			// realloc(p, 0) freed p.
			if pr.known {
				p.freedBlock(ev.Addr, &pr.block, stack, ev.Fn, ev.Thread)
				p.checkReallocFamily(ev, pr.block, stack)
			} else {
				p.invalidFree(ev)
			}
			return
		}
		// Failed: the old block is still there.
		p.Totals.FailedAllocs++
		if pr.known {
			p.restore(ev.Addr, pr.block)
			if pr.ignored {
				p.ignore(ev.Addr) // a failed realloc leaves the block as it was
			}
			if p.obs != nil {
				p.obs.Call(p, pr.block, ev.Fn, ev.Time)
			}
		} else {
			p.calledAt(ev)
		}
		return
	}
	if ev.Addr != 0 {
		if pr.known {
			p.freedBlock(ev.Addr, &pr.block, stack, ev.Fn, ev.Thread)
			p.checkReallocFamily(ev, pr.block, stack)
		} else {
			p.invalidFree(ev)
		}
	} else {
		p.calledAt(ev) // realloc(NULL, n): an allocation at its own stack
	}
	b := Block{Size: ev.Size, Time: ev.Time, Site: stack, Thread: ev.Thread, Fn: ev.Fn}
	if in != nil {
		p.scopes.allocated(in, to, b)
	}
	p.alloc(to, &b)
}

// restore puts back a block that a failed realloc did not release.
func (p *Process) restore(addr uint64, b Block) {
	var old Block
	p.blocks.put(addr, &b, &old)
	s := p.site(b.Site)
	s.LiveBlocks++
	s.LiveBytes += b.Size
	p.Totals.LiveBlocks++
	p.Totals.LiveBytes += b.Size
}

// finish settles what is still pending when the image ended: frees that
// never met an allocation are invalid, blocks in limbo were freed, scopes
// still open close at the image's last event.
func (p *Process) finish() {
	if p.scopes != nil {
		p.scopes.closeAll(p.LastTime)
	}
	p.unfinishedReallocs()
	addrs := make([]uint64, 0, len(p.parked))
	for a := range p.parked {
		addrs = append(addrs, a)
	}
	// By time, then address: frees of equal times give the same report
	// whatever the map's order.
	sort.Slice(addrs, func(i, j int) bool {
		ti, tj := p.parked[addrs[i]].Time, p.parked[addrs[j]].Time
		return ti < tj || ti == tj && addrs[i] < addrs[j]
	})
	for _, a := range addrs {
		ev := p.parked[a]
		if _, again := p.frees.last(a); !again && p.Info.ForkID != 0 && ev.Kind == event.Free {
			// A fork child frees blocks its parent allocated; those the
			// parent's other threads still held pending are unknown
			// here. Not an error of the child's.
			p.InheritedFrees++
			p.calledAt(&ev)
			continue
		}
		p.invalidFree(&ev)
	}
	p.parked = map[uint64]event.Event{}
	p.Anomalies += uint64(len(p.limbo))
	p.limbo = map[uint64]Block{}
}

// unfinishedReallocs reports the reallocs of addresses no live block
// held that never returned: the C library found the block freed and
// aborted the program inside realloc (glibc does when it must move it).
// The agent writes their stack at the begin (a trace of an older agent:
// none); the first free's and the allocation's are known for a double
// free.
func (p *Process) unfinishedReallocs() {
	var tids []int32
	for tid, t := range p.Threads {
		if pr := t.realloc; pr.active && !pr.known && pr.addr != 0 {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	for _, tid := range tids {
		t := p.Threads[tid]
		ev := event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Addr: t.realloc.addr, Thread: tid, Time: t.realloc.time,
			Stack: t.realloc.stack}
		t.realloc = pendingRealloc{}
		if _, again := p.frees.last(ev.Addr); !again && p.Info.ForkID != 0 {
			continue // the parent's block, as for frees below
		}
		p.invalidFree(&ev)
	}
}

// cloneFrom makes p a fork child of parent: it inherits the parent's live
// blocks and stacks as they are at the fork.
func (p *Process) cloneFrom(parent *Process) {
	p.Stacks = parent.Stacks.clone()
	p.Modules = append([]*Module(nil), parent.Modules...)
	p.sites = make([]Site, len(parent.sites))
	p.blocks = parent.blocks.clone()
	p.frees = newFreeLog(recentFrees)
	p.lsan = parent.lsan.clone()
	p.pools = parent.pools.clone()
	p.Families = append([]FamilyFn(nil), parent.Families...) // the patched code is the child's too
	parent.blocks.each(func(a uint64, b Block) {
		s := &p.sites[b.Site]
		s.LiveBlocks++
		s.LiveBytes += b.Size
		if s.Fn == 0 {
			s.Fn = b.Fn
			s.First = b.Time
		}
	})
	p.Totals.LiveBlocks = parent.Totals.LiveBlocks
	p.Totals.LiveBytes = parent.Totals.LiveBytes
	p.Totals.PeakBytes = parent.Totals.LiveBytes
	p.Clock = parent.Clock
}
