package usagetable

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/usage"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// A synthetic program: an executable calling liba and libb and the C
// library, the agent at the top of every stack. Functions lie at 0x1000
// steps in their modules; a frame's return address is 0x10 into its
// function.

type fn struct{ mod, name string }

var modules = []struct {
	path string
	bias uint64
	fns  []string
}{
	{"/bin/app", 0x400000, []string{"_start", "main", "helper"}},
	{"/lib/liba.so", 0x7000000000, []string{"liba_work", "liba_thread"}},
	{"/lib/libb.so", 0x7100000000, []string{"libb_alloc", "libb_dup"}},
	{"/lib/libc.so.6", 0x7200000000, []string{"__libc_start_main", "strdup", "start_thread", "clone3"}},
	{"/lib/libleakpath.so", 0x7300000000, []string{"malloc", "free"}},
}

func addrOf(f fn) uint64 {
	for _, m := range modules {
		if m.path != f.mod {
			continue
		}
		for i, name := range m.fns {
			if name == f.name {
				return m.bias + uint64(i+1)*0x1000 + 0x10
			}
		}
	}
	panic("no function " + f.mod + " " + f.name)
}

func symbolize(m *heap.Module, addr uint64) []report.SourceFrame {
	for _, mod := range modules {
		if mod.path == m.Path {
			i := int(addr/0x1000) - 1
			if i >= 0 && i < len(mod.fns) {
				return []report.SourceFrame{{Function: mod.fns[i]}}
			}
		}
	}
	return nil
}

var (
	exe, liba, libb, libc, agent = "/bin/app", "/lib/liba.so", "/lib/libb.so", "/lib/libc.so.6", "/lib/libleakpath.so"
	mainTail                     = []fn{{libc, "__libc_start_main"}, {exe, "_start"}}
	threadTail                   = []fn{{libc, "start_thread"}, {libc, "clone3"}}
	// The stacks, innermost first.
	stacks = map[uint32][]fn{
		1: append([]fn{{agent, "malloc"}, {exe, "main"}}, mainTail...),
		2: append([]fn{{agent, "malloc"}, {libb, "libb_alloc"}, {liba, "liba_work"}, {exe, "main"}}, mainTail...),
		3: append([]fn{{agent, "malloc"}, {libc, "strdup"}, {libb, "libb_dup"}, {exe, "helper"}, {exe, "main"}}, mainTail...),
		4: append([]fn{{agent, "malloc"}, {libb, "libb_alloc"}, {liba, "liba_thread"}}, threadTail...),
		5: append([]fn{{agent, "free"}, {exe, "main"}}, mainTail...),
	}
)

const t0 = 1000 // ticks (ns) at the process start

func setup() []event.Event {
	evs := []event.Event{{Kind: event.ProcessStart, Time: t0, X: &event.Extra{
		Process: &event.ProcessInfo{PID: 42, ParentProc: -1, ExecOf: -1, Argv: []string{"app"}, Exe: exe},
		Clock:   &event.ClockInfo{Ticks: t0, TicksPerSec: 1e9}}}}
	for i, m := range modules {
		evs = append(evs, event.Event{Kind: event.ModuleLoad, Time: t0, X: &event.Extra{Module: &event.Module{
			ID: uint32(i + 1), Path: m.path, Bias: m.bias, Segments: []event.Segment{{Vaddr: 0, Memsz: 0x100000, Flags: 5}}}}})
	}
	for id := uint32(1); id <= uint32(len(stacks)); id++ {
		var frames []uint64
		for _, f := range stacks[id] {
			frames = append(frames, addrOf(f))
		}
		evs = append(evs, event.Event{Kind: event.StackDef, Stack: id, X: &event.Extra{Frames: frames}})
	}
	return evs
}

func threadName(t uint64, tid int32, name string) event.Event {
	return event.Event{Kind: event.ThreadName, Time: t, Thread: tid, X: &event.Extra{Text: name}}
}

