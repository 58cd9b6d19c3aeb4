package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// TestNewArrayCookieReachable: an array made by new[] of a type with a
// destructor, held only through the pointer new[] returned (8 bytes past
// the block's start, after the element count), is reachable, as memcheck
// says with its default heuristics (newarray) and LeakSanitizer says (any
// pointer into a block keeps it); the same array with its pointer dropped
// is a definite leak for all three.
func TestNewArrayCookieReachable(t *testing.T) {
	bin := fixture(t, "agree.cc")
	argv := []string{bin, "newarray"}
	plain := native(t, nil, argv...)
	r, k := runKinds(t, nil, argv...)
	sameBehaviour(t, r, plain)
	got := map[uint64]string{}
	for _, l := range k.Leaks {
		if l.Blocks == 1 && len(l.Stack) > 0 && strings.HasSuffix(l.Stack[0].File, "agree.cc") {
			got[l.Bytes] = l.Kind
		}
	}
	for size, kind := range map[uint64]string{128: "reachable", 88: "definite"} {
		if got[size] != kind {
			t.Errorf("%d B new[] block: kind %q, want %q\n%s", size, got[size], kind, r.text)
		}
	}
	compareLeakSummary(t, k, argv...)
	lost := k.Totals.ByKind["definite"]
	ind := k.Totals.ByKind["indirect"]
	compareLSanOn(t, "agree.cc", nil, []string{"newarray"}, lost.Bytes+ind.Bytes, lost.Blocks+ind.Blocks)
}

// TestNewArrayOfNoneReachable: new[] of no element of a type with a
// destructor is an 8-byte block (the count, 0), and the pointer new[]
// returns, all the program keeps, is the address just past it. Held, the
// block is reachable, as LeakSanitizer says; memcheck calls it
// definitely lost (its leak_cpp_interior test says wrongly), the one
// verdict where leakpath follows LeakSanitizer and not memcheck.
func TestNewArrayOfNoneReachable(t *testing.T) {
	bin := fixture(t, "agree.cc")
	argv := []string{bin, "newarray0"}
	plain := native(t, nil, argv...)
	r, k := runKinds(t, nil, argv...)
	sameBehaviour(t, r, plain)
	found := false
	for _, l := range k.Leaks {
		if l.Blocks == 1 && l.Bytes == 8 && len(l.Stack) > 0 && strings.HasSuffix(l.Stack[0].File, "agree.cc") {
			found = true
			if l.Kind != "reachable" {
				t.Errorf("new Elem[0], held past its end: %s, want reachable\n%s", l.Kind, r.text)
			}
		}
	}
	if !found {
		t.Errorf("no 8 B block from agree.cc in the report:\n%s", r.text)
	}
	lost := k.Totals.ByKind["definite"]
	ind := k.Totals.ByKind["indirect"]
	compareLSanOn(t, "agree.cc", nil, []string{"newarray0"}, lost.Bytes+ind.Bytes, lost.Blocks+ind.Blocks)
}

var vgMismatched = regexp.MustCompile(`(?m)^==\d+== Mismatched free\(\) / delete / delete \[\]$`)

// TestReallocOfNewMismatched: realloc releasing a block that new[] or new
// made is a mismatched free, whether realloc moves the block or frees it
// (realloc(p, 0)): two, as memcheck counts on the same binary.
func TestReallocOfNewMismatched(t *testing.T) {
	bin := fixture(t, "agree.cc")
	argv := []string{bin, "realloc"}
	plain := native(t, nil, argv...)
	r, k := runKinds(t, nil, argv...)
	sameBehaviour(t, r, plain)
	n := 0
	for _, e := range r.report.Errors {
		if e.Kind != "mismatched_free" {
			t.Errorf("error %s, want only mismatched frees", e.Kind)
			continue
		}
		if !stackHas(e.Stack, "realloc_new()") || !stackHas(e.AllocStack, "realloc_new()") {
			t.Errorf("mismatched free: stack %v, allocated at %v; want realloc_new's", e.Stack, e.AllocStack)
		}
		n++
	}
	if n != 2 {
		t.Errorf("%d mismatched frees, want 2 (realloc to 0 of new[]'s block, realloc of new's)\n%s", n, r.text)
	}
	compareLeakSummary(t, k, argv...)
	if log := memcheckLog(t, argv...); log != nil {
		if m := len(vgMismatched.FindAll(log, -1)); m != n {
			t.Errorf("memcheck reports %d mismatched frees, leakpath %d\n%s", m, n, log)
		}
	}
}

