package heap

import (
	"slices"
	"sort"

	"github.com/leakpath/leakpath/internal/event"
)

// Session is the model of every process image of one run.
type Session struct {
	Procs []*Process // by index (event.Event.Proc)
	// Observer, when not nil, is told of every heap change of every image
	// (set it before applying events).
	Observer Observer
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
	for i := range evs {
		ev := &evs[i]
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
		for id := range p.sites {
			s := &p.sites[id]
			if s.LiveBlocks > 0 {
				out = append(out, LeakGroup{Stack: StackID(id), Bytes: s.LiveBytes, Blocks: s.LiveBlocks})
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
		p.eachLive(func(addr uint64, b Block) {
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
