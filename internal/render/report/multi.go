package report

import (
	"bufio"
	stdbytes "bytes"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// Multi is the report of several traces, such as one per rank of an MPI
// job: each trace's own report, ordered by rank (traces without one last)
// then by name, then a summary over all of them. Make one with NewMulti,
// Add each trace's Report, then Generate.
//
// The summary sums the totals of every image each trace reports (as each
// trace's last line does), so peak_bytes is the sum of their peaks, and
// merges leak groups and improper uses whose symbolized stacks are equal
// (function, file and line of every frame; module and offset of a frame
// without source lines): addresses differ between processes, code does
// not.
type Multi struct {
	format   string
	parts    []*part
	leaks    map[string]*mergedLeak
	errs     map[string]*mergedError
	totals   heap.Totals
	nerrs    uint64
	command  []string
	sameCmd  bool
	warnings []string
}

// part is one trace, rendered when added.
type part struct {
	name    string
	rank    *int
	summary string // one line: the program and how it ended
	leaked  uint64 // bytes not freed at exit
	blocks  uint64
	text    []byte
	json    *jsonReport
}

type mergedLeak struct {
	kind event.LeakKind
	jsonLeak
	frames []Frame
	fn     event.Fn
	parts  []*part
	seq    int
}

type mergedError struct {
	jsonError
	e            heap.Error // the first one, for its title
	stack, alloc []Frame
	parts        []*part
	seq          int
}

// NewMulti starts a report of several traces in format "text" or "json".
func NewMulti(format string) (*Multi, error) {
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" {
		return nil, fmt.Errorf("report: unknown format %q (want text or json)", format)
	}
	return &Multi{format: format, leaks: map[string]*mergedLeak{}, errs: map[string]*mergedError{}, sameCmd: true}, nil
}

// Warn adds a warning to the summary.
func (m *Multi) Warn(msg string) { m.warnings = append(m.warnings, msg) }

// Add renders the report of one trace, named by its Options.TracePath and
// Options.Rank, and adds it to the summary. Nothing refers to r's model
// afterwards: the caller may drop it before adding the next trace.
func (m *Multi) Add(r *Report) error {
	pt := &part{name: r.opts.TracePath, rank: r.opts.Rank}
	imgs := r.Images()
	if len(imgs) > 0 {
		p := imgs[0]
		pt.summary = fmt.Sprintf("%s %s (pid %d)", termsafe.String(commandName(p)), r.outcome(p), p.Info.PID)
		if len(m.parts) == 0 {
			m.command = p.Info.Argv
		} else if !slices.Equal(m.command, p.Info.Argv) {
			m.sameCmd = false
		}
	} else {
		pt.summary = "recorded nothing"
		m.sameCmd = false
	}
	if m.format == "json" {
		j := r.jsonReport()
		pt.json = &j
	} else {
		var b stdbytes.Buffer
		if err := r.text(&b); err != nil {
			return err
		}
		pt.text = b.Bytes()
	}
	for _, p := range imgs {
		m.addTotals(&p.Totals, !execd(p))
		if !execd(p) {
			pt.leaked += p.Totals.LiveBytes
			pt.blocks += p.Totals.LiveBlocks
			for _, l := range r.allLeaks(p) {
				if !p.LeakCheckOff { // else the program turned the check off (__lsan_is_turned_off)
					m.addLeak(r, p, l, pt)
				}
			}
		}
		for _, e := range p.Errors {
			m.addError(r, p, e, pt)
		}
	}
	m.parts = append(m.parts, pt)
	return nil
}

func (m *Multi) addTotals(t *heap.Totals, leaks bool) {
	s := &m.totals
	for i := range t.Calls {
		s.Calls[i] += t.Calls[i]
	}
	s.Allocations += t.Allocations
	s.Frees += t.Frees
	s.AllocatedBytes += t.AllocatedBytes
	s.FailedAllocs += t.FailedAllocs
	s.PeakBytes += t.PeakBytes
	s.Temporary += t.Temporary
	s.Folded += t.Folded
	s.PendingHighs += t.PendingHighs
	if leaks {
		s.LiveBytes += t.LiveBytes
		s.LiveBlocks += t.LiveBlocks
	}
}

