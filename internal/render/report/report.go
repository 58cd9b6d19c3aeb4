// Package report turns the heap model into what users read: the text
// report at exit and the leakpath.report/v1 JSON (docs/json.md). Build one
// with New, then Generate it in a format.
package report

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/frame"
)

// SourceFrame is what a symbolizer knows of an address: one entry per
// inlining level, innermost first.
type SourceFrame struct {
	Function string
	File     string
	Line     int
	Inlined  bool
	// Allocator marks the allocator's own frames (operator new, malloc
	// internals), which a stack does not show at its top.
	Allocator bool
}

// Symbolizer resolves a module-relative address (already adjusted to
// point into the call instruction) of module m. nil frames: unknown.
type Symbolizer func(m *heap.Module, addr uint64) []SourceFrame

// SymbolNamer returns the symbol-table (mangled) name of the function at a
// module-relative address of module m, as Symbolizer takes it; "":
// unknown.
type SymbolNamer func(m *heap.Module, addr uint64) string

// Options shape a report.
type Options struct {
	Symbolize Symbolizer // nil: addresses and modules only
	// SymbolName gives the mangled names valgrind suppressions match
	// (nil: they match the names Symbolize gives).
	SymbolName SymbolNamer
	MaxFrames  int // frames shown per stack; default 24
	MaxLeaks   int // leak groups shown in text; default 25 (JSON has all)
	// Facts about the run the model does not hold.
	TracePath   string
	Elapsed     time.Duration
	TicksPerSec float64
	Warnings    []string
	// Rank is the MPI rank of the run (shown in the header); nil: none.
	Rank *int
	// Suppressions hide matching leaks (LSan syntax); nil: only the
	// program's own and LSan's standard ones.
	Suppressions *suppress.Set
	// ShowReachable lists the still reachable groups in text too.
	ShowReachable bool
	// Snapshot: the report is of the main image while it runs (a
	// snapshot); Elapsed is then its age. Other images are left out.
	Snapshot bool
	// Of a snapshot the program asked for itself: its label
	// (leakpath_snapshot), or LeakCheck (leakpath_leak_check), and the
	// thread that asked.
	Label     string
	LeakCheck bool
	AskedBy   int
	// CollapsedValue is what the collapsed and flamegraph formats count
	// per stack, one of CollapsedValues; "": leaked-bytes.
	CollapsedValue string
	// StaleT1 and StaleT2 are the thresholds of the stale watch in
	// epochs (0: DefaultStaleT1, DefaultStaleT2): blocks untouched for
	// more than T1 are in area B, for T2 or more stale.
	StaleT1, StaleT2 uint32
	// SourceRoot is the directory SARIF paths are relative to (as
	// %SRCROOT%); "": the current directory.
	SourceRoot string
	// Own tells the user's code from libraries (own.go); nil: every
	// leak is the user's.
	Own *OwnCode
	// ShowLibraryLeaks lists the leaks of libraries in text in full, not
	// one line per library.
	ShowLibraryLeaks bool
	// CheckOwnOnly: Failing counts the user's own leaks only.
	CheckOwnOnly bool
	// PathToRoot names a type (qualified, or its last part) whose
	// largest instance's path to root a typed scan's report shows.
	PathToRoot string
}

// Report is a report being generated.
type Report struct {
	s         *heap.Session
	main      int32
	opts      Options
	cache     map[*heap.Process]*frameCache
	warnings  []string
	noLines   map[string]bool // modules of shown frames: true while none had a source line
	supp      *suppress.Set
	leakCache map[*heap.Process][]leak
	ownCache  map[ownKey]int
	// reachable: p's still reachable groups, as the model has them;
	// folded into allReach only when a format lists them.
	reachable map[*heap.Process][]heap.LeakGroup
	allReach  map[*heap.Process][]leak
	mangled   map[frameKey]string // symbolName's answers
	// allocCache: the allocators of each image (Allocators).
	allocCache map[*heap.Process][]Allocator
	// moduleFiles are moduleFile's answers, by module path.
	moduleFiles map[string]string
	// foldIDOf numbers the frames as fold compares them (foldIDs).
	foldIDOf map[foldFrame]uint32
}

// Warn adds a warning to the report (the symbolizer's, which arrive while
// the report is being generated).
func (r *Report) Warn(msg string) { r.warnings = append(r.warnings, msg) }

