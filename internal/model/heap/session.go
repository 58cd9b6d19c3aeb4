package heap

import (
	"slices"
	"sort"

	"github.com/leakpath/leakpath/internal/model/event"
)

// Session is the model of every process image of one run.
type Session struct {
	Procs []*Process // by index (event.Event.Proc)
	// Observer, when not nil, is told of every heap change of every image
	// (set it before applying events).
	Observer Observer
	// prefetched counts the reads ahead Apply asked for (for tests).
	prefetched uint64
	// slow, for tests, applies every event by the general path (see
	// Process.applyFast); fast counts the events the fast path applied.
	slow bool
	fast uint64
}

// NewSession returns an empty session.
func NewSession() *Session { return &Session{} }

// Process returns image i, or nil.
func (s *Session) Process(i uint32) *Process {
	if int(i) < len(s.Procs) {
		return s.Procs[i]
	}
	return nil
}

// Apply applies events in order. Events of an image before its
// ProcessStart create it with what is known (its index).
func (s *Session) Apply(evs []event.Event) {
	if !s.bigTables() {
		s.apply(evs)
		return
	}
	// Windows of prefetchAhead events, from two before the first: the
	// slots of the window after next are asked for, then the entries those
	// of the next name (its slots came in meanwhile), then this window is
	// applied.
	const w = prefetchAhead
	n := len(evs)
	for lo := -2 * w; lo < n; lo += w {
		for i := max(lo+2*w, 0); i < min(lo+3*w, n); i++ {
			s.prefetch(&evs[i], false)
		}
		for i := max(lo+w, 0); i < min(lo+2*w, n); i++ {
			s.prefetch(&evs[i], true)
		}
		if lo >= 0 {
			s.apply(evs[lo:min(lo+w, n)])
		}
	}
}

// apply applies events in order.
func (s *Session) apply(evs []event.Event) {
	for i := 0; i < len(evs); i++ {
		ev := &evs[i]
		if (ev.Kind == event.Alloc || ev.Kind == event.Free) && !s.slow {
			if p := s.Process(ev.Proc); p != nil && p.fastReady() {
				if n := p.applyFast(evs[i:], ev.Proc); n > 0 {
					s.fast += uint64(n)
					i += n - 1
					continue
				}
			}
		}
		if ev.Proc >= event.MaxImages {
			continue // the decoders refuse these: no slot for each index below
		}
		if ev.Kind == event.ProcessStart {
			s.start(ev)
			continue
		}
		p := s.Process(ev.Proc)
		if p == nil {
			p = s.start(&event.Event{Kind: event.ProcessStart, Proc: ev.Proc,
				X: &event.Extra{Process: &event.ProcessInfo{Index: ev.Proc, ParentProc: -1, ExecOf: -1}}})
		}
		p.apply(ev)
		if ev.Kind == event.ProcessEnd {
			p.finish()
		}
	}
}

// Prefetching: an image with millions of blocks live has its table out
// of cache, and every allocation and free of it waits on memory (~190 ns
// on a 2-core VM, the page walk included). Apply asks for the lines the
// events ahead will read with prefetch instructions, which do not hold up
// the instructions after them: the waits overlap each other and the
// work. (Reading them ahead with loads, 16 events at a time, only
// overlapped the reads among themselves: a load that misses holds up
// retirement. That made bigheap's puts 0.38 -> 0.17 s of CPU; prefetch
// instructions then took the C++ map trace's report from 279 to 252 ms.)
const (
	prefetchAhead = 16
	// prefetchSlots is the index size, in words, from which Apply
	// prefetches: 1 MB of index (and 2.6 MB of entries), past a core's L2
	// cache here.
	prefetchSlots = 1 << 17
)

// bigTables reports whether an image's table is large enough to
// prefetch from.
func (s *Session) bigTables() bool {
	for _, p := range s.Procs {
		if p != nil && len(p.blocks.words) >= prefetchSlots {
			return true
		}
	}
	return false
}

// prefetch asks for the slots where ev's lookup will start or, with
// entry, when ev frees, for the entry its probe will find there (the
// slots were asked for a window before).
func (s *Session) prefetch(ev *event.Event, entry bool) {
	var addr uint64
	taking := false
	switch ev.Kind {
	case event.Alloc:
		addr = ev.Addr
	case event.Free, event.ReallocBegin:
		addr, taking = ev.Addr, true
	case event.Realloc:
		addr = ev.NewAddr()
	default:
		return
	}
	if int(ev.Proc) >= len(s.Procs) || s.Procs[ev.Proc] == nil {
		return
	}
	t := s.Procs[ev.Proc].blocks
	switch {
	case !entry:
		t.prefetchSlot(addr)
	case taking:
		t.prefetchEnt(addr)
	default:
		return
	}
	s.prefetched++
}

