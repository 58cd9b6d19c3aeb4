package report

import (
	stdbytes "bytes"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/flamegraph"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// update rewrites the golden files from what the code writes now (go test
// ./internal/render/report -update); review the change with git diff.
var update = flag.Bool("update", false, "rewrite testdata/golden from the current output")

// The golden session's modules: the program (own code, with lines), a
// system library without debug information, the C runtime and the agent.
// The paths exist on no machine, so nothing of the host (symbolic links,
// source files) gets into the reports.
const (
	gApp    = "/golden/src/app/app"
	gWidget = "/usr/lib/golden/libwidget.so.1"
	gLibc   = "/golden/lib/libc.so.6"
	gAgent  = "/golden/lib/libleakpath.so"
)

var gBase = map[string]uint64{gApp: 0x400000, gWidget: 0x7f0000000000, gLibc: 0x7f1000000000, gAgent: 0x7f2000000000}

// gAddr is the runtime address of offset off of module mod.
func gAddr(mod string, off uint64) uint64 { return gBase[mod] + off }

// gFunc is what the symbolizer knows of the code at [lo, hi) of a module.
type gFunc struct {
	lo, hi uint64
	frames []SourceFrame
}

// gSymbols are the golden modules' functions; parse_config has read_line
// inlined into it.
var gSymbols = map[string][]gFunc{
	gApp: {
		{0x1000, 0x1100, []SourceFrame{{Function: "main", File: "/golden/src/app/main.c", Line: 40}}},
		{0x1100, 0x1200, []SourceFrame{{Function: "read_line", File: "/golden/src/app/config.c", Line: 30, Inlined: true},
			{Function: "parse_config", File: "/golden/src/app/config.c", Line: 12}}},
		{0x1200, 0x1300, []SourceFrame{{Function: "cache_put", File: "/golden/src/app/cache.c", Line: 55}}},
		{0x1300, 0x1400, []SourceFrame{{Function: "worker_loop", File: "/golden/src/app/worker.c", Line: 20}}},
		{0x1400, 0x1500, []SourceFrame{{Function: "handle_request", File: "/golden/src/app/worker.c", Line: 70}}},
		{0x1500, 0x1600, []SourceFrame{{Function: "release", File: "/golden/src/app/errors.c", Line: 8}}},
		{0x1600, 0x1700, []SourceFrame{{Function: "list::new_node(int)", File: "/golden/src/app/list.cc", Line: 14}}},
	},
	gWidget: {
		{0x100, 0x200, []SourceFrame{{Function: "widget_new"}}},
		{0x200, 0x300, []SourceFrame{{Function: "widget_init"}}},
	},
	gLibc: {
		{0x100, 0x200, []SourceFrame{{Function: "strdup"}}},
		{0x200, 0x300, []SourceFrame{{Function: "__libc_start_main"}}},
		{0x300, 0x400, []SourceFrame{{Function: "start_thread"}}},
	},
	gAgent: {{0, 0x1000, []SourceFrame{{Function: "malloc", File: "/golden/agent/hooks.c", Line: 100, Allocator: true}}}},
}

func gSymbolize(m *heap.Module, off uint64) []SourceFrame {
	for _, f := range gSymbols[m.Path] {
		if off >= f.lo && off < f.hi {
			return f.frames
		}
	}
	return nil
}

// The stacks of the golden session, by agent stack id.
var gStacks = [][]uint64{
	1: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1110), gAddr(gApp, 0x1010), gAddr(gLibc, 0x210)},                          // parse_config
	2: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1210), gAddr(gApp, 0x1410), gAddr(gApp, 0x1310), gAddr(gLibc, 0x310)},     // cache_put, worker
	3: {gAddr(gAgent, 0x10), gAddr(gWidget, 0x110), gAddr(gWidget, 0x210), gAddr(gApp, 0x1020), gAddr(gLibc, 0x210)}, // widget_new
	4: {gAddr(gAgent, 0x10), gAddr(gLibc, 0x110), gAddr(gApp, 0x1620), gAddr(gApp, 0x1030), gAddr(gLibc, 0x210)},     // strdup in new_node
	5: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1510), gAddr(gApp, 0x1040), gAddr(gLibc, 0x210)},                          // release
	6: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1420), gAddr(gApp, 0x1310), gAddr(gLibc, 0x310)},                          // handle_request
	7: {gAddr(gAgent, 0x10), 0x5000, gAddr(gApp, 0x1050), gAddr(gLibc, 0x210)},                                       // JIT code: no module
	8: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1630), gAddr(gApp, 0x1060), gAddr(gLibc, 0x210)},                          // new_node, by new
	9: {gAddr(gAgent, 0x10), gAddr(gApp, 0x1220), gAddr(gApp, 0x1430), gAddr(gApp, 0x1310), gAddr(gLibc, 0x310)},     // cache_put, other line
}