func (m *Multi) addLeak(r *Report, p *heap.Process, g leak, pt *part) {
	frames := r.Stack(p, g.Stack)
	// One group per stack, whatever the kinds: the ranks of a job
	// differ (one killed before its scan is unclassified). The group
	// takes the most important kind seen.
	k := stackKey(frames)
	ml := m.leaks[k]
	if ml == nil {
		ml = &mergedLeak{frames: frames, seq: len(m.leaks), kind: g.Kind}
		ml.Kind, ml.Stack = g.Kind.String(), jsonFrames(frames)
		ml.Own, ml.Library, ml.During = g.own, g.lib, g.during
		m.leaks[k] = ml
	}
	if g.own && !ml.Own {
		// One trace's own code (a rank built differently): the user's.
		ml.Own, ml.Library, ml.During = true, "", ""
	}
	if heap.KindMoreImportant(g.Kind, ml.kind) {
		ml.kind, ml.Kind = g.Kind, g.Kind.String()
	}
	ml.Bytes += g.Bytes
	ml.Blocks += g.Blocks
	if p.Site(g.Stack) != nil {
		ml.Allocs += g.allocs
		if ml.fn == 0 && g.fn != 0 {
			ml.fn = g.fn
			ml.Function = g.fn.String()
		}
	}
	if len(ml.parts) == 0 || ml.parts[len(ml.parts)-1] != pt {
		ml.parts = append(ml.parts, pt)
	}
}

func (m *Multi) addError(r *Report, p *heap.Process, e heap.Error, pt *part) {
	stack, alloc := r.Stack(p, e.Stack), r.Stack(p, e.AllocStack)
	k := fmt.Sprintf("%s|%d|%d|%s|%s", e.Kind, e.Fn, e.AllocFn, stackKey(stack), stackKey(alloc))
	me := m.errs[k]
	if me == nil {
		me = &mergedError{e: e, stack: stack, alloc: alloc, seq: len(m.errs)}
		me.Kind, me.Address, me.Function = e.Kind.String(), fmt.Sprintf("0x%x", e.Addr), e.Fn.String()
		me.Stack, me.AllocStack = jsonFrames(stack), jsonFrames(alloc)
		if e.AllocFn != 0 {
			me.AllocFn = e.AllocFn.String()
		}
		if e.FreeStack != 0 {
			me.FreeStack = jsonFrames(r.Stack(p, e.FreeStack))
		}
		m.errs[k] = me
	}
	me.Count += e.Count
	m.nerrs++
	if len(me.parts) == 0 || me.parts[len(me.parts)-1] != pt {
		me.parts = append(me.parts, pt)
	}
}

// stackKey identifies a symbolized stack across processes.
func stackKey(fs []Frame) string {
	var b strings.Builder
	for _, f := range fs {
		switch {
		case f.File != "" && f.Line > 0:
			fmt.Fprintf(&b, "%s\x00%s\x00%d\x00%t\x01", f.Function, f.File, f.Line, f.Inlined)
		case f.Function != "":
			// No source line: return addresses inside one function are
			// one place to the reader (the text shows only the name).
			fmt.Fprintf(&b, "%s\x00%s\x00%t\x01", f.Function, filepath.Base(f.Module), f.Inlined)
		default:
			fmt.Fprintf(&b, "%s+%x\x01", filepath.Base(f.Module), f.Offset)
		}
	}
	return b.String()
}

func jsonFrames(fs []Frame) []jsonFrame {
	out := make([]jsonFrame, 0, len(fs))
	for _, f := range fs {
		out = append(out, jsonFrame{
			Address: hexAddr(f.Address), Module: f.Module, Offset: hexAddr(f.Offset),
			Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined,
		})
	}
	return out
}

// order sorts the parts by rank, then name, and the merged groups biggest
// first.
func (m *Multi) order() ([]*mergedLeak, []*mergedError) {
	sort.SliceStable(m.parts, func(i, j int) bool {
		a, b := m.parts[i], m.parts[j]
		if (a.rank == nil) != (b.rank == nil) {
			return a.rank != nil
		}
		if a.rank != nil && *a.rank != *b.rank {
			return *a.rank < *b.rank
		}
		return a.name < b.name
	})
	pos := map[*part]int{}
	for i, pt := range m.parts {
		pos[pt] = i
	}
	byPos := func(ps []*part) {
		sort.Slice(ps, func(i, j int) bool { return pos[ps[i]] < pos[ps[j]] })
	}
	leaks := make([]*mergedLeak, 0, len(m.leaks))
	for _, ml := range m.leaks {
		byPos(ml.parts)
		ml.TraceCount, ml.Ranks = len(ml.parts), ranksOf(ml.parts)
		leaks = append(leaks, ml)
	}
	sort.Slice(leaks, func(i, j int) bool {
		a, b := leaks[i], leaks[j]
		if a.Bytes != b.Bytes {
			return a.Bytes > b.Bytes
		}
		if a.Blocks != b.Blocks {
			return a.Blocks > b.Blocks
		}
		return a.seq < b.seq
	})
	errs := make([]*mergedError, 0, len(m.errs))
	for _, me := range m.errs {
		byPos(me.parts)
		me.TraceCount, me.Ranks = len(me.parts), ranksOf(me.parts)
		errs = append(errs, me)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].seq < errs[j].seq })
	return leaks, errs
}