func (s *Session) start(ev *event.Event) *Process {
	for int(ev.Proc) >= len(s.Procs) {
		s.Procs = append(s.Procs, nil)
	}
	info := event.ProcessInfo{Index: ev.Proc, ParentProc: -1, ExecOf: -1}
	if ev.ProcessInfo() != nil {
		info = *ev.ProcessInfo()
	}
	p := newProcess(info)
	p.obs = s.Observer
	if ev.ClockInfo() != nil {
		p.Clock = *ev.ClockInfo()
	}
	if info.ForkID != 0 && info.ParentProc >= 0 {
		if parent := s.Process(uint32(info.ParentProc)); parent != nil {
			p.cloneFrom(parent)
			if p.obs != nil {
				p.obs.Forked(p)
			}
		}
	}
	s.Procs[ev.Proc] = p
	return p
}

// Finish settles every image (at the end of a trace cut short).
func (s *Session) Finish() {
	for _, p := range s.Procs {
		if p != nil {
			p.finish()
		}
	}
}

// LeakGroup is the blocks still live at one allocation site, of one leak
// kind when a scan classified them.
type LeakGroup struct {
	Stack  StackID
	Kind   event.LeakKind // Unclassified when no scan saw them
	Bytes  uint64
	Blocks uint64
	// IndirectBytes and IndirectBlocks: what the definite blocks of the
	// group hold that is lost with them (indirect blocks).
	IndirectBytes, IndirectBlocks uint64
	// Owner, for an indirect group: the allocation stack of the definite
	// block holding the first of its blocks.
	Owner StackID
}

// kindRank orders leak kinds for reports: what matters most first.
var kindRank = [event.NumLeakKinds]int{event.Definite: 0, event.Possible: 1, event.Indirect: 2, event.Unclassified: 3, event.Reachable: 4}

// KindMoreImportant reports whether a report should put kind a before b.
func KindMoreImportant(a, b event.LeakKind) bool { return kindRank[a] < kindRank[b] }

// Leaks groups the live blocks by allocation stack (and kind, after a
// scan), the most important kind first, then biggest first.
func (p *Process) Leaks() []LeakGroup {
	var out []LeakGroup
	if p.Scan == nil && len(p.Pending) == 0 {
		// The blocks that hold pool objects are the pools' memory: not
		// listed (their objects are).
		var held map[StackID][2]uint64
		if holders := p.poolHolders(); len(holders) > 0 {
			held = map[StackID][2]uint64{}
			for k := range holders {
				if b, ok := p.blocks.get(k); ok {
					h := held[b.Site]
					held[b.Site] = [2]uint64{h[0] + b.Size, h[1] + 1}
				}
			}
		}
		for id := range p.sites {
			s := &p.sites[id]
			h := held[StackID(id)]
			if s.LiveBlocks > h[1] {
				out = append(out, LeakGroup{Stack: StackID(id), Bytes: s.LiveBytes - h[0], Blocks: s.LiveBlocks - h[1]})
			}
		}
	} else {
		type key struct {
			site StackID
			kind event.LeakKind
		}
		idx := map[key]int{}
		group := func(k key) *LeakGroup {
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, LeakGroup{Stack: k.site, Kind: k.kind})
			}
			return &out[i]
		}
		holders := p.poolHolders()
		p.eachLive(func(addr uint64, b Block) {
			if holders[addr] {
				return // a pool's memory: its objects are listed instead
			}
			kind, owner := p.LeakKind(addr, b)
			g := group(key{b.Site, kind})
			g.Bytes += b.Size
			g.Blocks++
			if kind != event.Indirect || owner == 0 {
				return
			}
			ob, ok := p.blocks.get(owner)
			if !ok {
				ob, ok = p.Pending[owner]
			}
			if !ok {
				return
			}
			if g.Owner == 0 {
				g.Owner = ob.Site
			}
			og := group(key{ob.Site, event.Definite})
			og.IndirectBytes += b.Size
			og.IndirectBlocks++
		})
		// An owner group that exists only through its indirect blocks
		// (its definite block freed or changed since): drop it.
		out = slices.DeleteFunc(out, func(g LeakGroup) bool { return g.Blocks == 0 })
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return kindRank[a.Kind] < kindRank[b.Kind]
		}
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		if a.Blocks != b.Blocks {
			return a.Blocks > b.Blocks
		}
		return a.Stack < b.Stack
	})
	return out
}