// program: the synthetic run. Thread 1 (main) allocates 100 at stack 1,
// 200 at 2, 300 at 3; thread 2 (worker) 400 at 4; thread 2 frees the 200;
// thread 1 reallocs the 400 to 1000 at stack 1; thread 2 folds 5 pairs of
// 10 bytes at stack 3; a malloc at stack 2 fails; a free at stack 5 frees
// an address never allocated; the 100 is freed.
func program() []event.Event {
	return append(setup(),
		event.Event{Kind: event.ThreadStart, Time: t0, Thread: 1, Addr: 0xa},
		threadName(t0, 1, "main"),
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 2000, Thread: 1, Stack: 1, Addr: 0x1000, Size: 100},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 3000, Thread: 1, Stack: 2, Addr: 0x2000, Size: 200},
		event.Event{Kind: event.Alloc, Fn: event.Calloc, Time: 4000, Thread: 1, Stack: 3, Addr: 0x3000, Size: 300},
		event.Event{Kind: event.ThreadStart, Time: 5000, Thread: 2, Addr: 0xb},
		threadName(5000, 2, "worker"),
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 6000, Thread: 2, Stack: 4, Addr: 0x4000, Size: 400},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Time: 7000, Thread: 2, Stack: 5, Addr: 0x2000},
		event.Event{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: 8000, Thread: 1, Addr: 0x4000},
		event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Time: 8000, Thread: 1, Stack: 1, Addr: 0x4000, Addr2: 0x5000, Size: 1000},
		event.Event{Kind: event.Agg, Fn: event.Malloc, Time: 9000, Thread: 2, Stack: 3, Addr: 5, Size: 50, Aux: uint64(event.FreeFn)<<32 | 5},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 10000, Thread: 1, Stack: 2, Addr: 0, Size: 1 << 40},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Time: 11000, Thread: 1, Stack: 5, Addr: 0xdead},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Time: 12000, Thread: 1, Stack: 5, Addr: 0x1000},
		event.Event{Kind: event.ThreadExit, Time: 12500, Thread: 2},
		event.Event{Kind: event.ProcessEnd, Time: 13000, X: &event.Extra{Process: &event.ProcessInfo{Exited: true}}},
	)
}

// typedProgram: thread 1 enters the scope "load", allocates 100 B (kept)
// and 30 B (freed) in it; after it, 48 B; a typed scan finds a
// ns::inner::Widget<a::b> in the 48 B. The units by scope and by type.
func typedProgram() []event.Event {
	return append(setup(),
		event.Event{Kind: event.ThreadStart, Time: t0, Thread: 1, Addr: 0xa},
		event.Event{Kind: event.ScopeBegin, Time: 2000, Thread: 1, Aux: 1, X: &event.Extra{Text: "load"}},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 2500, Thread: 1, Stack: 1, Addr: 0x1000, Size: 100},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 2600, Thread: 1, Stack: 2, Addr: 0x2000, Size: 30},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Time: 2700, Thread: 1, Stack: 5, Addr: 0x2000},
		event.Event{Kind: event.ScopeEnd, Time: 4000, Thread: 1, Aux: 1},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 5000, Thread: 1, Stack: 3, Addr: 0x3000, Size: 48},
		event.Event{Kind: event.Scan, Time: 12000, X: &event.Extra{Scan: &event.ScanInfo{Typed: true,
			Types: []event.TypeDef{{Name: "ns::inner::Widget<a::b>", File: "/src/w.h", Line: 3, Size: 48}},
			Names: []string{"g_root"},
			Blocks: []event.ScannedBlock{{Addr: 0x1000, Size: 100, Kind: event.Reachable, Via: 1},
				{Addr: 0x3000, Size: 48, Kind: event.Definite, Type: 1}}}}},
		event.Event{Kind: event.ProcessEnd, Time: 13000, X: &event.Extra{Process: &event.ProcessInfo{Exited: true}}},
	)
}