// WarnAt inserts warnings before the report's i-th: those of a caller
// known only once the report has been made (and prepared).
func (r *Report) WarnAt(i int, msgs ...string) {
	r.warnings = slices.Insert(r.warnings, min(max(i, 0), len(r.warnings)), msgs...)
}

// Prepare folds the leak groups of every image now, the still reachable
// ones too with all (only JSON lists them), so that a caller can have it
// done while it waits on something else; the formats then find them.
func (r *Report) Prepare(all bool) {
	for _, p := range r.Images() {
		if all {
			r.allLeaks(p)
		} else {
			r.leaks(p)
		}
	}
}

// frameEntry is an address's frames, and as JSON once asked for.
type frameEntry struct {
	fs   []Frame
	js   []jsonFrame
	fold []uint32 // foldIDs'
	// class: entryClass's answer plus one (0: not asked yet).
	class uint8
}

type frameKey struct {
	mod  int32
	proc *heap.Process
	addr uint64
}

// New prepares a report of session s whose main image is main (-1: none).
func New(s *heap.Session, main int32, opts Options) *Report {
	if opts.MaxFrames == 0 {
		opts.MaxFrames = 24
	}
	if opts.MaxLeaks == 0 {
		opts.MaxLeaks = 25
	}
	return &Report{s: s, main: main, opts: opts, cache: map[*heap.Process]*frameCache{},
		warnings: append([]string(nil), opts.Warnings...), noLines: map[string]bool{}}
}

// Formats are the formats Generate knows; the first is the default.
var Formats = []string{"text", "json", "pprof", "collapsed", "flamegraph", "sarif"}

// Generate writes the report in one of Formats: "text" (or ""), "json",
// "pprof" (a gzipped profile.proto), "collapsed" (folded stacks),
// "flamegraph" (an interactive HTML page) or "sarif" (SARIF 2.1.0).
func (r *Report) Generate(w io.Writer, format string) error {
	switch format {
	case "text", "":
		return r.text(w)
	case "json":
		return r.json(w)
	case "pprof":
		return r.pprof(w)
	case "collapsed":
		return r.collapsed(w)
	case "flamegraph":
		return r.flamegraph(w)
	case "sarif":
		return r.sarif(w)
	}
	return fmt.Errorf("report: unknown format %q (want %s)", format, strings.Join(Formats, ", "))
}

