package report

import (
	"encoding/binary"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// OwnCode tells the code the user builds from the system's libraries, so
// that a report lists the user's leaks first and sums up the libraries'
// one-time allocations (docs/own-code.md).
type OwnCode struct {
	// Patterns are --own globs: a module whose path (or, for a pattern
	// without a '/', whose base name) matches one is own code.
	Patterns []string
	// Dirs: modules under these directories (the working directory) are
	// own code.
	Dirs []string
	// DebugInfo reports whether the module at path carries DWARF in its
	// own file, as what the user compiles with -g does (a system library's
	// debug information comes from a separate file). nil: none does.
	DebugInfo func(path string) bool
}

// runtimeLibs are the base-name prefixes of the C and C++ runtimes and of
// the agent: a leak allocated there (strdup, fopen, std::string) belongs
// to the code that called them, so attribution looks past their frames.
var runtimeLibs = []string{"libc.so", "libc-", "ld-linux", "ld64.so", "ld.so", "libstdc++.so", "libgcc_s.so",
	"libc++.so", "libc++abi.so", "libpthread.so", "libdl.so", "libm.so", "librt.so", "libleakpath"}

// systemDirs hold programs the user did not build: an executable there
// (orted, started by MPI_Init) is not own code by being the executable.
var systemDirs = []string{"/usr/bin/", "/usr/sbin/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/", "/usr/share/",
	"/bin/", "/sbin/", "/lib/", "/lib64/", "/opt/", "/snap/", "/nix/store/"}

type ownKey struct {
	p    *heap.Process
	path string
}

// module classes for attribution.
const (
	modUnknown = iota // no file: look past it
	modRuntime        // the C/C++ runtime or the agent: look past it
	modOwn
	modLibrary
)

// moduleClass classifies the module at path in process p.
func (r *Report) moduleClass(p *heap.Process, path string) int {
	if path == "" || path[0] != '/' {
		return modUnknown
	}
	k := ownKey{p, path}
	if c, ok := r.ownCache[k]; ok {
		return c
	}
	c := r.classifyModule(p, path)
	if r.ownCache == nil {
		r.ownCache = map[ownKey]int{}
	}
	r.ownCache[k] = c
	return c
}

func (r *Report) classifyModule(p *heap.Process, path string) int {
	o := r.opts.Own
	base := filepath.Base(path)
	if o != nil {
		for _, pat := range o.Patterns {
			name := path
			if !strings.Contains(pat, "/") {
				name = base
			}
			if ok, _ := filepath.Match(pat, name); ok {
				return modOwn
			}
		}
	}
	for _, pre := range runtimeLibs {
		if strings.HasPrefix(base, pre) {
			return modRuntime
		}
	}
	if o == nil {
		return modOwn // no way to tell: everything is the user's
	}
	if isMainExe(p, path) && !inDirs(path, systemDirs) {
		return modOwn
	}
	if inDirs(path, o.Dirs) {
		return modOwn
	}
	if o.DebugInfo != nil && o.DebugInfo(path) {
		return modOwn
	}
	return modLibrary
}

// libraryOnly reports whether module path is a library (not own code,
// not the runtime) in every image where it was classified, and the text
// does not list the libraries' leaks in full.
func (r *Report) libraryOnly(path string) bool {
	if r.opts.ShowLibraryLeaks || r.opts.Own == nil {
		return false
	}
	seen := false
	for k, c := range r.ownCache {
		if k.path == path {
			if c != modLibrary {
				return false
			}
			seen = true
		}
	}
	return seen
}

// isMainExe reports whether path is p's executable.
func isMainExe(p *heap.Process, path string) bool {
	if p.Info.Exe != "" && path == p.Info.Exe {
		return true
	}
	return len(p.Modules) > 0 && p.Modules[0].Path == path
}

// inDirs reports whether path lies under one of dirs.
func inDirs(path string, dirs []string) bool {
	for _, d := range dirs {
		d = strings.TrimSuffix(d, "/") + "/"
		if d == "/" {
			continue // run from /: that says nothing of whose code it is
		}
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	return false
}

// attribute says whose a leak allocated at stack rs is: the user's when
// the innermost frame outside the runtime (see runtimeLibs) is own code,
// else that frame's library. during is the function own code called to
// get there (MPI_Init), "" when no own code is on the stack (a library's
// thread). The frames of a run share its address's module, so each run is
// classified once.
func (r *Report) attribute(p *heap.Process, rs []frameRun) (own bool, lib, during string) {
	j := -1
	innermost := ""
	for i, run := range rs {
		c := r.entryClass(p, run.e)
		if innermost == "" && c != modUnknown {
			innermost = run.e.fs[0].Module
		}
		if c == modOwn || c == modLibrary {
			j = i
			break
		}
	}
	if j < 0 {
		// Runtime frames only (the dynamic linker at start-up), or no
		// module known: without a library to blame, an unknown stack
		// stays the user's.
		return innermost == "", innermost, ""
	}
	if r.entryClass(p, rs[j].e) == modOwn {
		return true, "", ""
	}
	lib = rs[j].e.fs[0].Module
	for k := j + 1; k < len(rs); k++ {
		if r.entryClass(p, rs[k].e) == modOwn {
			fs := rs[k-1].e.fs
			f := fs[len(fs)-1]
			during = f.Function
			if during == "" {
				during = filepath.Base(f.Module)
			}
			break
		}
	}
	return false, lib, during
}

// entryClass is moduleClass of e's module, kept with e.
func (r *Report) entryClass(p *heap.Process, e *frameEntry) int {
	if e.class == 0 {
		e.class = uint8(r.moduleClass(p, e.fs[0].Module)) + 1
	}
	return int(e.class) - 1
}

// unreachable returns p's leak groups but the still reachable ones, which
// it keeps aside: most reports never show them, and symbolizing their
// stacks to fold them is most of a report's time.
func (r *Report) unreachable(p *heap.Process) []heap.LeakGroup {
	gs := p.Leaks()
	var out, reach []heap.LeakGroup
	for _, g := range gs {
		if g.Kind == event.Reachable {
			reach = append(reach, g)
		} else {
			out = append(out, g)
		}
	}
	if r.reachable == nil {
		r.reachable = map[*heap.Process][]heap.LeakGroup{}
	}
	r.reachable[p] = reach
	return out
}

// allLeaks is leaks with the still reachable groups, after the others.
func (r *Report) allLeaks(p *heap.Process) []leak {
	ls := r.leaks(p)
	if execd(p) || len(r.reachable[p]) == 0 {
		return ls
	}
	reach, ok := r.allReach[p]
	if !ok {
		reach = r.fold(p, r.reachable[p])
		if r.allReach == nil {
			r.allReach = map[*heap.Process][]leak{}
		}
		r.allReach[p] = reach
	}
	return append(ls[:len(ls):len(ls)], reach...)
}

// foldFrame is what of a frame decides whether two groups fold into one,
// as stackKey compares frames: with a source line, the function, file,
// line and whether inlined; without one, the function, the module's base
// name and whether inlined; unsymbolized, the module's base name and the
// offset.
type foldFrame struct {
	fn, file string
	line     int
	off      uint64
	inlined  bool
	shape    uint8
}

func foldFrameOf(f *Frame) foldFrame {
	switch {
	case f.File != "" && f.Line > 0:
		return foldFrame{fn: f.Function, file: f.File, line: f.Line, inlined: f.Inlined}
	case f.Function != "":
		return foldFrame{fn: f.Function, file: filepath.Base(f.Module), inlined: f.Inlined, shape: 1}
	}
	return foldFrame{file: filepath.Base(f.Module), off: f.Offset, shape: 2}
}

// foldIDs returns e's frames numbered by foldFrame, equal numbers for
// equal foldFrames across the report: a stack's key is then a few bytes
// a frame, not its names (cc1plus: 220,000 frames of 4,200 distinct).
func (r *Report) foldIDs(e *frameEntry) []uint32 {
	if e.fold == nil {
		e.fold = make([]uint32, len(e.fs))
		if r.foldIDOf == nil {
			r.foldIDOf = map[foldFrame]uint32{}
		}
		for i := range e.fs {
			k := foldFrameOf(&e.fs[i])
			id, ok := r.foldIDOf[k]
			if !ok {
				id = uint32(len(r.foldIDOf))
				r.foldIDOf[k] = id
			}
			e.fold[i] = id
		}
	}
	return e.fold
}

// foldKey is what makes two groups one: their kind, allocation function
// and stack as stackKey compares it (a frame without a source line by
// function and module, not by return address), appended to b; n is the
// number of frames shown.
func (r *Report) foldKey(b []byte, p *heap.Process, kind event.LeakKind, fn event.Fn, id heap.StackID) (_ []byte, n int) {
	b = append(b, byte(kind), byte(fn))
	r.walkStack(p, id, func(e *frameEntry, skip int) {
		for _, x := range r.foldIDs(e)[skip:] {
			b = binary.LittleEndian.AppendUint32(b, x)
			n++
		}
	})
	return b, n
}

// fold makes p's leak groups into the report's: groups whose stacks
// differ only in return addresses inside functions without debug
// information become one (a library's 14 copies of one allocation), the
// biggest one's stack standing for all, and each is attributed (own, lib,
// during). The order is heap's: the most important kind, then biggest.
func (r *Report) fold(p *heap.Process, gs []heap.LeakGroup) []leak {
	out := make([]leak, 0, len(gs))
	idx := map[string]int{}
	canon := map[heap.StackID]heap.StackID{} // a definite group's stack -> its group's
	var key []byte
	for _, g := range gs {
		var fn event.Fn
		var allocs uint64
		if s := p.Site(g.Stack); s != nil {
			fn, allocs = s.Fn, s.Allocs
		}
		var n int
		key, n = r.foldKey(key[:0], p, g.Kind, fn, g.Stack)
		if i, ok := idx[string(key)]; ok && n > 0 {
			l := &out[i]
			l.Bytes += g.Bytes
			l.Blocks += g.Blocks
			l.IndirectBytes += g.IndirectBytes
			l.IndirectBlocks += g.IndirectBlocks
			if l.Owner == 0 {
				l.Owner = g.Owner
			}
			l.allocs += allocs
			l.stacks++
			if g.Kind == event.Definite {
				canon[g.Stack] = l.Stack
			}
			continue
		}
		idx[string(key)] = len(out)
		l := leak{LeakGroup: g, fn: fn, allocs: allocs, stacks: 1}
		l.own, l.lib, l.during = r.attribute(p, r.stackRuns(p, g.Stack))
		out = append(out, l)
	}
	for i := range out {
		if c, ok := canon[out[i].Owner]; ok && out[i].Kind == event.Indirect {
			out[i].Owner = c
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Kind != b.Kind {
			return heap.KindMoreImportant(a.Kind, b.Kind)
		}
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		return a.Blocks > b.Blocks
	})
	return out
}

// libSummary is one line of a report's library leaks: the groups
// attributed to one library.
type libSummary struct {
	lib           string
	groups        int
	bytes, blocks uint64
	during        []string // the own code's calls into it, most bytes first
}

// maxDuring bounds the calls a library line names.
const maxDuring = 3

// libItem is one library group as librarySummaries sums it.
type libItem struct {
	lib, during   string
	bytes, blocks uint64 // indirect ones included
}

func libItems(ls []leak) []libItem {
	out := make([]libItem, len(ls))
	for i, l := range ls {
		out[i] = libItem{l.lib, l.during, l.Bytes + l.IndirectBytes, l.Blocks + l.IndirectBlocks}
	}
	return out
}

// librarySummaries sums library groups per library, most bytes first.
func librarySummaries(ls []libItem) []libSummary {
	byLib := map[string]*libSummary{}
	dur := map[string]map[string]uint64{}
	for _, l := range ls {
		s := byLib[l.lib]
		if s == nil {
			s = &libSummary{lib: l.lib}
			byLib[l.lib] = s
			dur[l.lib] = map[string]uint64{}
		}
		s.groups++
		s.bytes += l.bytes
		s.blocks += l.blocks
		if l.during != "" {
			dur[l.lib][l.during] += l.bytes
		}
	}
	out := make([]libSummary, 0, len(byLib))
	for lib, s := range byLib {
		for d := range dur[lib] {
			s.during = append(s.during, d)
		}
		sort.Slice(s.during, func(i, j int) bool {
			a, b := dur[lib][s.during[i]], dur[lib][s.during[j]]
			if a != b {
				return a > b
			}
			return s.during[i] < s.during[j]
		})
		out = append(out, *s)
	}
	sortBiggest(out, func(s libSummary) (uint64, string) { return s.bytes, s.lib })
	return out
}

// text is the summary line's words after the library's name.
func (s libSummary) text() string {
	var b strings.Builder
	b.WriteString(plural(s.groups, "group"))
	b.WriteString(", ")
	b.WriteString(bytes(s.bytes))
	b.WriteString(" in ")
	b.WriteString(plural64(s.blocks, "block"))
	if len(s.during) > 0 {
		b.WriteString(", during ")
		n := min(len(s.during), maxDuring)
		for i, d := range s.during[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(termsafe.String(d)) // the target's names: one line
		}
		if len(s.during) > n {
			b.WriteString(", ...")
		}
	}
	return b.String()
}

// libName names a library in a summary line ("" for a stack with no
// module known).
func libName(path string) string {
	if path == "" {
		return "(unknown module)"
	}
	return termsafe.String(filepath.Base(path))
}
