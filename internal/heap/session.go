package heap

import (
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

// LeakGroup is the blocks still live at one allocation site.
type LeakGroup struct {
	Stack  StackID
	Bytes  uint64
	Blocks uint64
}

// Leaks groups the live blocks by allocation stack, biggest first.
func (p *Process) Leaks() []LeakGroup {
	var out []LeakGroup
	for id := range p.sites {
		s := &p.sites[id]
		if s.LiveBlocks > 0 {
			out = append(out, LeakGroup{Stack: StackID(id), Bytes: s.LiveBytes, Blocks: s.LiveBlocks})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
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