var vgInvalidFree = regexp.MustCompile(`(?m)^==\d+== Invalid free\(\) / delete / delete\[\] / realloc\(\)\n==\d+==    at 0x[0-9A-F]+: realloc `)

// TestReallocTheLibraryAbortsIn: the C library aborts in a realloc of an
// interior pointer, so the call never returns with its record; leakpath
// reports the invalid realloc from the call's begin record, as memcheck
// (whose realloc does not abort) reports it, and the program dies of the
// same signal as without leakpath.
func TestReallocTheLibraryAbortsIn(t *testing.T) {
	bin := fixture(t, "agree.cc")
	argv := []string{bin, "badrealloc"}
	plain := native(t, nil, argv...)
	if plain.code != 128+6 {
		t.Skipf("the C library here does not abort on realloc of an interior pointer (exit %d)", plain.code)
	}
	r := leakpath(t, nil, nil, argv...)
	sameBehaviour(t, r, plain)
	var kinds []string
	for _, e := range r.report.Errors {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 1 || kinds[0] != "invalid_realloc" {
		t.Errorf("errors %v, want one invalid_realloc\n%s", kinds, r.text)
	}
	// The begin record carries the call's stack: the error names the line.
	if !strings.Contains(r.text, "badrealloc() (") || !strings.Contains(r.text, "agree.cc:60)") {
		t.Errorf("the invalid realloc does not name its call (agree.cc:60):\n%s", r.text)
	}
	if log := memcheckLog(t, argv...); log != nil {
		if m := len(vgInvalidFree.FindAll(log, -1)); m != 1 {
			t.Errorf("memcheck reports %d invalid reallocs, want 1 as leakpath\n%s", m, log)
		}
	}
}

// compareLSanOn builds fixture src with LeakSanitizer (and flags), runs
// it with args and compares what it calls leaked with bytes in blocks.
// Without a LeakSanitizer build (no liblsan) it says so and compares
// nothing.
func compareLSanOn(t *testing.T, src string, flags, args []string, bytes, blocks uint64) {
	t.Helper()
	path := filepath.Join(root, "testdata", "fixtures", src)
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, filepath.Ext(src))+"-lsan")
	cc := "cc"
	if strings.HasSuffix(src, ".cc") {
		cc = "c++"
	}
	if err := testfixture.Compile(cc, bin, append(append([]string{"-g", "-O0", "-fsanitize=leak", "-pthread"}, flags...), path)...); err != nil {
		t.Logf("no LeakSanitizer build (%v): not compared", err)
		return
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = testEnv()
	out, _ := cmd.CombinedOutput()
	var lb, ln uint64
	if m := lsanSummary.FindSubmatch(out); m != nil {
		lb, ln = atoi(string(m[1])), atoi(string(m[2]))
	}
	t.Logf("LeakSanitizer: %d bytes leaked in %d allocations; leakpath %d in %d", lb, ln, bytes, blocks)
	if lb != bytes || ln != blocks {
		t.Errorf("LeakSanitizer: %d bytes leaked in %d allocations, leakpath %d in %d\n%s", lb, ln, bytes, blocks, out)
	}
}

// TestDlerrorKeptReachable: the message dlerror returned stays the
// program's until its next dynamic-loader call, reachable from glibc's
// result block, as memcheck says. The agent's lookup of the program's
// LeakSanitizer hooks at the exit must not be that next call (dlsym
// frees the message, unrecorded, and the block left looks lost).
func TestDlerrorKeptReachable(t *testing.T) {
	bin := fixture(t, "dlerrorkept.c", "-ldl")
	plain := native(t, nil, bin)
	if string(plain.stdout) != "error kept\n" {
		t.Fatalf("without leakpath: %q, want \"error kept\"", plain.stdout)
	}
	r, k := runKinds(t, nil, bin)
	sameBehaviour(t, r, plain)
	if d := k.Totals.ByKind["definite"]; d.Blocks != 0 {
		t.Errorf("definite: %d bytes in %d blocks, want none\n%s", d.Bytes, d.Blocks, r.text)
	}
	found := false
	for _, l := range k.Leaks {
		for _, f := range l.Stack {
			if f.Function == "__dlerror" {
				found = true
				if l.Kind != "reachable" {
					t.Errorf("dlerror's message: %s, want reachable\n%s", l.Kind, r.text)
				}
			}
		}
	}
	if !found {
		t.Errorf("no block allocated in dlerror in the report:\n%s", r.text)
	}
	compareLeakSummary(t, k, bin)
}
