package report

import (
	stdbytes "bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// The modules of ownSession, each mapped at its own 1 MiB.
const (
	ownApp   = "/src/proj/app"
	ownNoisy = "/usr/lib/libnoisy.so"
	ownLibc  = "/usr/lib/x86_64-linux-gnu/libc.so.6"
)

var ownBase = map[string]uint64{ownApp: 0x100000, ownNoisy: 0x200000, ownLibc: 0x300000}

// ownSymbols symbolizes ownSession's addresses: the app has lines,
// libnoisy and libc function names only.
func ownSymbols(m *heap.Module, off uint64) []SourceFrame {
	type fn struct {
		name string
		line int
	}
	var f fn
	switch m.Path {
	case ownApp:
		f = map[uint64]fn{0xff: {"own_leak", 10}, 0x1ff: {"main", 20}, 0x2ff: {"main", 21}, 0x3ff: {"own_dup", 30}}[off]
		return []SourceFrame{{Function: f.name, File: "/src/proj/app.c", Line: f.line}}
	case ownNoisy:
		switch {
		case off < 0x100:
			f.name = "noisy_init"
		case off < 0x200:
			f.name = "noisy_start"
		default:
			f.name = "noisy_name"
		}
	case ownLibc:
		f.name = "strdup"
	}
	return []SourceFrame{{Function: f.name}}
}

// ownSession is an app that leaks 100 B in own_leak and 7 B by strdup in
// own_dup; libnoisy leaks 10 B from each of three call sites in
// noisy_init (under noisy_start, called by main) and 5 B by strdup in
// noisy_name.
func ownSession(t *testing.T) *heap.Session {
	t.Helper()
	a := func(mod string, off uint64) uint64 { return ownBase[mod] + off }
	stacks := [][]uint64{
		1: {a(ownApp, 0x100), a(ownApp, 0x200)},
		2: {a(ownNoisy, 0x10), a(ownNoisy, 0x110), a(ownApp, 0x300)},
		3: {a(ownNoisy, 0x20), a(ownNoisy, 0x110), a(ownApp, 0x300)},
		4: {a(ownNoisy, 0x30), a(ownNoisy, 0x110), a(ownApp, 0x300)},
		5: {a(ownLibc, 0x10), a(ownNoisy, 0x210), a(ownApp, 0x300)},
		6: {a(ownLibc, 0x10), a(ownApp, 0x400), a(ownApp, 0x200)},
	}
	sizes := []uint64{1: 100, 2: 10, 3: 10, 4: 10, 5: 5, 6: 7}
	evs := []event.Event{{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1, PID: 5, Exe: ownApp}}}}
	for i, path := range []string{ownApp, ownNoisy, ownLibc} {
		evs = append(evs, event.Event{Kind: event.ModuleLoad, X: &event.Extra{Module: &event.Module{
			ID: uint32(i + 1), Path: path, Bias: ownBase[path], Segments: []event.Segment{{Vaddr: 0, Memsz: 0x100000, Flags: 5}}}}})
	}
	for id := 1; id < len(stacks); id++ {
		evs = append(evs,
			event.Event{Kind: event.StackDef, Stack: uint32(id), X: &event.Extra{Frames: stacks[id]}},
			event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: uint64(10 * id), Addr: uint64(0x10000 * id), Size: sizes[id], Thread: 1, Stack: uint32(id)})
	}
	s := heap.NewSession()
	s.Apply(evs)
	s.Finish()
	return s
}

func ownReport(t *testing.T, opts Options, format string) string {
	t.Helper()
	opts.Symbolize, opts.TicksPerSec = ownSymbols, 1e9
	var out stdbytes.Buffer
	if err := New(ownSession(t), 0, opts).Generate(&out, format); err != nil {
		t.Fatal(err)
	}
	if format == "json" {
		checkSchema(t, "the report", out.Bytes())
	}
	return out.String()
}

// ownCode is what `leakpath run` passes from /src/proj.
func ownCode() *OwnCode { return &OwnCode{Dirs: []string{"/src/proj"}} }

// TestOwnLeaksFirst: the user's leaks are listed, the library's summed up
// in one line naming the calls of the user's code that led there; the
// three call sites in noisy_init (no debug information) are one group.
func TestOwnLeaksFirst(t *testing.T) {
	text := ownReport(t, Options{Own: ownCode()}, "text")
	leaks := regexp.MustCompile(`(?m)^LEAK .*`).FindAllString(text, -1)
	if len(leaks) != 2 || !strings.HasPrefix(leaks[0], "LEAK 100 B in 1 block") || !strings.HasPrefix(leaks[1], "LEAK 7 B in 1 block") {
		t.Errorf("want the two own leaks listed, biggest first; got %q:\n%s", leaks, text)
	}
	lib := "\n  libnoisy.so: 2 groups, 35 B in 4 blocks, during noisy_start, noisy_name\n"
	if !strings.Contains(text, lib) {
		t.Errorf("want the library line %q:\n%s", lib, text)
	}
	if i, j := strings.Index(text, "LEAK 7 B"), strings.Index(text, "LIBRARY LEAKS"); i < 0 || j < i {
		t.Errorf("the library leaks come before the user's:\n%s", text)
	}
	if strings.Contains(text, "\n  libc.so.6: ") {
		t.Errorf("strdup's leaks belong to its callers, not libc:\n%s", text)
	}
	if !strings.Contains(text, "leakpath: 4 leak groups (142 B) not freed at exit, 2 in your code; 0 improper uses.") &&
		!strings.Contains(text, "leakpath: 4 leak groups (142 B) not freed, 2 in your code; 0 improper uses.") {
		t.Errorf("summary line:\n%s", text)
	}

	all := ownReport(t, Options{Own: ownCode(), ShowLibraryLeaks: true}, "text")
	leaks = regexp.MustCompile(`(?m)^LEAK .*`).FindAllString(all, -1)
	if len(leaks) != 4 || !strings.Contains(all, lib) {
		t.Errorf("--show-library-leaks: want 4 groups and the library line; got %q:\n%s", leaks, all)
	}
	folded := "LEAK 30 B in 3 blocks from malloc\n  (3 stacks folded: they differ only in return addresses inside functions without debug information)\n  #0  noisy_init in libnoisy.so\n"
	if !strings.Contains(all, folded) {
		t.Errorf("want the three call sites in noisy_init as one group %q:\n%s", folded, all)
	}
}