// The golden session's clock: ticks are nanoseconds from 1e6.
const (
	gT0 = 1_000_000
	gMS = 1_000_000 // ticks per millisecond
)

// gAt is the time ms milliseconds after the start.
func gAt(ms float64) uint64 { return gT0 + uint64(ms*gMS) }

// variant is which run goldenSession models.
type variant int

const (
	exited  variant = iota
	grown           // the config leak bigger, the widget leak gone: the B side of the diff
	running         // the main image at a snapshot, before its exit
)

// goldenSession is a run of a small server: its main image (pid 4242)
// parses a config (a definite leak with a root cause, holding an
// indirect one), starts a worker thread that caches (still reachable,
// within a scope "request"), calls a library that leaks (possibly lost),
// frees wrongly three ways, allocates from JIT code, and exits with 1
// after a typed scan and stale epochs; a forked child (pid 4250) leaks
// one block and is killed.
func goldenSession(v variant) *heap.Session {
	clock := &event.ClockInfo{Ticks: gT0, Mono: 5_000_000_000, Real: 1_700_000_000_000_000_000, TicksPerSec: 1e9}
	evs := []event.Event{{Kind: event.ProcessStart, X: &event.Extra{
		Process: &event.ProcessInfo{PID: 4242, PPID: 1, ParentProc: -1, ExecOf: -1, Argv: []string{gApp, "--serve", "8080"}, Exe: gApp},
		Clock:   clock}}}
	for i, path := range []string{gApp, gWidget, gLibc, gAgent} {
		evs = append(evs, event.Event{Kind: event.ModuleLoad, Time: gAt(0), X: &event.Extra{Module: &event.Module{
			ID: uint32(i + 1), Path: path, Bias: gBase[path], BuildID: []byte{0xb0, byte(i), 0x1d},
			Segments: []event.Segment{{Vaddr: 0, Memsz: 0x10000, Flags: 5}}}}})
	}
	for id := 1; id < len(gStacks); id++ {
		evs = append(evs, event.Event{Kind: event.StackDef, Stack: uint32(id), X: &event.Extra{Frames: gStacks[id]}})
	}
	const main, worker = 4242, 4243
	alloc := func(ms float64, tid int32, stack uint32, fn event.Fn, addr, size uint64) event.Event {
		return event.Event{Kind: event.Alloc, Fn: fn, Thread: tid, Stack: stack, Time: gAt(ms), Addr: addr, Size: size}
	}
	free := func(ms float64, tid int32, stack uint32, fn event.Fn, addr uint64) event.Event {
		return event.Event{Kind: event.Free, Fn: fn, Thread: tid, Stack: stack, Time: gAt(ms), Addr: addr}
	}
	config := uint64(4)
	if v == grown {
		config = 6
	}
	evs = append(evs,
		event.Event{Kind: event.ThreadStart, Thread: main, Time: gAt(0), Addr: 0x7000},
		event.Event{Kind: event.ThreadName, Thread: main, Time: gAt(0), X: &event.Extra{Text: "app"}},
		// A temporary block, allocated and freed.
		alloc(1, main, 6, event.Malloc, 0x20000, 4096),
		free(2, main, 5, event.FreeFn, 0x20000),
	)
	// The config: blocks of 64 B, each holding a 24 B string (indirect).
	for i := range config {
		evs = append(evs,
			alloc(3+float64(i), main, 1, event.Malloc, 0x30000+i*0x100, 64),
			alloc(3.5+float64(i), main, 4, event.Malloc, 0x38000+i*0x100, 24))
	}
	// Freed configs: allocated at the same site, so the site allocated
	// more than it leaked.
	evs = append(evs, alloc(9, main, 1, event.Malloc, 0x3f000, 64), free(9.5, main, 5, event.FreeFn, 0x3f000))
	if v != grown {
		evs = append(evs, alloc(10, main, 3, event.Calloc, 0x50000, 1000), alloc(10.5, main, 3, event.Calloc, 0x50400, 1000))
	}
	evs = append(evs,
		// The worker thread, its scope, and the cache it fills (two
		// blocks in the stale watch's pool from 0x10000).
		event.Event{Kind: event.ThreadStart, Thread: worker, Time: gAt(11), Addr: 0x7100},
		event.Event{Kind: event.ThreadName, Thread: worker, Time: gAt(11), X: &event.Extra{Text: "worker-1"}},
		event.Event{Kind: event.ScopeBegin, Thread: worker, Time: gAt(12), Aux: 1, X: &event.Extra{Text: "request"}},
		alloc(13, worker, 2, event.Malloc, 0x10000, 300),
		alloc(14, worker, 6, event.Malloc, 0x21000, 50),
		free(15, worker, 0, event.FreeFn, 0x21000),
		alloc(15.5, worker, 9, event.Malloc, 0x11000, 200),
		event.Event{Kind: event.ScopeEnd, Thread: worker, Time: gAt(16), Aux: 1},
		event.Event{Kind: event.ScopeBegin, Thread: worker, Time: gAt(17), Aux: 1, X: &event.Extra{Text: "request"}},
		alloc(18, worker, 6, event.Malloc, 0x22000, 70),
		free(19, worker, 0, event.FreeFn, 0x22000),
		event.Event{Kind: event.ScopeEnd, Thread: worker, Time: gAt(20), Aux: 1},
		event.Event{Kind: event.ThreadExit, Thread: worker, Time: gAt(21)},
		// Improper uses: a free of an address never allocated, a double
		// free, and a free of a block new allocated.
		free(22, main, 5, event.FreeFn, 0xdead0),
		alloc(23, main, 6, event.Malloc, 0x60000, 16),
		free(24, main, 5, event.FreeFn, 0x60000),
		free(25, main, 5, event.FreeFn, 0x60000),
		alloc(26, main, 8, event.New, 0x61000, 40),
		free(27, main, 5, event.FreeFn, 0x61000),
		// JIT code allocating, and a failed allocation.
		alloc(28, main, 7, event.Malloc, 0x70000, 12),
		alloc(29, main, 6, event.Malloc, 0, 1<<40),
	)
	// Stale epochs: the first block of the cache is touched every epoch,
	// the second never.
	for k := range uint64(12) {
		evs = append(evs, event.Event{Kind: event.StaleEpoch, Time: gAt(30 + float64(k)), X: &event.Extra{Stale: &event.StaleInfo{
			Base: 0x10000, Page: 0x1000, Count: 4, Watched: 4, Referenced: []uint64{1}}}})
	}
	// The scan at exit (at the snapshot), typed.
	scan := &event.ScanInfo{Live: v == running, PauseNs: 2_500_000, RootBytes: 65536, HeapBytes: 4096, Typed: true, TypeNs: 1_000_000,
		Types: []event.TypeDef{{Name: "cfg::Config", File: "/golden/src/app/config.h", Line: 10, Size: 64}, {Name: "char"}},
		Names: []string{"g_cache", "name"}}
	for i := range config {
		scan.Blocks = append(scan.Blocks,
			event.ScannedBlock{Addr: 0x30000 + i*0x100, Size: 64, Kind: event.Definite, Type: 1, Evidence: event.TypeAllocSite, Retained: 88},
			event.ScannedBlock{Addr: 0x38000 + i*0x100, Size: 24, Kind: event.Indirect, Owner: 0x30000 + i*0x100, Type: 2,
				Evidence: event.TypeField, Holder: 0x30000 + i*0x100, Via: 2, Retained: 24})
	}
	if v != grown {
		scan.Blocks = append(scan.Blocks,
			event.ScannedBlock{Addr: 0x50000, Size: 1000, Kind: event.Possible},
			event.ScannedBlock{Addr: 0x50400, Size: 1000, Kind: event.Possible})
	}
	scan.Blocks = append(scan.Blocks,
		event.ScannedBlock{Addr: 0x10000, Size: 300, Kind: event.Reachable, Via: 1, Retained: 300},
		event.ScannedBlock{Addr: 0x11000, Size: 200, Kind: event.Reachable, Via: 1, Retained: 200},
		event.ScannedBlock{Addr: 0x70000, Size: 12, Kind: event.Definite})
	evs = append(evs,
		event.Event{Kind: event.RootCause, Stack: 1, Time: gAt(43), X: &event.Extra{RootCause: &event.RootCauseInfo{
			Status: event.RootCauseFound, Traced: 5, Freed: 1, Leaked: 4,
			Functions: []uint64{gAddr(gApp, 0x1120)},
			Branches:  []event.RootBranch{{Addr: gAddr(gApp, 0x1130), To: gAddr(gApp, 0x1140), LeaksWhenTaken: true}},
			WindowNs:  3_000_000, Stops: 17, FoundAfterNs: 9_000_000}}})
	if v == running {
		evs = append(evs, event.Event{Kind: event.Scan, Time: gAt(45), X: &event.Extra{Scan: scan}})
		s := heap.NewSession()
		s.Apply(evs)
		return s
	}
	evs = append(evs,
		event.Event{Kind: event.Exit, Thread: main, Time: gAt(44), Size: 1, Aux: 1},
		event.Event{Kind: event.Scan, Time: gAt(45), X: &event.Extra{Scan: scan}},
		event.Event{Kind: event.ProcessEnd, Time: gAt(46), X: &event.Extra{Process: &event.ProcessInfo{Exited: true, Code: 1}}},
	)
	// The child, started after the main image ended: it inherits that
	// heap, whose blocks it does not free count as its leaks too.
	evs = append(evs,
		event.Event{Kind: event.ProcessStart, Proc: 1, X: &event.Extra{
			Process: &event.ProcessInfo{Index: 1, PID: 4250, PPID: 4242, ParentProc: 0, ForkID: 1, ExecOf: -1, Argv: []string{gApp, "--serve", "8080"}, Exe: gApp},
			Clock:   clock}},
		// A new region: the child's agent defines its stacks again.
		event.Event{Kind: event.StackDef, Proc: 1, Stack: 1, X: &event.Extra{Frames: gStacks[2]}},
		event.Event{Kind: event.Alloc, Proc: 1, Fn: event.Malloc, Thread: 4250, Stack: 1, Time: gAt(50), Addr: 0x80000, Size: 128},
		event.Event{Kind: event.ProcessEnd, Proc: 1, Time: gAt(60), X: &event.Extra{Process: &event.ProcessInfo{Index: 1, Signal: 15}}},
	)
	s := heap.NewSession()
	s.Apply(evs)
	s.Finish()
	return s
}

