package report

import (
	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/suppress"
)

// leak is a leak group as reports show it: with the suppression that
// hides it, if one does.
type leak struct {
	heap.LeakGroup
	supp *suppress.Suppression
	// own: allocated by the user's code; else lib is the library it is
	// attributed to and during the call of own code that led there
	// (own.go).
	own         bool
	lib, during string
	// fn and allocs: the allocation function and the allocations at the
	// group's stacks; stacks: how many stacks were folded into it.
	fn     event.Fn
	allocs uint64
	stacks int
}

// suppressions returns the set a report applies: the user's, then what
// each program compiled in (__lsan_default_suppressions), then LSan's
// standard list, in LeakSanitizer's order.
func (r *Report) suppressions() *suppress.Set {
	if r.supp != nil {
		return r.supp
	}
	set := &suppress.Set{}
	if r.opts.Suppressions != nil {
		set.Add(r.opts.Suppressions)
	}
	seen := map[string]bool{}
	for _, p := range r.Images() {
		if p.Scan == nil || p.Scan.Suppressions == "" || seen[p.Scan.Suppressions] {
			continue
		}
		seen[p.Scan.Suppressions] = true
		ds, err := suppress.Parse([]byte(p.Scan.Suppressions), "__lsan_default_suppressions")
		if err != nil {
			r.Warn(err.Error())
		}
		if ds != nil {
			set.Add(ds)
		}
	}
	if std, err := suppress.Parse([]byte(suppress.Standard), suppress.StandardSource); err == nil {
		set.Add(std)
	}
	r.supp = set
	return set
}

// leaks returns p's leak groups but the still reachable ones (none for
// an image that exec'd; allLeaks has them all), each with its
// suppression. A group suppressed hides the indirect groups it
// owns, as LeakSanitizer treats suppressed blocks as reachable.
func (r *Report) leaks(p *heap.Process) []leak {
	if execd(p) || p.LeakCheckOff {
		return nil
	}
	if ls, ok := r.leakCache[p]; ok {
		return ls
	}
	set := r.suppressions()
	out := r.fold(p, r.unreachable(p))
	suppressedSite := map[heap.StackID]*suppress.Suppression{}
	for i, g := range out {
		if g.Kind == event.Reachable {
			continue
		}
		if s, ok := set.Match(r.suppressFrames(p, g.Stack)); ok {
			out[i].supp = s
			set.Hit(s, g.Bytes, g.Blocks)
			if g.Kind == event.Definite {
				suppressedSite[g.Stack] = s
			}
		}
	}
	for i := range out {
		l := &out[i]
		if l.Kind == event.Indirect && l.supp == nil && l.Owner != 0 {
			if s := suppressedSite[l.Owner]; s != nil {
				l.supp = s
			}
		}
	}
	if r.leakCache == nil {
		r.leakCache = map[*heap.Process][]leak{}
	}
	r.leakCache[p] = out
	return out
}

func (r *Report) suppressFrames(p *heap.Process, id heap.StackID) []suppress.Frame {
	fs := r.Stack(p, id)
	out := make([]suppress.Frame, len(fs))
	for i, f := range fs {
		out[i] = suppress.Frame{Function: f.Function, File: f.File, Module: f.Module}
	}
	return out
}

// KindTotal is the bytes and blocks of one leak kind.
type KindTotal struct {
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
}

// byKind sums p's leaks per kind; suppressed ones apart.
func (r *Report) byKind(p *heap.Process) (kinds [event.NumLeakKinds]KindTotal, suppressed KindTotal) {
	ls := r.leaks(p)
	for _, g := range r.reachable[p] {
		kinds[g.Kind].Bytes += g.Bytes
		kinds[g.Kind].Blocks += g.Blocks
	}
	for _, l := range ls {
		if l.supp != nil {
			suppressed.Bytes += l.Bytes
			suppressed.Blocks += l.Blocks
			continue
		}
		kinds[l.Kind].Bytes += l.Bytes
		kinds[l.Kind].Blocks += l.Blocks
	}
	return kinds, suppressed
}

// Failing sums, over every image, the leaks of the given kinds that no
// suppression hides: what makes --check fail. Blocks no scan classified
// count as definite (the kinds could not be told: assume the worst).
// With Options.CheckOwnOnly, only the user's own leaks count.
func (r *Report) Failing(kinds []event.LeakKind) (groups int, bytes, blocks uint64) {
	want := map[event.LeakKind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	if want[event.Definite] {
		want[event.Unclassified] = true
	}
	for _, p := range r.Images() {
		ls := r.leaks(p)
		if want[event.Reachable] {
			ls = r.allLeaks(p)
		}
		for _, l := range ls {
			if l.supp == nil && want[l.Kind] && (l.own || !r.opts.CheckOwnOnly) {
				groups++
				bytes += l.Bytes
				blocks += l.Blocks
			}
		}
	}
	return groups, bytes, blocks
}

// SuppressionsUsed lists the suppressions that hid leaks, as LSan's
// "Suppressions used:" does.
func (r *Report) SuppressionsUsed() []suppress.Used {
	for _, p := range r.Images() {
		r.leaks(p) // count the hits
	}
	return r.suppressions().Used()
}
