package heap

import (
	"slices"

	"github.com/leakpath/leakpath/internal/model/event"
)

// Scoped monitors, as in the blog post "メモリリーク検出器の作成方法の選択と
// 実現方法c++" (on building a leak detector in C++): a program marks a
// block of code with LEAKPATH_SCOPE("name") or leakpath_scope_begin/end
// (agent/include/leakpath.h), and the model accounts what each scope name
// costs.
//
// Each thread has a stack of open scopes. What a thread allocates, frees
// or calls while scopes are open counts for every distinct name on its
// stack at that moment: an inner scope's numbers count in its parents, as
// the blog post's guards merge into their parent when they close, and a name
// open twice on a stack (recursion) counts once. Scopes of different
// threads are independent. A block the agent kept pending (a late Alloc:
// see AllocTime) or folded (Agg) was allocated with no scope open on its
// thread: the agent folds nothing while a scope is open, and writes out
// what is pending when the first one begins.
//
// When an instance closes, the blocks allocated inside it (its inner
// scopes included) that are still live are what it held: counted per
// name, listed per allocation site with their addresses, and followed
// until they are freed (or the image ends: then they leaked from it).

// MaxScopeNames bounds the distinct scope names of an image; begins of
// further names count under OtherScope.
const MaxScopeNames = 10000

// MaxScopeAddrs is how many addresses of held blocks a ScopeSite keeps.
const MaxScopeAddrs = 64

// Names given to scopes the program did not name.
const (
	UnnamedScope = "(unnamed)"
	OtherScope   = "(other)"
)

// Scope is what one scope name did in one process image. Times are
// agent ticks.
type Scope struct {
	Name string
	// Entered counts begins. Closed counts the instances that ended,
	// Unclosed those that never did (still open when the image ended, or
	// when an end of an outer scope came: closed then), Open those open
	// now (while the program runs). Recursive counts the instances
	// entered while the same name was open on their thread: they count
	// in the outer instance, not on their own (durations, held blocks).
	Entered, Closed, Unclosed, Open, Recursive uint64
	// Timed counts the instances that closed but the recursive ones;
	// TotalTicks and MaxTicks are their durations.
	Timed                uint64
	TotalTicks, MaxTicks uint64
	// First is the first begin, Last the last close (0: none closed).
	First, Last uint64
	// AllocBytes and AllocBlocks: allocations while the scope was open on
	// the allocating thread (a realloc counts its new block).
	AllocBytes, AllocBlocks uint64
	// FreedBytes and FreedBlocks: blocks released by the thread while the
	// scope was open on it, wherever they were allocated.
	FreedBytes, FreedBlocks uint64
	// Calls counts the allocator calls made inside, per function.
	Calls [event.NumFn]uint64
	// LiveBytes and LiveBlocks: the blocks allocated inside and not freed
	// since, by any thread; MaxLiveBytes the most of them at once, first
	// reached at MaxLiveTime.
	LiveBytes, LiveBlocks     uint64
	MaxLiveBytes, MaxLiveTime uint64
	// HeldBytes and HeldBlocks: the blocks allocated inside an instance
	// and still live when it closed, summed over the instances;
	// MaxHeldBytes the most one instance held.
	HeldBytes, HeldBlocks, MaxHeldBytes uint64
	// Held lists the held blocks by allocation site, in the order first
	// held.
	Held []*ScopeSite

	threads map[int32]*uint64 // entries per thread
	lastTID int32
	lastN   *uint64
	sites   map[StackID]*ScopeSite
	// chains: the names lists of frames of this scope, by the names list
	// of their parent (nil: at the bottom), made once.
	chains []scopeChain
}

type scopeChain struct {
	parent, names []*Scope
}

// Threads returns the scope's entries per thread.
func (sc *Scope) Threads() map[int32]uint64 {
	out := make(map[int32]uint64, len(sc.threads))
	for tid, n := range sc.threads {
		out[tid] = *n
	}
	return out
}