// goldenOptions are the options of the golden reports: every fact of the
// run fixed, the source root the program's.
func goldenOptions() Options {
	return Options{Symbolize: gSymbolize, TracePath: "golden.lpt", Elapsed: 2500 * time.Millisecond,
		Warnings: []string{"a warning of the run"}, SourceRoot: "/golden/src", Own: &OwnCode{Dirs: []string{"/golden/src"}}}
}

// checkGolden compares got with testdata/golden/name, or writes it there
// with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	testfixture.Golden(t, filepath.Join("testdata", "golden", name), got, *update)
	if strings.HasSuffix(name, ".json") {
		checkSchema(t, name, got)
	}
}

// generate writes the golden session's report in format, with opts
// changed by edit.
func generate(t *testing.T, v variant, format string, edit func(*Options)) []byte {
	t.Helper()
	opts := goldenOptions()
	if edit != nil {
		edit(&opts)
	}
	var b stdbytes.Buffer
	if err := New(goldenSession(v), 0, opts).Generate(&b, format); err != nil {
		t.Fatalf("%s: %v", format, err)
	}
	return b.Bytes()
}

// TestGolden compares every report format of the golden session with its
// file in testdata/golden: a change of a report shows up there as a diff
// to review, and -update takes it.
func TestGolden(t *testing.T) {
	cases := []struct {
		name   string
		v      variant
		format string
		edit   func(*Options)
	}{
		{"report.txt", exited, "text", nil},
		{"report-all.txt", exited, "text", func(o *Options) { o.ShowReachable, o.ShowLibraryLeaks, o.MaxFrames, o.MaxLeaks = true, true, 3, 2 }},
		{"report.json", exited, "json", nil},
		{"report.sarif", exited, "sarif", nil},
		{"leaked-bytes.collapsed", exited, "collapsed", nil},
		{"allocated-blocks.collapsed", exited, "collapsed", func(o *Options) { o.CollapsedValue = "allocated-blocks" }},
		{"suppressed.txt", exited, "text", suppressWidget(t)},
		{"suppressed.sarif", exited, "sarif", suppressWidget(t)},
		{"snapshot.txt", running, "text", snapshot},
		{"snapshot.json", running, "json", snapshot},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkGolden(t, c.name, generate(t, c.v, c.format, c.edit))
		})
	}
}