// run applies evs with an engine of opts and returns its report.
func run(t *testing.T, opts usage.Options, evs []event.Event) (*Report, *heap.Session) {
	t.Helper()
	s := heap.NewSession()
	rep := report.New(s, 0, report.Options{Symbolize: symbolize})
	opts.Stack = rep.Stack
	e, err := usage.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Observer = e
	s.Apply(evs)
	s.Finish()
	return New(e, rep), s
}

// want is a unit's expected row; calls lists the non-zero counts.
type want struct {
	cur, curBlocks, max int64
	maxAt               uint64 // ticks
	alloc, allocBlocks  uint64
	calls               map[event.Fn]uint64
}

func check(t *testing.T, what string, got []Unit, wants map[string]want) {
	t.Helper()
	if len(got) != len(wants) {
		var names []string
		for _, u := range got {
			names = append(names, u.Name)
		}
		t.Errorf("%s: units %q, want %d", what, names, len(wants))
	}
	for _, u := range got {
		w, ok := wants[u.Name]
		if !ok {
			t.Errorf("%s: unexpected unit %q", what, u.Name)
			continue
		}
		var calls [event.NumFn]uint64
		for fn, n := range w.calls {
			calls[fn] = n
		}
		maxS := float64(w.maxAt-t0) / 1e9
		if w.maxAt == 0 {
			maxS = 0
		}
		if u.CurrentBytes != w.cur || u.CurrentBlocks != w.curBlocks || u.MaxBytes != w.max ||
			u.MaxSeconds != maxS || u.MinBytes != 0 || u.MinSeconds != 0 ||
			u.AllocatedBytes != w.alloc || u.AllocatedBlocks != w.allocBlocks || u.Calls != calls {
			t.Errorf("%s: unit %s:\n got current %d B in %d, max %d at %g s, min %d at %g s, allocated %d in %d, calls %v\nwant current %d B in %d, max %d at %g s, min 0 at 0 s, allocated %d in %d, calls %v",
				what, u.Name, u.CurrentBytes, u.CurrentBlocks, u.MaxBytes, u.MaxSeconds, u.MinBytes, u.MinSeconds,
				u.AllocatedBytes, u.AllocatedBlocks, u.Calls, w.cur, w.curBlocks, w.max, maxS, w.alloc, w.allocBlocks, calls)
		}
	}
}

// The rows by what the stacks are; the same numbers under the names each
// attribution gives them.
var (
	// stack 1 (the 100 and the realloc's 1000) and the invalid free at 5
	rowMain = want{cur: 1000, curBlocks: 1, max: 1100, maxAt: 8000, alloc: 1100, allocBlocks: 2,
		calls: map[event.Fn]uint64{event.Malloc: 1, event.FreeFn: 2}}
	// stacks 2 and 4: the 200 (freed by thread 2), the 400 (realloc'd by
	// thread 1), the failed malloc
	rowLibbAlloc = want{cur: 0, curBlocks: 0, max: 600, maxAt: 6000, alloc: 600, allocBlocks: 2,
		calls: map[event.Fn]uint64{event.Malloc: 3, event.FreeFn: 1, event.ReallocFn: 1}}
	// stack 3: the 300 and the folded pairs
	rowStrdup = want{cur: 300, curBlocks: 1, max: 300, maxAt: 4000, alloc: 350, allocBlocks: 6,
		calls: map[event.Fn]uint64{event.Calloc: 1, event.Malloc: 5, event.FreeFn: 5}}
)