// NumThreads returns how many threads entered the scope.
func (sc *Scope) NumThreads() int { return len(sc.threads) }

// entered counts an entry by thread tid.
func (sc *Scope) entered(tid int32) {
	if sc.lastN == nil || sc.lastTID != tid {
		n := sc.threads[tid]
		if n == nil {
			n = new(uint64)
			sc.threads[tid] = n
		}
		sc.lastTID, sc.lastN = tid, n
	}
	*sc.lastN++
}

// chain returns the names list of a frame of sc whose parent has names
// parent: parent and sc.
func (sc *Scope) chain(parent []*Scope) []*Scope {
	for _, c := range sc.chains {
		if len(c.parent) == len(parent) && (len(parent) == 0 || &c.parent[0] == &parent[0]) {
			return c.names
		}
	}
	names := append(parent[:len(parent):len(parent)], sc)
	if len(sc.chains) < 16 {
		sc.chains = append(sc.chains, scopeChain{parent, names})
	}
	return names
}

// ScopeSite is the blocks of one allocation site that a scope's
// instances held when they closed.
type ScopeSite struct {
	Site          StackID
	Blocks, Bytes uint64 // held at the closes
	// LiveBlocks and LiveBytes: those not freed since (at the image's
	// end: never freed).
	LiveBlocks, LiveBytes uint64
	// Addrs are the addresses of the first MaxScopeAddrs held blocks.
	Addrs []uint64
}

// scopeFrame is one open instance of a scope.
type scopeFrame struct {
	scope *Scope
	// names: the distinct scopes open on the thread from the outermost
	// to this one, each counting what happens inside (shared, never
	// modified).
	names     []*Scope
	begin     uint64
	recursive bool
	// blocks: allocated inside (or in inner instances, merged at their
	// close), whose owner is this frame while they live; entries of
	// blocks freed or moved since are dropped lazily.
	blocks                []*scopeBlock
	liveBytes, liveBlocks uint64
}

// scopeBlock is a live block allocated inside a scope.
type scopeBlock struct {
	addr, size, time uint64
	site             StackID
	names            []*Scope     // the scopes it was allocated in
	owner            *scopeFrame  // the open instance that holds it; nil once its outermost one closed
	held             []*ScopeSite // the sites of the closes that held it
}

type threadScopes struct {
	frames []*scopeFrame
	spare  []*scopeFrame // closed frames, for the next begins
}

// scopeState is the scopes of one image.
type scopeState struct {
	byName  map[string]*Scope
	order   []*Scope
	threads map[int32]*threadScopes
	open    int                    // frames open in all threads
	blocks  map[uint64]*scopeBlock // live blocks allocated inside scopes
	limbo   map[uint64]*scopeBlock // their address was reused before their free arrived
	lastTID int32
	last    *threadScopes
}

// Scopes returns the scopes the image entered, in the order first
// entered; nil when it entered none.
func (p *Process) Scopes() []*Scope {
	if p.scopes == nil {
		return nil
	}
	return p.scopes.order
}

func (p *Process) scopeState() *scopeState {
	if p.scopes == nil {
		p.scopes = &scopeState{byName: map[string]*Scope{}, threads: map[int32]*threadScopes{},
			blocks: map[uint64]*scopeBlock{}, limbo: map[uint64]*scopeBlock{}}
	}
	return p.scopes
}

// thread returns the scopes of thread tid (made if absent).
func (s *scopeState) thread(tid int32) *threadScopes {
	if s.last != nil && s.lastTID == tid {
		return s.last
	}
	ts := s.threads[tid]
	if ts == nil {
		ts = &threadScopes{}
		s.threads[tid] = ts
	}
	s.lastTID, s.last = tid, ts
	return ts
}

// top returns the innermost scope open on thread tid, or nil.
func (s *scopeState) top(tid int32) *scopeFrame {
	if s == nil || s.open == 0 {
		return nil
	}
	fs := s.thread(tid).frames
	if len(fs) == 0 {
		return nil
	}
	return fs[len(fs)-1]
}