// Images returns the images worth reporting: the main one first, then every
// other that recorded anything, in order.
func (r *Report) Images() []*heap.Process {
	var out []*heap.Process
	if p := r.mainProc(); p != nil {
		out = append(out, p)
	}
	if r.opts.Snapshot {
		return out
	}
	for i, p := range r.s.Procs {
		if p == nil || int32(i) == r.main {
			continue
		}
		if p.Totals.Allocations == 0 && p.Totals.Frees == 0 && p.Totals.LiveBlocks == 0 {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (r *Report) mainProc() *heap.Process {
	if r.main < 0 {
		return nil
	}
	return r.s.Process(uint32(r.main))
}

// Frame is one shown frame of a stack (in package frame, which the usage
// tables share without the report).
type Frame = frame.Frame

// Stack resolves stack id of p into frames, allocator frames at the top
// dropped (the first frame shown calls the allocation function).
func (r *Report) Stack(p *heap.Process, id heap.StackID) []Frame {
	out := make([]Frame, 0, len(p.Stacks.Frames(id))+4)
	r.walkStack(p, id, func(e *frameEntry, skip int) {
		out = append(out, e.fs[skip:]...)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// walkStack calls f with each address of stack id of p that Stack shows:
// its frames (r.frame's), of which the first skip are not shown.
func (r *Report) walkStack(p *heap.Process, id heap.StackID, f func(e *frameEntry, skip int)) {
	for _, run := range r.stackRuns(p, id) {
		f(run.e, run.skip)
	}
}

// frameRun is the frames of one address of a stack: e's frames from skip
// on.
type frameRun struct {
	e    *frameEntry
	skip int
}

// stackRuns resolves stack id of p into runs of the frame cache, once: a
// report walks a stack to fold its group, to attribute it and to write
// it, and a lookup of each address in the frame cache cost more than the
// rest of a walk.
func (r *Report) stackRuns(p *heap.Process, id heap.StackID) []frameRun {
	cache := r.framesOf(p)
	if rs, ok := cache.runs[id]; ok {
		return rs
	}
	frames := p.Stacks.Frames(id)
	mods := p.Stacks.Modules(id)
	out := cache.newRuns(len(frames))
	top := true
	for i, a := range frames {
		e := cache.entry(r, p, mods[i], a)
		fs := e.fs
		if top && isAllocator(fs) {
			continue
		}
		skip := 0
		if top {
			// An allocation function inlined into its caller (ld.so's
			// malloc wrappers) is no frame of the program's either.
			for len(fs)-skip > 1 && fs[skip].Inlined && (fs[skip].Allocator || inlineAllocators[fs[skip].Function]) {
				skip++
			}
		}
		top = false
		out = append(out, frameRun{e, skip})
	}
	if cache.runs == nil {
		cache.runs = map[heap.StackID][]frameRun{}
	}
	cache.runs[id] = out
	return out
}

// newRuns returns an empty slice with room for n runs, cut from a larger
// one: a report of thousands of stacks made as many small allocations.
func (c *frameCache) newRuns(n int) []frameRun {
	if cap(c.slab)-len(c.slab) < n {
		c.slab = make([]frameRun, 0, max(n, 4096))
	}
	l := len(c.slab)
	c.slab = c.slab[:l+n]
	return c.slab[l : l : l+n]
}

// inlineAllocators are glibc's inline wrappers of the allocator (in
// include/rtld-malloc.h, inlined into the dynamic loader).
var inlineAllocators = map[string]bool{"malloc": true, "calloc": true, "realloc": true, "free": true}

func (r *Report) frame(p *heap.Process, mod int32, addr uint64) []Frame {
	return r.frameEntry(p, mod, addr).fs
}

// frameCache is the frame entries of one process, by module (its index
// plus one; 0: none) and address: integer keys, which Go's maps hash
// fastest, for the 100,000s of frames of a large report; and its stacks
// walked, as runs of those entries (stackRuns).
type frameCache struct {
	mods []map[uint64]*frameEntry
	runs map[heap.StackID][]frameRun
	slab []frameRun // newRuns'
}

func (r *Report) frameEntry(p *heap.Process, mod int32, addr uint64) *frameEntry {
	return r.framesOf(p).entry(r, p, mod, addr)
}

func (r *Report) framesOf(p *heap.Process) *frameCache {
	c := r.cache[p]
	if c == nil {
		c = &frameCache{}
		r.cache[p] = c
	}
	return c
}

func (c *frameCache) entry(r *Report, p *heap.Process, mod int32, addr uint64) *frameEntry {
	i := 0
	if mod >= 0 && int(mod) < len(p.Modules) {
		i = int(mod) + 1
	}
	if i >= len(c.mods) {
		c.mods = append(c.mods, make([]map[uint64]*frameEntry, i+1-len(c.mods))...)
	}
	m := c.mods[i]
	if e, ok := m[addr]; ok {
		return e
	}
	if m == nil {
		m = map[uint64]*frameEntry{}
		c.mods[i] = m
	}
	e := r.resolve(p, mod, addr)
	m[addr] = e
	return e
}

// resolve symbolizes addr of module mod of p.
func (r *Report) resolve(p *heap.Process, mod int32, addr uint64) *frameEntry {
	f := Frame{Address: addr, ModIndex: -1}
	var fs []Frame
	if mod >= 0 && int(mod) < len(p.Modules) {
		m := p.Modules[mod]
		f.Module, f.ModIndex = m.Path, mod
		f.Offset = addr - m.Bias
		if r.opts.Symbolize != nil {
			for _, sf := range r.opts.Symbolize(m, f.Offset-1) {
				g := f
				g.Function, g.File, g.Line, g.Inlined, g.Allocator = sf.Function, sf.File, sf.Line, sf.Inlined, sf.Allocator
				fs = append(fs, g)
			}
		}
	}
	if len(fs) == 0 {
		fs = []Frame{f}
	}
	if r.opts.Symbolize != nil && f.Module != "" && strings.HasPrefix(f.Module, "/") {
		// A module has no debug information when none of its frames has
		// a line (_start, from the C runtime's crt1.o, never has one).
		lines := fs[len(fs)-1].File != ""
		if had, seen := r.noLines[f.Module]; !seen || had {
			r.noLines[f.Module] = !lines
		}
	}
	return &frameEntry{fs: fs}
}

// linesNote says which modules of the shown stacks had no source lines.
// The text leaves out the libraries whose leaks it sums up in a line
// (their frames are not shown); the JSON, which has every stack, keeps
// them.
func (r *Report) linesNote() string { return r.linesNoteFor(false) }

func (r *Report) linesNoteFor(text bool) string {
	if len(r.noLines) == 0 {
		return ""
	}
	var mods []string
	for m, none := range r.noLines {
		if text && r.libraryOnly(m) {
			continue // its leaks are summed up in a line: no frames shown
		}
		if none && !strings.HasPrefix(filepath.Base(m), "libleakpath") {
			mods = append(mods, filepath.Base(m))
		}
	}
	if len(mods) == 0 {
		return ""
	}
	sort.Strings(mods)
	its, them := "its", "its -dbgsym package"
	if len(mods) > 1 {
		its, them = "their", "their -dbgsym packages"
	}
	return fmt.Sprintf("no debug information for %s: %s frames show function names only (install %s, or pass --debug-dir)",
		strings.Join(mods, ", "), its, them)
}

// isAllocator reports frames of the allocator itself, by what the
// symbolizer said, or, unsymbolized, the agent's own module.
func isAllocator(fs []Frame) bool {
	if len(fs) == 0 {
		return false
	}
	f := fs[len(fs)-1]
	return f.Allocator || strings.HasPrefix(filepath.Base(f.Module), "libleakpath")
}

// Seconds converts ticks of p's clock since it started into seconds.
func (r *Report) seconds(p *heap.Process, ticks uint64) float64 {
	tps := r.opts.TicksPerSec
	if tps <= 0 {
		tps = p.Clock.TicksPerSec
	}
	if tps <= 0 || ticks < p.Clock.Ticks {
		return 0
	}
	return float64(ticks-p.Clock.Ticks) / tps
}

// totals returns p's totals; a snapshot's count the blocks its threads
// held pending.
func (r *Report) totals(p *heap.Process) *heap.Totals {
	if r.opts.Snapshot {
		t := p.SnapshotTotals()
		return &t
	}
	return &p.Totals
}

// execd reports whether image p ended by exec: its heap was discarded,
// so what it did not free is not a leak.
func execd(p *heap.Process) bool { return p.End != nil && p.End.ExecdOut }

// LeakedBlocks counts the blocks not freed at exit in every image that
// exited (an image replaced by exec leaks nothing).
func (r *Report) LeakedBlocks() uint64 {
	var n uint64
	for _, p := range r.Images() {
		if !execd(p) {
			n += r.totals(p).LiveBlocks
		}
	}
	return n
}

// outcome describes how image p ended, in words.
func (r *Report) outcome(p *heap.Process) string {
	e := p.End
	switch {
	case e == nil && r.opts.Snapshot:
		return "is running"
	case e == nil:
		return "was still running"
	case e.Detached:
		return "was detached from (it runs on)"
	case e.ExecdOut:
		for _, q := range r.s.Procs {
			if q != nil && q.Info.ExecOf == int32(p.Info.Index) {
				return "exec'd " + commandName(q)
			}
		}
		return "exec'd another program"
	case e.Exited:
		return fmt.Sprintf("exited with code %d", e.Code)
	case e.Signal != 0:
		return fmt.Sprintf("was killed by %s", signalName(e.Signal))
	case p.ExitStatus != nil:
		return fmt.Sprintf("exited with code %d", *p.ExitStatus)
	}
	return "ended"
}

func commandName(p *heap.Process) string {
	if len(p.Info.Argv) > 0 && p.Info.Argv[0] != "" {
		return p.Info.Argv[0]
	}
	if p.Info.Exe != "" {
		return p.Info.Exe
	}
	return fmt.Sprintf("pid %d", p.Info.PID)
}

func fnCalls(t *heap.Totals) []string {
	var out []string
	for fn := event.Fn(1); fn < event.NumFn; fn++ {
		if n := t.Calls[fn]; n > 0 {
			out = append(out, fmt.Sprintf("%s %s", event.FnNames[fn], count(n)))
		}
	}
	return out
}