func TestLibraryAttributions(t *testing.T) {
	for _, c := range []struct {
		attr  usage.Attribution
		wants map[string]want
	}{
		{usage.Caller, map[string]want{exe: rowMain, libb: rowLibbAlloc, libc: rowStrdup}},
		{usage.Entry, map[string]want{exe: rowMain, liba: rowLibbAlloc, libb: rowStrdup}},
		{usage.Inclusive, map[string]want{
			// stacks 1, 2, 3 and 5
			exe: {cur: 1300, curBlocks: 2, max: 1400, maxAt: 8000, alloc: 1650, allocBlocks: 9,
				calls: map[event.Fn]uint64{event.Malloc: 8, event.Calloc: 1, event.FreeFn: 8}},
			liba: rowLibbAlloc, // stacks 2 and 4
			// stacks 2, 3 and 4
			libb: {cur: 300, curBlocks: 1, max: 900, maxAt: 6000, alloc: 950, allocBlocks: 8,
				calls: map[event.Fn]uint64{event.Malloc: 8, event.Calloc: 1, event.FreeFn: 6, event.ReallocFn: 1}},
			libc: rowStrdup,
		}},
	} {
		r, _ := run(t, usage.Options{By: usage.ByLibrary, Attribution: c.attr}, program())
		if len(r.Images) != 1 {
			t.Fatalf("%d images", len(r.Images))
		}
		check(t, c.attr.String(), r.Images[0].Units, c.wants)
		for _, u := range r.Images[0].Units {
			wantKind := map[string]string{exe: usage.KindExecutable, libc: usage.KindRuntime}[u.Name]
			if wantKind == "" {
				wantKind = usage.KindLibrary
			}
			if u.Kind != wantKind {
				t.Errorf("%s: unit %s is %q, want %q", c.attr, u.Name, u.Kind, wantKind)
			}
		}
	}
}

func TestFunctionAttributions(t *testing.T) {
	for _, c := range []struct {
		attr  usage.Attribution
		wants map[string]want
	}{
		{usage.Caller, map[string]want{"main": rowMain, "libb_alloc": rowLibbAlloc, "strdup": rowStrdup}},
		// main allocates itself at 1; main calls liba_work at 2, helper at
		// 3; liba_thread (a root) calls libb_alloc at 4.
		{usage.Entry, map[string]want{"main": rowMain, "liba_work": {cur: 0, max: 200, maxAt: 3000, alloc: 200, allocBlocks: 1,
			calls: map[event.Fn]uint64{event.Malloc: 2, event.FreeFn: 1}},
			"helper": rowStrdup, "libb_alloc": {cur: 0, max: 400, maxAt: 6000, alloc: 400, allocBlocks: 1,
				calls: map[event.Fn]uint64{event.Malloc: 1, event.ReallocFn: 1}}}},
	} {
		r, _ := run(t, usage.Options{By: usage.ByFunction, Attribution: c.attr}, program())
		check(t, c.attr.String(), r.Images[0].Units, c.wants)
		for _, u := range r.Images[0].Units {
			if u.Module == "" {
				t.Errorf("%s: function %s without its module", c.attr, u.Name)
			}
		}
	}
	r, _ := run(t, usage.Options{By: usage.ByFunction, Attribution: usage.Inclusive}, program())
	names := map[string]bool{}
	for _, u := range r.Images[0].Units {
		names[u.Name] = true
	}
	for _, n := range []string{"main", "helper", "libb_dup", "strdup", "liba_work", "libb_alloc", "liba_thread"} {
		if !names[n] {
			t.Errorf("inclusive: no unit %s in %v", n, names)
		}
	}
	for _, n := range []string{"_start", "__libc_start_main", "start_thread", "clone3", "malloc"} {
		if names[n] {
			t.Errorf("inclusive: startup or allocator frame %s is a unit", n)
		}
	}
}

func TestThreads(t *testing.T) {
	r, _ := run(t, usage.Options{By: usage.ByThread}, program())
	check(t, "thread", r.Images[0].Units, map[string]want{
		// the 100, 200, 300, the realloc's 1000, the failed malloc, the
		// invalid free
		"main (tid 1)": {cur: 1300, curBlocks: 2, max: 1400, maxAt: 8000, alloc: 1600, allocBlocks: 4,
			calls: map[event.Fn]uint64{event.Malloc: 3, event.Calloc: 1, event.FreeFn: 3}},
		// the 400 (realloc'd by thread 1) and the folded pairs
		"worker (tid 2)": {cur: 0, max: 400, maxAt: 6000, alloc: 450, allocBlocks: 6,
			calls: map[event.Fn]uint64{event.Malloc: 6, event.FreeFn: 5, event.ReallocFn: 1}},
	})
	for _, u := range r.Images[0].Units {
		if u.TID == 2 && (u.ThreadName != "worker" || u.ThreadStart == nil || *u.ThreadStart != 4e-6 ||
			u.ThreadExit == nil || *u.ThreadExit != 11.5e-6) {
			t.Errorf("worker: name %q, start %v, exit %v; want worker, 4e-6, 11.5e-6", u.ThreadName, u.ThreadStart, u.ThreadExit)
		}
	}
}