func (s *scopeState) scope(name string) *Scope {
	if name == "" {
		name = UnnamedScope
	}
	sc := s.byName[name]
	if sc == nil {
		if len(s.order) >= MaxScopeNames {
			if sc = s.byName[OtherScope]; sc != nil {
				return sc
			}
			name = OtherScope
		}
		sc = &Scope{Name: name, threads: map[int32]*uint64{}, sites: map[StackID]*ScopeSite{}}
		s.byName[name] = sc
		s.order = append(s.order, sc)
	}
	return sc
}

// scopeBegin opens a scope on the event's thread. A depth at or below
// what is open says ends were lost: those instances close now.
func (p *Process) scopeBegin(ev *event.Event) {
	s := p.scopeState()
	ts := s.thread(ev.Thread)
	if d := ev.ScopeDepth(); d > 0 {
		for uint64(len(ts.frames)) >= d {
			p.ScopeAnomalies++
			s.close(ts, ev.Time, true)
		}
	}
	sc := s.scope(ev.Text())
	sc.Entered++
	sc.Open++
	sc.entered(ev.Thread)
	if sc.First == 0 || ev.Time < sc.First {
		sc.First = ev.Time
	}
	var f *scopeFrame
	if n := len(ts.spare); n > 0 {
		f = ts.spare[n-1]
		ts.spare = ts.spare[:n-1]
	} else {
		f = new(scopeFrame)
	}
	*f = scopeFrame{scope: sc, begin: ev.Time, blocks: f.blocks[:0]}
	if n := len(ts.frames); n > 0 {
		parent := ts.frames[n-1]
		if slices.Contains(parent.names, sc) {
			f.recursive, f.names = true, parent.names
			sc.Recursive++
		} else {
			f.names = sc.chain(parent.names)
		}
	} else {
		f.names = sc.chain(nil)
	}
	ts.frames = append(ts.frames, f)
	s.open++
}

// scopeEnd closes the innermost scope of the event's thread; with a
// depth, the instances above it first (their ends were lost). An end
// with nothing open to close is an anomaly.
func (p *Process) scopeEnd(ev *event.Event) {
	s := p.scopes
	if s == nil {
		p.ScopeAnomalies++
		return
	}
	ts := s.thread(ev.Thread)
	d := ev.ScopeDepth()
	if len(ts.frames) == 0 || (d > 0 && uint64(len(ts.frames)) < d) {
		p.ScopeAnomalies++
		return
	}
	for d > 0 && uint64(len(ts.frames)) > d {
		p.ScopeAnomalies++
		s.close(ts, ev.Time, true)
	}
	s.close(ts, ev.Time, false)
}

// close closes the innermost instance of ts at time t (lost: it never
// ended by itself) and merges what it holds into its parent.
func (s *scopeState) close(ts *threadScopes, t uint64, lost bool) {
	n := len(ts.frames)
	f := ts.frames[n-1]
	ts.frames[n-1] = nil
	ts.frames = ts.frames[:n-1]
	s.open--
	sc := f.scope
	sc.Open--
	if lost {
		sc.Unclosed++
	} else {
		sc.Closed++
	}
	if t > sc.Last {
		sc.Last = t
	}
	live := f.blocks[:0]
	for _, b := range f.blocks {
		if b.owner == f {
			live = append(live, b)
		}
	}
	if !f.recursive {
		sc.Timed++
		if t > f.begin {
			d := t - f.begin
			sc.TotalTicks += d
			sc.MaxTicks = max(sc.MaxTicks, d)
		}
		sc.HeldBytes += f.liveBytes
		sc.HeldBlocks += f.liveBlocks
		sc.MaxHeldBytes = max(sc.MaxHeldBytes, f.liveBytes)
		for _, b := range live {
			ss := sc.sites[b.site]
			if ss == nil {
				ss = &ScopeSite{Site: b.site}
				sc.sites[b.site] = ss
				sc.Held = append(sc.Held, ss)
			}
			ss.Blocks++
			ss.Bytes += b.size
			ss.LiveBlocks++
			ss.LiveBytes += b.size
			if len(ss.Addrs) < MaxScopeAddrs {
				ss.Addrs = append(ss.Addrs, b.addr)
			}
			b.held = append(b.held, ss)
		}
	}
	if n > 1 {
		parent := ts.frames[n-2]
		parent.liveBytes += f.liveBytes
		parent.liveBlocks += f.liveBlocks
		for _, b := range live {
			b.owner = parent
		}
		parent.blocks = append(parent.blocks, live...)
	} else {
		for _, b := range live {
			b.owner = nil
		}
	}
	// No block names f as its owner any more: it can serve again.
	clear(f.blocks)
	f.blocks = f.blocks[:0]
	if len(f.blocks) == 0 && cap(f.blocks) > 1024 {
		f.blocks = nil
	}
	if len(ts.spare) < 64 {
		ts.spare = append(ts.spare, f)
	}
}