// TestPrepareKeepsReport: the golden report prepared ahead (its groups
// folded, the still reachable ones or not; the leaks suppressed) is
// written as the one that was not, with warnings inserted after it where
// WarnAt puts them.
func TestPrepareKeepsReport(t *testing.T) {
	gen := func(prepare func(*Report)) (js, text []byte) {
		opts := goldenOptions()
		suppressWidget(t)(&opts)
		opts.ShowReachable, opts.Warnings = true, []string{"first", "last"}
		r := New(goldenSession(exited), 0, opts)
		prepare(r)
		r.WarnAt(1, "between")
		var j, x stdbytes.Buffer
		if err := r.Generate(&j, "json"); err != nil {
			t.Fatal(err)
		}
		if err := r.Generate(&x, "text"); err != nil {
			t.Fatal(err)
		}
		return j.Bytes(), x.Bytes()
	}
	wantJSON, wantText := gen(func(*Report) {})
	if !strings.Contains(string(wantJSON), `"first",`+"\n"+`    "between",`+"\n"+`    "last"`) ||
		!strings.Contains(string(wantText), "warning: first\nleakpath: warning: between\nleakpath: warning: last\n") {
		t.Fatalf("WarnAt(1) did not put its warning between the others:\n%s", wantText)
	}
	if !strings.Contains(string(wantJSON), `"kind": "reachable"`) || !strings.Contains(string(wantJSON), `"suppressed": "`) {
		t.Fatal("the golden report has no reachable or suppressed leak: Prepare is not exercised")
	}
	for _, all := range []bool{false, true} {
		js, text := gen(func(r *Report) { r.Prepare(all) })
		if !stdbytes.Equal(js, wantJSON) || !stdbytes.Equal(text, wantText) {
			t.Errorf("prepared (all: %v): the report differs", all)
		}
	}
}

