package report

import (
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
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
// suppression. A group an LSan suppression hides hides the indirect
// groups it owns, as LeakSanitizer treats suppressed blocks as reachable;
// not a valgrind entry's: memcheck suppresses each loss record by its own
// stack, so the same .supp file leaves the same leaks under both.
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
	mangled := set.HasValgrind()
	for i, g := range out {
		if g.Kind == event.Reachable || set.Len() == 0 {
			continue
		}
		if s, ok := set.MatchLeak(r.suppressLeak(p, g.LeakGroup, mangled)); ok {
			out[i].supp = s
			set.Hit(s, g.Bytes, g.Blocks)
			if g.Kind == event.Definite && s.Type != suppress.TypeValgrind {
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

// suppressLeak returns leak group g of p as suppressions match it; with
// mangled, its frames have their symbol-table names (valgrind's fun:).
func (r *Report) suppressLeak(p *heap.Process, g heap.LeakGroup, mangled bool) suppress.Leak {
	l := suppress.Leak{Stack: r.suppressFrames(p, g.Stack, mangled)}
	if g.Kind != event.Unclassified {
		l.Kind = g.Kind.String()
	}
	if s := p.Site(g.Stack); s != nil {
		l.Alloc = valgrindAllocName(s.Fn)
		if mangled && (s.Fn == event.New || s.Fn == event.NewArray) {
			if name := r.newVariant(p, g.Stack); name != "" {
				l.Alloc = name
			}
		}
	}
	return l
}

// newVariant returns the mangled name of the operator new the stack's
// dropped allocator frames show (libstdc++'s nothrow forms call the plain
// one, which the agent records), as memcheck names the variant it
// replaces: "_ZnwmRKSt9nothrow_t". "" if none shows.
func (r *Report) newVariant(p *heap.Process, id heap.StackID) string {
	frames, mods := p.Stacks.Frames(id), p.Stacks.Modules(id)
	name := ""
	for i, a := range frames {
		fs := r.frame(p, mods[i], a)
		if !isAllocator(fs) {
			break
		}
		if n := r.symbolName(p, fs[len(fs)-1]); strings.HasPrefix(n, "_Znw") || strings.HasPrefix(n, "_Zna") {
			name = n
		}
	}
	return name
}

// valgrindAllocName returns the symbol valgrind's leak stacks start with
// for allocation function fn: its replacement in vgpreload_memcheck, named
// as the function it replaces ("" for none or unknown).
func valgrindAllocName(fn event.Fn) string {
	switch fn {
	case event.New:
		return "_Znwm" // operator new(unsigned long)
	case event.NewArray:
		return "_Znam" // operator new[](unsigned long)
	case event.FreeFn, event.Delete, event.DeleteArray:
		return ""
	}
	if fn < event.NumFn {
		return event.FnNames[fn]
	}
	return ""
}

func (r *Report) suppressFrames(p *heap.Process, id heap.StackID, mangled bool) []suppress.Frame {
	fs := r.Stack(p, id)
	out := make([]suppress.Frame, len(fs))
	for i, f := range fs {
		out[i] = suppress.Frame{Function: f.Function, File: f.File, Module: f.Module, Line: f.Line, Inlined: f.Inlined}
		if mangled {
			out[i].ModuleFile = r.moduleFile(f.Module)
			out[i].Unloaded = f.ModIndex >= 0 && int(f.ModIndex) < len(p.Modules) && p.Modules[f.ModIndex].Unloaded != 0
		}
		if mangled && !f.Inlined && r.opts.SymbolName != nil {
			out[i].SymbolName = func() string { return r.symbolName(p, f) }
		}
	}
	return out
}

// symbolName returns the mangled name of f's function (not inlined) from
// Options.SymbolName, "" if unknown.
func (r *Report) symbolName(p *heap.Process, f Frame) string {
	if r.opts.SymbolName == nil || f.ModIndex < 0 || int(f.ModIndex) >= len(p.Modules) {
		return ""
	}
	k := frameKey{f.ModIndex, p, f.Address}
	if name, ok := r.mangled[k]; ok {
		return name
	}
	name := r.opts.SymbolName(p.Modules[f.ModIndex], f.Offset-1)
	if r.mangled == nil {
		r.mangled = map[frameKey]string{}
	}
	r.mangled[k] = name
	return name
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
	want := wantKinds(kinds)
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

// moduleFile returns the file module's path names with its symbolic
// links resolved (valgrind's obj: name for a library loaded by its
// soname), or "" when that is the path itself or cannot be told (the
// report made on another machine). Only links are read, no file opened.
func (r *Report) moduleFile(module string) string {
	if module == "" || !filepath.IsAbs(module) {
		return ""
	}
	if f, ok := r.moduleFiles[module]; ok {
		return f
	}
	f, err := filepath.EvalSymlinks(module)
	if err != nil || f == module {
		f = ""
	}
	if r.moduleFiles == nil {
		r.moduleFiles = map[string]string{}
	}
	r.moduleFiles[module] = f
	return f
}