func ranksOf(ps []*part) []int {
	var out []int
	for _, pt := range ps {
		if pt.rank != nil {
			out = append(out, *pt.rank)
		}
	}
	return out
}

// Generate writes every trace's report, then the summary.
func (m *Multi) Generate(w io.Writer) error {
	leaks, errs := m.order()
	if m.format == "json" {
		return m.json(w, leaks, errs)
	}
	return m.text(w, leaks, errs)
}

// jsonMulti is the JSON of several traces: the summed top-level fields of
// leakpath.report/v1, and each trace's report in "traces".
type jsonMulti struct {
	Schema   string        `json:"schema"`
	Command  []string      `json:"command,omitempty"` // when every trace ran the same command
	Totals   jsonTotals    `json:"totals"`
	Leaks    []jsonLeak    `json:"leaks"`
	Errors   []jsonError   `json:"errors"`
	Traces   []*jsonReport `json:"traces"`
	Warnings []string      `json:"warnings,omitempty"`
}

func (m *Multi) json(w io.Writer, leaks []*mergedLeak, errs []*mergedError) error {
	t := &m.totals
	out := jsonMulti{Schema: Schema,
		Totals: jsonTotals{
			Calls: map[string]uint64{}, Allocations: t.Allocations, Frees: t.Frees,
			AllocatedBytes: t.AllocatedBytes, PeakBytes: t.PeakBytes,
			LeakedBytes: t.LiveBytes, LeakedBlocks: t.LiveBlocks,
			TemporaryAllocations: t.Temporary, FailedAllocations: t.FailedAllocs,
		},
		Leaks: []jsonLeak{}, Errors: []jsonError{}, Traces: []*jsonReport{}, Warnings: m.warnings,
	}
	if m.sameCmd {
		out.Command = m.command
	}
	for fn := event.Fn(1); fn < event.NumFn; fn++ {
		if fn == event.ReallocArray && t.Calls[fn] == 0 {
			continue
		}
		out.Totals.Calls[event.FnNames[fn]] = t.Calls[fn]
	}
	for _, ml := range leaks {
		out.Leaks = append(out.Leaks, ml.jsonLeak)
	}
	for _, me := range errs {
		out.Errors = append(out.Errors, me.jsonError)
	}
	for _, pt := range m.parts {
		out.Traces = append(out.Traces, pt.json)
	}
	return writeJSON(w, out)
}

const multiMaxLeaks, multiMaxFrames = 25, 24

func (m *Multi) text(out io.Writer, leaks []*mergedLeak, errs []*mergedError) error {
	return termsafe.Filter(out, func(w io.Writer) error { return m.writeText(w, leaks, errs) })
}

