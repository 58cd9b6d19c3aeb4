// Package rootcause finds why a site's blocks leak from the paths its
// allocations took (after JP2009-217617, steps 325–355): the paths, each
// closed by F (the block was freed) or E (it was not), are kept as one
// Sequitur grammar; the branch outcome where leaked executions part from
// freed ones is found by prefix divergence, confirmed by how well the
// outcome predicts a leak (statistical debugging's increase); the
// patent's walk back (fig. 11) only breaks ties (see Analyze).
package rootcause

import (
	"github.com/leakpath/leakpath/internal/analysis/sequitur"
	"github.com/leakpath/leakpath/internal/analysis/steptrace"
)

// The closing symbols: no event encodes to them (an event's kind is
// never 0).
const (
	symF sequitur.Symbol = 1 << 3
	symE sequitur.Symbol = 2 << 3
)

// Paths is a site's recorded paths, each distinct one stored once.
type Paths struct {
	g        *sequitur.Grammar
	outcomes []steptrace.Outcome // by path index
	to       map[sequitur.Symbol]uint64
}

// NewPaths returns an empty set of paths.
func NewPaths() *Paths {
	return &Paths{g: sequitur.New(), to: map[sequitur.Symbol]uint64{}}
}

// Add adds a path's events closed by its outcome (Freed or EndReached;
// others are not paths to compare and are left out) and returns its
// index among the distinct paths.
func (ps *Paths) Add(events []steptrace.Event, outcome steptrace.Outcome) int {
	return ps.addN(events, outcome, 1)
}

// addN is Add of n copies of a path.
func (ps *Paths) addN(events []steptrace.Event, outcome steptrace.Outcome, n int) int {
	var end sequitur.Symbol
	switch outcome {
	case steptrace.Freed:
		end = symF
	case steptrace.EndReached:
		end = symE
	default:
		return -1
	}
	syms := make([]sequitur.Symbol, 0, len(events)+1)
	for _, e := range events {
		s := encode(e)
		if e.Kind == steptrace.Branch {
			ps.to[s] = e.To
		}
		syms = append(syms, s)
	}
	i, isNew := ps.g.AddN(append(syms, end), n)
	if isNew {
		ps.outcomes = append(ps.outcomes, outcome)
	}
	return i
}

// Len returns the number of distinct paths.
func (ps *Paths) Len() int { return ps.g.Len() }

// Added returns the number of paths added.
func (ps *Paths) Added() int {
	n := 0
	for i := range ps.g.Len() {
		n += ps.g.Count(i)
	}
	return n
}

// Size returns the symbols the grammar stores for all the paths.
func (ps *Paths) Size() int { return ps.g.Size() }

// Path returns distinct path i: its events, outcome and how many times it
// was recorded.
func (ps *Paths) Path(i int) (events []steptrace.Event, outcome steptrace.Outcome, count int) {
	syms := ps.g.Path(i)
	syms = syms[:len(syms)-1] // the closing F or E
	events = make([]steptrace.Event, len(syms))
	for j, s := range syms {
		events[j] = ps.decode(s)
	}
	return events, ps.outcomes[i], ps.g.Count(i)
}

// String prints the grammar (S1 → …), events by kind and address.
func (ps *Paths) String() string {
	return ps.g.String(func(s sequitur.Symbol) string {
		switch s {
		case symF:
			return "F"
		case symE:
			return "E"
		}
		return ps.decode(s).String()
	})
}

// encode packs an event into a symbol: the address above three bits of
// kind and direction (user-space addresses leave them free). A branch's
// target follows from its address and direction, and is kept aside.
func encode(e steptrace.Event) sequitur.Symbol {
	s := e.Addr<<3 | uint64(e.Kind)&3
	if e.Taken {
		s |= 4
	}
	return s
}

func (ps *Paths) decode(s sequitur.Symbol) steptrace.Event {
	e := steptrace.Event{Kind: steptrace.Kind(s & 3), Addr: s >> 3, Taken: s&4 != 0}
	if e.Kind == steptrace.Branch {
		e.To = ps.to[s]
	}
	return e
}