// TestOwnWithoutOwnCode: without OwnCode every leak is the user's (as
// before), but the folding of no-debug call sites still applies.
func TestOwnWithoutOwnCode(t *testing.T) {
	text := ownReport(t, Options{}, "text")
	if n := strings.Count(text, "\nLEAK "); n != 4 || strings.Contains(text, "LIBRARY LEAKS") {
		t.Errorf("want 4 groups listed, no library summary:\n%s", text)
	}
}

// TestOwnJSON: the JSON keeps every group, with own, library, during and
// folded_stacks.
func TestOwnJSON(t *testing.T) {
	var doc struct {
		Leaks []struct {
			Bytes   uint64      `json:"bytes"`
			Own     *bool       `json:"own"`
			Library string      `json:"library"`
			During  string      `json:"during"`
			Folded  int         `json:"folded_stacks"`
			Allocs  uint64      `json:"site_allocations"`
			Stack   []jsonFrame `json:"stack"`
		} `json:"leaks"`
	}
	if err := json.Unmarshal([]byte(ownReport(t, Options{Own: ownCode()}, "json")), &doc); err != nil {
		t.Fatal(err)
	}
	type row struct {
		bytes  uint64
		own    bool
		lib    string
		during string
		folded int
		allocs uint64
		frame0 string
	}
	var got []row
	for _, l := range doc.Leaks {
		if l.Own == nil {
			t.Fatalf("a leak without \"own\": %+v", l)
		}
		got = append(got, row{l.Bytes, *l.Own, l.Library, l.During, l.Folded, l.Allocs, l.Stack[0].Function})
	}
	want := []row{
		{100, true, "", "", 0, 1, "own_leak"},
		{30, false, ownNoisy, "noisy_start", 3, 3, "noisy_init"},
		{7, true, "", "", 0, 1, "strdup"},
		{5, false, ownNoisy, "noisy_name", 0, 1, "strdup"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("leak %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestOwnCheckScope: Failing counts the libraries' leaks unless
// CheckOwnOnly.
func TestOwnCheckScope(t *testing.T) {
	for _, c := range []struct {
		own    bool
		groups int
		bytes  uint64
	}{{false, 4, 142}, {true, 2, 107}} {
		r := New(ownSession(t), 0, Options{Symbolize: ownSymbols, Own: ownCode(), CheckOwnOnly: c.own})
		g, b, _ := r.Failing([]event.LeakKind{event.Definite})
		if g != c.groups || b != c.bytes {
			t.Errorf("CheckOwnOnly %v: %d groups, %d B failing; want %d, %d", c.own, g, b, c.groups, c.bytes)
		}
	}
}

// TestOwnModuleClass: which modules are the user's.
func TestOwnModuleClass(t *testing.T) {
	s := ownSession(t)
	p := s.Process(0)
	r := New(s, 0, Options{Own: &OwnCode{Patterns: []string{"libmine*", "/opt/vendor/*/libx.so"}, Dirs: []string{"/src/proj"},
		DebugInfo: func(path string) bool { return path == "/usr/local/lib/libdbg.so" }}})
	for path, want := range map[string]int{
		ownApp:                         modOwn, // the executable
		"/src/proj/build/libhelper.so": modOwn, // under the working directory
		"/src/projection/lib.so":       modLibrary,
		"/usr/lib/libmine.so.1":        modOwn, // --own libmine*
		"/opt/vendor/v2/libx.so":       modOwn, // --own with a '/'
		"/usr/local/lib/libdbg.so":     modOwn, // its own DWARF
		"/usr/lib/libpmix.so.2":        modLibrary,
		ownLibc:                        modRuntime,
		"/usr/lib/libstdc++.so.6":      modRuntime,
		"/opt/leakpath/libleakpath.so": modRuntime,
		"[vdso]":                       modUnknown,
		"":                             modUnknown,
	} {
		if got := r.moduleClass(p, path); got != want {
			t.Errorf("%q: class %d, want %d", path, got, want)
		}
	}
	// An executable the system installed (orted, exec'd by MPI_Init) is
	// not the user's for being the executable.
	p.Info.Exe = "/usr/bin/orted"
	p.Modules[0].Path = "/usr/bin/orted"
	if got := r.classifyModule(p, "/usr/bin/orted"); got != modLibrary {
		t.Errorf("/usr/bin/orted as the executable: class %d, want library", got)
	}
	// Run from /: the directory says nothing.
	r = New(s, 0, Options{Own: &OwnCode{Dirs: []string{"/"}}})
	if got := r.moduleClass(p, "/usr/lib/libpmix.so.2"); got != modLibrary {
		t.Errorf("run from /: libpmix has class %d, want library", got)
	}
}