func (m *Multi) writeText(out io.Writer, leaks []*mergedLeak, errs []*mergedError) error {
	w := bufio.NewWriter(out)
	for _, pt := range m.parts {
		fmt.Fprintf(w, "==== %s\n", pt.title())
		w.Write(pt.text)
		fmt.Fprintln(w)
	}
	all := ranksOf(m.parts)
	fmt.Fprintf(w, "==== summary of %s", plural(len(m.parts), "trace"))
	if len(all) > 0 {
		fmt.Fprintf(w, " (%s %s)", pluralWord(len(all), "rank"), rankList(all))
	}
	fmt.Fprintln(w)
	for _, pt := range m.parts {
		if pt.rank != nil {
			fmt.Fprintf(w, "  rank %d: ", *pt.rank)
		} else {
			fmt.Fprint(w, "  ")
		}
		fmt.Fprintf(w, "%s; %s (%s) not freed", pt.summary, plural64(pt.blocks, "block"), bytes(pt.leaked))
		if pt.name != "" {
			fmt.Fprintf(w, " [%s]", pt.name)
		}
		fmt.Fprintln(w)
	}
	t := &m.totals
	fmt.Fprintf(w, "  in all: %s (%s), %s, %s temporary;\n", plural64(t.Allocations, "allocation"), bytes(t.AllocatedBytes),
		plural64(t.Frees, "free"), count(t.Temporary))
	fmt.Fprintf(w, "  %s (%s) not freed at exit; %s\n", plural64(t.LiveBlocks, "block"), bytes(t.LiveBytes), plural64(m.nerrs, "improper use"))
	if calls := fnCalls(t); len(calls) > 0 {
		fmt.Fprintf(w, "  calls: %s\n", strings.Join(calls, ", "))
	}
	if t.FailedAllocs > 0 {
		fmt.Fprintf(w, "  %s failed\n", plural64(t.FailedAllocs, "allocation"))
	}
	var own, libs []*mergedLeak
	for _, ml := range leaks {
		if ml.Own {
			own = append(own, ml)
		} else {
			libs = append(libs, ml)
		}
	}
	for i, ml := range own {
		if i >= multiMaxLeaks {
			var rest uint64
			for _, h := range own[i:] {
				rest += h.Bytes
			}
			fmt.Fprintf(w, "\n... %s more (%s); see --format json for all\n", plural(len(leaks)-i, "leak group"), bytes(rest))
			break
		}
		fmt.Fprintf(w, "\nLEAK %s in %s", bytes(ml.Bytes), plural64(ml.Blocks, "block"))
		if ml.fn != 0 {
			fmt.Fprintf(w, " from %s", ml.fn)
		}
		fmt.Fprintf(w, ", %s\n", where(ml.parts))
		textFrames(w, ml.frames)
	}
	if len(libs) > 0 {
		// Every trace's report lists them in full with --show-library-leaks.
		fmt.Fprintln(w, "\nLIBRARY LEAKS, not in your code (all traces):")
		items := make([]libItem, len(libs))
		for i, ml := range libs {
			items[i] = libItem{ml.Library, ml.During, ml.Bytes + ml.IndirectBytes, ml.Blocks + ml.IndirectBlocks}
		}
		for _, s := range librarySummaries(items) {
			fmt.Fprintf(w, "  %s: %s\n", libName(s.lib), s.text())
		}
	}
	for _, me := range errs {
		fmt.Fprintf(w, "\n%s", errorTitle(me.e))
		if me.Count > 1 {
			fmt.Fprintf(w, " (%s times)", count(me.Count))
		}
		fmt.Fprintf(w, ", %s\n", where(me.parts))
		if len(me.stack) == 0 {
			fmt.Fprintln(w, noStack(me.e))
		} else {
			textFrames(w, me.stack)
		}
		if len(me.alloc) > 0 {
			fmt.Fprintf(w, "  allocated by %s at:\n", me.e.AllocFn)
			textFrames(w, me.alloc)
		}
	}
	if len(leaks) > 0 || len(errs) > 0 {
		fmt.Fprintln(w)
	}
	for _, warn := range m.warnings {
		fmt.Fprintf(w, "leakpath: warning: %s\n", warn)
	}
	fmt.Fprintf(w, "leakpath: %s: %s (%s) not freed", plural(len(m.parts), "trace"), plural(len(leaks), "leak group"), bytes(t.LiveBytes))
	if len(libs) > 0 {
		fmt.Fprintf(w, ", %s in your code", count(len(own)))
	}
	fmt.Fprintf(w, "; %s.\n", plural64(m.nerrs, "improper use"))
	return w.Flush()
}

func (pt *part) title() string {
	switch {
	case pt.rank != nil && pt.name != "":
		return fmt.Sprintf("rank %d: %s", *pt.rank, pt.name)
	case pt.rank != nil:
		return fmt.Sprintf("rank %d", *pt.rank)
	}
	return pt.name
}

// where says in which traces a merged group was: "in rank 2", "in 4
// ranks (0-3)", "in 3 traces (ranks 0, 2)".
func where(ps []*part) string {
	ranks := ranksOf(ps)
	switch {
	case len(ranks) == 1 && len(ps) == 1:
		return fmt.Sprintf("in rank %d", ranks[0])
	case len(ranks) == len(ps):
		return fmt.Sprintf("in %s (%s)", plural(len(ps), "rank"), rankList(ranks))
	case len(ranks) > 0:
		return fmt.Sprintf("in %s (%s %s)", plural(len(ps), "trace"), pluralWord(len(ranks), "rank"), rankList(ranks))
	}
	return "in " + plural(len(ps), "trace")
}

func pluralWord(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}

// rankList writes sorted ranks with runs as ranges: "0-3, 5, 7-8".
func rankList(ranks []int) string {
	rs := append([]int(nil), ranks...)
	sort.Ints(rs)
	var parts []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] <= rs[j]+1 {
			j++
		}
		if rs[j] == rs[i] {
			parts = append(parts, strconv.Itoa(rs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

func textFrames(w *bufio.Writer, fs []Frame) {
	if len(fs) == 0 {
		fmt.Fprintln(w, "  (no stack)")
		return
	}
	for i, f := range fs {
		if i >= multiMaxFrames {
			fmt.Fprintf(w, "  ... %d more frames\n", len(fs)-i)
			break
		}
		fmt.Fprintf(w, "  #%-2d %s\n", i, textFrame(f))
	}
}