func TestSites(t *testing.T) {
	r, _ := run(t, usage.Options{By: usage.BySite}, program())
	units := r.Images[0].Units
	if len(units) != 5 {
		t.Errorf("%d sites, want 5 (the stack of the invalid free is one)", len(units))
	}
	got := map[string]Unit{}
	for _, u := range units {
		if len(u.Stack) < 2 {
			t.Errorf("site %s without its stack", u.Name)
			continue
		}
		got[u.Stack[0].Function+" < "+u.Stack[1].Function] = u
	}
	if u := got["libb_alloc < liba_thread"]; u.AllocatedBytes != 400 || u.Calls[event.ReallocFn] != 1 {
		t.Errorf("site of stack 4: %+v", u)
	}
	if u := got["strdup < libb_dup"]; u.AllocatedBytes != 350 || u.CurrentBytes != 300 || u.Name != "strdup in libc.so.6" {
		t.Errorf("site of stack 3: %+v", u)
	}
}

// TestIntervals: per slice of 3 µs; a unit's slices sum to its totals.
func TestIntervals(t *testing.T) {
	for _, by := range []usage.By{usage.ByLibrary, usage.ByThread} {
		r, _ := run(t, usage.Options{By: by, Attribution: usage.Inclusive, Interval: 3 * time.Microsecond}, program())
		img := r.Images[0]
		if len(img.Intervals) != 4 {
			t.Errorf("%s: %d intervals, want 4 (events from 1 µs to 11 µs after the start)", by, len(img.Intervals))
		}
		type sum struct {
			alloc, freed, blocks uint64
			net, cur             int64
			calls                [event.NumFn]uint64
		}
		sums := map[string]*sum{}
		for k, iv := range img.Intervals {
			if k > 0 && iv.Start < img.Intervals[k-1].End || iv.End-iv.Start != 3*time.Microsecond {
				t.Errorf("%s: interval %v to %v", by, iv.Start, iv.End)
			}
			for _, u := range iv.Units {
				s := sums[u.Name]
				if s == nil {
					s = &sum{}
					sums[u.Name] = s
				}
				s.alloc += u.AllocatedBytes
				s.freed += u.FreedBytes
				s.blocks += u.AllocatedBlocks
				s.net += u.NetBytes
				s.cur = u.CurrentBytes
				for fn, n := range u.Calls {
					s.calls[fn] += n
				}
				if u.MinBytes > u.CurrentBytes || u.MaxBytes < u.CurrentBytes || u.MinBytes > u.CurrentBytes-u.NetBytes ||
					u.MaxBytes < u.CurrentBytes-u.NetBytes {
					t.Errorf("%s: %s in %v: min %d, max %d outside start %d, end %d", by, u.Name, iv.Start,
						u.MinBytes, u.MaxBytes, u.CurrentBytes-u.NetBytes, u.CurrentBytes)
				}
			}
		}
		for _, u := range img.Units {
			s := sums[u.Name]
			if s == nil || s.alloc != u.AllocatedBytes || s.freed != u.FreedBytes || s.blocks != u.AllocatedBlocks ||
				s.net != u.CurrentBytes || s.cur != u.CurrentBytes || s.calls != u.Calls {
				t.Errorf("%s: %s: intervals sum to %+v; the run: %+v", by, u.Name, s, u)
			}
		}
	}
	// The exe, inclusive: +100 at 2000, +200 at 3000 (slice 0: 1000 to
	// 3999); +300 at 4000 (slice 1); -200 at 7000, +1000 at 8000, the
	// folded pairs at 9000 (slice 2); -100 at 12000 (slice 3).
	r, _ := run(t, usage.Options{By: usage.ByLibrary, Attribution: usage.Inclusive, Interval: 3 * time.Microsecond}, program())
	var nets, maxes, mins []int64
	for _, iv := range r.Images[0].Intervals {
		for _, u := range iv.Units {
			if u.Name == exe {
				nets = append(nets, u.NetBytes)
				maxes = append(maxes, u.MaxBytes)
				mins = append(mins, u.MinBytes)
			}
		}
	}
	if got, want := nets, []int64{300, 300, 800, -100}; !slices.Equal(got, want) {
		t.Errorf("exe's net per interval %v, want %v", got, want)
	}
	if got, want := maxes, []int64{300, 600, 1400, 1400}; !slices.Equal(got, want) {
		t.Errorf("exe's max per interval %v, want %v", got, want)
	}
	if got, want := mins, []int64{0, 300, 400, 1300}; !slices.Equal(got, want) {
		t.Errorf("exe's min per interval %v, want %v", got, want)
	}
}