// suppressWidget hides the library's leak with a suppression.
func suppressWidget(t *testing.T) func(*Options) {
	set, err := suppress.Parse([]byte("# the widget library's one-time allocations\nleak:widget_new\n"), "golden.supp")
	if err != nil {
		t.Fatal(err)
	}
	return func(o *Options) { o.Suppressions = set }
}

// TestGoldenGenSuppressions compares the suppressions generated for the
// definite leaks (and the child's unclassified ones), in both formats.
func TestGoldenGenSuppressions(t *testing.T) {
	for _, format := range []string{suppress.FormatLSan, suppress.FormatValgrind} {
		var out stdbytes.Buffer
		r := New(goldenSession(exited), 0, goldenOptions())
		if _, _, _, err := r.GenSuppressions(&out, format, []event.LeakKind{event.Definite}, "generated for the golden session"); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "generated."+format+".supp", out.Bytes())
	}
}

// snapshot makes the options those of a snapshot the program asked for.
func snapshot(o *Options) {
	o.Snapshot, o.Label, o.AskedBy, o.Elapsed, o.TracePath = true, "after load", 4242, time.Second, ""
}

// TestGoldenMulti compares the summary of two traces of the golden run
// (MPI ranks 0 and 1), in text and JSON.
func TestGoldenMulti(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		m, err := NewMulti(format)
		if err != nil {
			t.Fatal(err)
		}
		for rank, v := range []variant{exited, grown} {
			opts := goldenOptions()
			opts.TracePath, opts.Rank = fmt.Sprintf("golden.%d.lpt", rank), &rank
			if err := m.Add(New(goldenSession(v), 0, opts)); err != nil {
				t.Fatal(err)
			}
		}
		var out stdbytes.Buffer
		if err := m.Generate(&out); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "multi."+map[string]string{"text": "txt", "json": "json"}[format], out.Bytes())
	}
}