// closeAll closes every instance still open, at time t (the image's end).
func (s *scopeState) closeAll(t uint64) {
	tids := make([]int32, 0, len(s.threads))
	for tid, ts := range s.threads {
		if len(ts.frames) > 0 {
			tids = append(tids, tid)
		}
	}
	slices.Sort(tids)
	for _, tid := range tids {
		ts := s.threads[tid]
		for len(ts.frames) > 0 {
			s.close(ts, t, true)
		}
	}
}

// call counts a call of fn by thread tid in its open scopes.
func (s *scopeState) call(tid int32, fn event.Fn) *scopeFrame {
	f := s.top(tid)
	if f != nil && fn < event.NumFn {
		for _, sc := range f.names {
			sc.Calls[fn]++
		}
	}
	return f
}

// allocated follows block b at addr, allocated inside frame f.
func (s *scopeState) allocated(f *scopeFrame, addr uint64, b Block) {
	for _, sc := range f.names {
		sc.AllocBytes += b.Size
		sc.AllocBlocks++
		sc.LiveBytes += b.Size
		sc.LiveBlocks++
		if sc.LiveBytes > sc.MaxLiveBytes {
			sc.MaxLiveBytes, sc.MaxLiveTime = sc.LiveBytes, b.Time
		}
	}
	sb := &scopeBlock{addr: addr, size: b.Size, time: b.Time, site: b.Site, names: f.names, owner: f}
	if old := s.blocks[addr]; old != nil {
		// Its free is still on its way from another thread.
		s.limbo[addr] = old
	}
	s.blocks[addr] = sb
	f.blocks = append(f.blocks, sb)
	f.liveBytes += b.Size
	f.liveBlocks++
}

// freed accounts the release of block b at addr by thread tid.
func (s *scopeState) freed(addr uint64, b Block, tid int32) {
	if f := s.top(tid); f != nil {
		for _, sc := range f.names {
			sc.FreedBytes += b.Size
			sc.FreedBlocks++
		}
	}
	if len(s.blocks) == 0 {
		return
	}
	sb := s.blocks[addr]
	if sb == nil || sb.time != b.Time || sb.size != b.Size {
		if sb = s.limbo[addr]; sb == nil || sb.time != b.Time || sb.size != b.Size {
			return
		}
		delete(s.limbo, addr)
	} else {
		delete(s.blocks, addr)
	}
	for _, sc := range sb.names {
		sc.LiveBytes -= sb.size
		sc.LiveBlocks--
	}
	for _, ss := range sb.held {
		ss.LiveBlocks--
		ss.LiveBytes -= sb.size
	}
	if o := sb.owner; o != nil {
		o.liveBytes -= sb.size
		o.liveBlocks--
		sb.owner = nil
		if len(o.blocks) > 64 && uint64(len(o.blocks)) > 4*o.liveBlocks {
			o.blocks = slices.DeleteFunc(o.blocks, func(x *scopeBlock) bool { return x.owner != o })
		}
	}
}