// TestFork: a fork child starts with its parent's blocks; freeing one of
// them lowers its unit below where it started.
func TestFork(t *testing.T) {
	evs := append(program()[:0:0], setup()...)
	evs = append(evs,
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 2000, Thread: 1, Stack: 1, Addr: 0x1000, Size: 100},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 3000, Thread: 1, Stack: 2, Addr: 0x2000, Size: 200},
		event.Event{Kind: event.Fork, Time: 4000, Thread: 1, Aux: 1},
		event.Event{Kind: event.ProcessStart, Proc: 1, Time: 5000, X: &event.Extra{
			Process: &event.ProcessInfo{Index: 1, PID: 43, ParentProc: 0, ForkID: 1, ExecOf: -1, Argv: []string{"app"}, Exe: exe}}},
		event.Event{Kind: event.Free, Proc: 1, Fn: event.FreeFn, Time: 6000, Thread: 43, Stack: 5, Addr: 0x2000},
	)
	for _, ev := range setup() {
		if ev.Kind == event.StackDef { // the child's agent numbers its stacks anew
			ev.Proc = 1
			evs = append(evs, ev)
		}
	}
	evs = append(evs, event.Event{Kind: event.Alloc, Proc: 1, Fn: event.Malloc, Time: 7000, Thread: 43, Stack: 2, Addr: 0x3000, Size: 50})
	r, _ := run(t, usage.Options{By: usage.ByLibrary, Attribution: usage.Caller}, evs)
	if len(r.Images) != 2 {
		t.Fatalf("%d images, want the parent and the child", len(r.Images))
	}
	for _, u := range r.Images[1].Units {
		if u.Name == libb {
			if u.CurrentBytes != 50 || u.InheritedBytes != 200 || u.MinBytes != 0 || u.MinSeconds != 5e-6 ||
				u.MaxBytes != 200 || u.MaxSeconds != 0 || u.AllocatedBytes != 50 || u.Calls[event.FreeFn] != 1 {
				t.Errorf("child's libb: %+v", u)
			}
		}
		if u.Name == exe && (u.CurrentBytes != 100 || u.InheritedBytes != 100 || u.AllocatedBytes != 0) {
			t.Errorf("child's exe: %+v", u)
		}
	}
}