// TestGoldenPprof compares the profile, decoded, as pprof prints it: the
// gzipped bytes depend on the compressor's version.
func TestGoldenPprof(t *testing.T) {
	p, err := profile.Parse(stdbytes.NewReader(generate(t, exited, "pprof", nil)))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.pprof.txt", []byte(p.String()))
}

// TestGoldenFlamegraph compares the flame graph page without its script
// and style, which are files of their own (internal/render/flamegraph).
func TestGoldenFlamegraph(t *testing.T) {
	page := string(generate(t, exited, "flamegraph", nil))
	for _, part := range []struct{ text, name string }{{flamegraph.Script, "flame.js"}, {flamegraph.Style, "flame.css"}} {
		if !strings.Contains(page, part.text) {
			t.Fatalf("the page has no %s inline", part.name)
		}
		page = strings.Replace(page, part.text, "/* "+part.name+" */", 1)
	}
	checkGolden(t, "leaked-bytes.flamegraph.html", []byte(page))
}

// TestGoldenDiff compares the diff of the golden session (A) with its
// grown variant (B), in text and JSON.
func TestGoldenDiff(t *testing.T) {
	a := New(goldenSession(exited), 0, goldenOptions()).Doc("a.json")
	b := New(goldenSession(grown), 0, goldenOptions()).Doc("b.json")
	for _, format := range []string{"text", "json"} {
		var out stdbytes.Buffer
		if err := NewDiff(a, b, DiffOptions{}).Generate(&out, format); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "diff."+map[string]string{"text": "txt", "json": "json"}[format], out.Bytes())
	}
}

// TestGoldenDeterministic: two reports of the same session are the same
// bytes in every format (maps iterate in another order each time).
func TestGoldenDeterministic(t *testing.T) {
	for _, format := range Formats {
		a := generate(t, exited, format, nil)
		for range 3 {
			if b := generate(t, exited, format, nil); !stdbytes.Equal(a, b) {
				t.Errorf("%s: two reports of one session differ:\n%s", format, testfixture.FirstDiff(string(a), string(b)))
				break
			}
		}
	}
}