func TestJSONAndText(t *testing.T) {
	r, _ := run(t, usage.Options{By: usage.ByLibrary, Attribution: usage.Entry, Interval: 3 * time.Microsecond}, program())
	var b bytes.Buffer
	if err := r.Generate(&b, "json"); err != nil {
		t.Fatal(err)
	}
	testfixture.CheckJSONSchema(t, schemaFile, "the usage", b.Bytes())
	var doc map[string]any
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != Schema || doc["by"] != "library" || doc["attribution"] != "entry" {
		t.Errorf("header %v %v %v", doc["schema"], doc["by"], doc["attribution"])
	}
	units := doc["units"].([]any)
	u0 := units[0].(map[string]any)
	for _, k := range []string{"name", "current_bytes", "current_blocks", "min_bytes", "max_bytes", "allocated_bytes", "calls",
		"min_seconds", "max_seconds", "allocated_blocks", "kind"} {
		if _, ok := u0[k]; !ok {
			t.Errorf("unit without %q: %v", k, u0)
		}
	}
	if u0["name"] != exe || u0["current_bytes"].(float64) != 1000 {
		t.Errorf("first unit %v, want the executable with 1000 bytes", u0)
	}
	calls := u0["calls"].(map[string]any)
	if len(calls) != int(event.NumFn)-1 || calls["malloc"].(float64) != 1 || calls["free"].(float64) != 2 {
		t.Errorf("calls %v", calls)
	}
	ivs := doc["intervals"].([]any)
	iv := ivs[1].(map[string]any)
	if iv["start_ns"].(float64) != 3000 || iv["end_ns"].(float64) != 6000 || len(iv["units"].([]any)) == 0 {
		t.Errorf("interval 1: %v", iv)
	}

	b.Reset()
	if err := r.Generate(&b, "text"); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, s := range []string{"heap use by library, entry attribution", "app (pid 42) exited", "3 units",
		"1,000 B", "/bin/app (executable)", "/lib/liba.so", "malloc", "realloc", "over time, per 3µs", "0.000003 to 0.000006 s"} {
		if !strings.Contains(text, s) {
			t.Errorf("text without %q:\n%s", s, text)
		}
	}
	// Rows sorted by current bytes: the executable (1,000 B), libb (300 B), liba.
	if a, b, c := strings.Index(text, "/bin/app (exec"), strings.Index(text, "/lib/libb.so"), strings.Index(text, "/lib/liba.so"); !(a < b && b < c) {
		t.Errorf("rows out of order:\n%s", text)
	}
}

// TestScopes: units by scope are the model's scopes; their JSON has the
// usage fields and the scope's own, side by side.
func TestScopes(t *testing.T) {
	if _, err := usage.New(usage.Options{By: usage.ByScope, Interval: time.Second}); err == nil {
		t.Error("intervals by scope accepted")
	}
	r, _ := run(t, usage.Options{By: usage.ByScope}, typedProgram())
	var b bytes.Buffer
	if err := r.Generate(&b, "json"); err != nil {
		t.Fatal(err)
	}
	testfixture.CheckJSONSchema(t, schemaFile, "the usage", b.Bytes())
	var doc struct {
		By          string           `json:"by"`
		Attribution string           `json:"attribution"`
		Units       []map[string]any `json:"units"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.By != "scope" || doc.Attribution != "none" || len(doc.Units) != 1 {
		t.Fatalf("by %q, attribution %q, %d units", doc.By, doc.Attribution, len(doc.Units))
	}
	u := doc.Units[0]
	for k, v := range map[string]float64{"current_bytes": 100, "current_blocks": 1, "max_bytes": 130, "allocated_bytes": 130,
		"allocated_blocks": 2, "freed_bytes": 30, "entered": 1, "closed": 1, "held_bytes": 100, "held_live_bytes": 100,
		"net_bytes": 100, "total_seconds": 2e-6, "longest_seconds": 2e-6, "first_seconds": 1e-6, "last_seconds": 3e-6} {
		if got, ok := u[k].(float64); !ok || got != v {
			t.Errorf("%s = %v, want %v", k, u[k], v)
		}
	}
	if u["name"] != "load" || len(u["held"].([]any)) != 1 {
		t.Errorf("unit %v", u)
	}
	b.Reset()
	if err := r.Generate(&b, "text"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"heap use by scope", "1 scope", "SCOPES: 1 scope entered 1 time", `HELD by scope "load" when it closed: 100 B in 1 block; 100 B in 1 block never freed`} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("text without %q:\n%s", s, b.String())
		}
	}
}
