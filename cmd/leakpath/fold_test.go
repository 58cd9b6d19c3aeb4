package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// TestFoldingKeepsEveryCount: folding short-lived pairs in the agent
// changes what travels to the collector, never what the report counts.
// Each fixture is recorded with and without --fold and everything must be
// equal. The peak too for a program of one thread (its pending bytes are
// written at their highs); with threads, the pending bytes of all are
// written at each thread's highs and exit, which may miss the moment of
// the peak a little (and the two runs' schedules differ).
func TestFoldingKeepsEveryCount(t *testing.T) {
	loop := filepath.Join(t.TempDir(), "allocloop")
	compileTo(t, "cc", loop, "-O2", "-g", filepath.Join(root, "bench", "workloads", "allocloop.c"), "-pthread")
	// low: with threads, the least share of the peak without folding
	// that the peak with folding may be (measured: the 2-thread loop
	// 0.80-1.0, the others 1.0).
	for _, c := range []struct {
		argv []string
		low  float64
	}{
		{[]string{fixture(t, "allfuncs.c")}, 1},
		{[]string{fixture(t, "cxx.cc")}, 1},
		// Workers hand their blocks to main: the peak is when the last
		// one exits, and it says so.
		{[]string{fixture(t, "threads.c")}, 0.95},
		{[]string{fixture(t, "handoff.c"), "20000"}, 0.75},
		{[]string{fixture(t, "lifecycle.c")}, 1},
		{[]string{fixture(t, "fork.c")}, 1},
		// A second thread folds after main: the map of pending blocks
		// changes writer (and here cannot: see TestFoldingInASandbox).
		{[]string{fixture(t, "seccomp.c")}, 1},
		{[]string{fixture(t, "peaks.c"), "spike"}, 1},
		{[]string{loop, "300000"}, 0.75}, // a worker thread
		{[]string{loop, "300000", "2"}, 2.0 / 3},
	} {
		argv := c.argv
		t.Run(filepath.Base(argv[0])+map[bool]string{true: "-threads", false: ""}[len(argv) > 2], func(t *testing.T) {
			on := leakpath(t, []string{"--fold=true"}, nil, argv...)
			off := leakpath(t, []string{"--fold=false"}, nil, argv...)
			a, b := on.report.jsonImage, off.report.jsonImage
			t.Logf("peak %d B with folding, %d B without", a.Totals.PeakBytes, b.Totals.PeakBytes)
			if pa, pb := float64(a.Totals.PeakBytes), float64(b.Totals.PeakBytes); c.low == 1 && pa != pb || pa < pb*c.low || pa > pb*4/3 {
				t.Errorf("peak %.0f B with folding, %.0f B without (want at least %.2f of it)", pa, pb, c.low)
			}
			a.Totals.PeakBytes, b.Totals.PeakBytes = 0, 0
			if !reflect.DeepEqual(a.Totals, b.Totals) {
				t.Errorf("totals with folding:\n%+v\nwithout:\n%+v", a.Totals, b.Totals)
			}
			if len(a.Leaks) != len(b.Leaks) {
				t.Fatalf("%d leak groups with folding, %d without", len(a.Leaks), len(b.Leaks))
			}
			for i := range a.Leaks {
				if a.Leaks[i].Bytes != b.Leaks[i].Bytes || a.Leaks[i].Blocks != b.Leaks[i].Blocks ||
					funcs(a.Leaks[i].Stack) != funcs(b.Leaks[i].Stack) {
					t.Errorf("leak %d differs: %+v vs %+v", i, a.Leaks[i], b.Leaks[i])
				}
			}
			if len(a.Errors) != len(b.Errors) {
				t.Errorf("%d improper uses with folding, %d without", len(a.Errors), len(b.Errors))
			}
			fon, foff := foldedPairs(t, on), foldedPairs(t, off)
			if foff != 0 || strings.Contains(off.text, "folded") {
				t.Errorf("--fold=false: %d folded pairs reported", foff)
			}
			if argv[0] == loop && (fon < a.Totals.Allocations/2 || fon > a.Totals.Allocations) {
				t.Errorf("the loop folded %d of its %d allocations, want most", fon, a.Totals.Allocations)
			}
			// The peak counts them: the summary need not say it leaves
			// them out (it does for a trace from before pending highs).
			if strings.Contains(on.text, "short-lived block") {
				t.Errorf("%d folded pairs; the summary says the peak leaves them out:\n%s", fon, on.text)
			}
		})
	}
}

// foldedPairs is how many pairs folded, as r's JSON report says.
func foldedPairs(t testing.TB, r result) uint64 {
	t.Helper()
	var v struct {
		Totals struct {
			Folded uint64 `json:"folded_pairs"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(r.reportJSON, &v); err != nil {
		t.Fatal(err)
	}
	return v.Totals.Folded
}

// TestPartsKeepEveryCount: four threads allocate at once and free each
// other's blocks (testdata/fixtures/parts.c); the map of pending blocks
// has a part per 64 MiB of addresses, written plainly by its owner. A
// word lost to another thread's plain store would make a free of an
// unknown block and a false leak: every count must be the one without
// folding, and the program's own (4 x 20 leaked blocks of 88 bytes, no
// improper use). Three ways: each thread owning the part of its arena
// (no tcache: a block freed by another thread goes back to its arena),
// parts taken over and shared (the tcache hands a thread blocks of
// another's arena), and one part every thread writes (one arena).
func TestPartsKeepEveryCount(t *testing.T) {
	bin := fixture(t, "parts.c")
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"own parts", []string{"GLIBC_TUNABLES=glibc.malloc.tcache_count=0"}, nil},
		{"parts taken over", nil, nil},
		{"one arena", nil, []string{"onearena"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			argv := append([]string{bin, "20000"}, c.args...)
			env := testEnv(c.env...)
			on := leakpathEnv(t, env, []string{"--fold=true", "--show-reachable"}, nil, argv...)
			off := leakpathEnv(t, env, []string{"--fold=false", "--show-reachable"}, nil, argv...)
			sameBehaviour(t, on, nativeEnv(t, env, nil, argv...))
			a, b := on.image(t, "parts"), off.image(t, "parts")
			if len(a.Errors) != 0 {
				t.Errorf("improper uses: %+v\n%s", a.Errors, on.text)
			}
			if blocks, bytes := leftFromWork(a); blocks != 80 || bytes != 80*88 {
				t.Errorf("%d blocks of %d bytes left from work, want 80 of 88 bytes:\n%s", blocks, bytes, on.text)
			}
			a.Totals.PeakBytes, b.Totals.PeakBytes = 0, 0
			if !reflect.DeepEqual(a.Totals, b.Totals) {
				t.Errorf("totals with folding:\n%+v\nwithout:\n%+v", a.Totals, b.Totals)
			}
			if n := foldedPairs(t, on); n < 4*20000/8 {
				if filtered() && c.name == "one arena" {
					// (The agent takes no part over under a seccomp
					// filter: only the first writer folds.)
					t.Logf("%d pairs folded: under an inherited seccomp filter, not checked", n)
				} else {
					t.Errorf("%d pairs folded of 80,000 allocations, want at least 10,000 (a quarter are freed at once)", n)
				}
			}
			if c.name == "parts taken over" {
				compareValgrind(t, on, a, 4*16, argv...)
			}
		})
	}
}

// TestPendingMapTakeOver: a thread that takes the map of pending blocks
// over from another must not write over a word the other named its own
// pending block in after the taker read it (testdata/fixtures/mapmove.c
// runs agent/fold.c with that interleaving made exactly). Written over,
// the block's free was recorded as a free of an unknown block: the rare
// false improper use of TestFoldingKeepsEveryCount/allocloop-threads on
// loaded machines, when the taker waited long for the map. And a thread
// writing another part of the map (another 64 MiB of addresses) takes
// nothing over: both words stay named, no membarrier is made.
func TestPendingMapTakeOver(t *testing.T) {
	foldFixture(t, "mapmove.c", "a pending block is named no more, its free did not fold, or another part was taken over",
		"interleaved 1", "the other thread never wrote during the take-over")
}

// foldFixture runs a fixture that compiles agent/fold.c in, built at -O0
// and -O2: it must exit 0 (else: fails) and print mark (else: unmet).
func foldFixture(t *testing.T, name, fails, mark, unmet string) {
	t.Helper()
	for _, opt := range []string{"-O0", "-O2"} {
		bin := fixture(t, name, opt, "-pthread", "-I"+filepath.Join(root, "agent"))
		out, err := exec.Command(bin).CombinedOutput()
		t.Logf("%s: %s", opt, out)
		if err != nil {
			t.Errorf("%s: %v: %s", opt, err, fails)
		}
		if !strings.Contains(string(out), mark) {
			t.Errorf("%s: %s", opt, unmet)
		}
	}
}

// TestPendingMapBusyIsPerThread: a thread that has just lost a part of
// the map of pending blocks, and takes it back, must wait for the store
// the new owner is about to make (testdata/fixtures/mapbusy.c runs
// agent/fold.c with that interleaving made exactly). With one busy flag a
// part, the loser cleared the new owner's on its way and did not wait:
// the new owner's store landed over its word, and its pending block was
// named nowhere (its free recorded as one of an unknown block).
func TestPendingMapBusyIsPerThread(t *testing.T) {
	foldFixture(t, "mapbusy.c", "a pending block is named no more", "A waited 1", "the taker did not wait for the owner's store")
}

// TestFoldingInASandbox: a program whose seccomp filter kills it on
// membarrier(2), which the agent uses to hand its map of pending blocks
// from one thread to another, runs as it does natively (no SIGSYS), with
// its two blocks of 77 bytes not freed (of any kind: a copy of an address
// may be left in a dead frame of this -O0 program). The same for a program
// started under a filter that kills on prctl(2) too (the agent's check for
// a filter, and its reading of thread names, use /proc then): the agent of
// a593dea killed it at exit, at 352520b at its start. And for a program
// that installs a filter killing on prctl(2), and openat(2), itself, with
// prctl(PR_SET_SECCOMP) or syscall(SYS_seccomp): the agent of d424ddf
// killed it (prctl at the second thread's take-over of the map, and at
// the thread's exit to read its name).
func TestFoldingInASandbox(t *testing.T) {
	prog := fixture(t, "seccomp.c")
	for _, c := range []struct {
		name string
		argv []string
		// names: every thread of the program's image is named, and boxed
		// among them (its own filter: the name prctl(PR_SET_NAME) set,
		// main's read before the filter) or not (no filter, or one it
		// started under: names read at exit, from /proc under a filter).
		names, boxed bool
	}{
		{"sandboxes itself", []string{prog}, true, true},
		{"started in a sandbox", []string{prog, "exec", prog, "plain"}, true, false},
		{"sandboxes itself against prctl", []string{prog, "prctl"}, false, false},
		{"sandboxes itself against openat", []string{prog, "openat"}, false, false},
		{"sandboxes itself by syscall", []string{prog, "syscall"}, false, false},
		{"probes for seccomp", []string{prog, "probe"}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := native(t, nil, c.argv...)
			if want.code != 0 || string(want.stdout) != "done\n" {
				t.Fatalf("natively: exit %d, stdout %q, stderr %s", want.code, want.stdout, want.stderr)
			}
			trace := filepath.Join(t.TempDir(), "boxed.lpt")
			got := leakpath(t, []string{"-o", trace}, nil, c.argv...)
			if got.code != want.code || string(got.stdout) != string(want.stdout) {
				t.Fatalf("under leakpath: exit %d, stdout %q; natively %d, %q\n%s", got.code, got.stdout, want.code, want.stdout, got.text)
			}
			if names := traceThreadNames(t, trace); c.names &&
				(len(names) != 2 || slices.Contains(names, "") || slices.Contains(names, "boxed") != c.boxed) {
				t.Errorf("thread names %q, want two, all named (boxed among them: %v)", names, c.boxed)
			}
			if blocks := blocksOfSize(got, 77); blocks != 2 {
				t.Errorf("%d blocks of 77 bytes not freed, want 2:\n%s", blocks, got.text)
			}
		})
	}
}

// TestLibseccompSandbox: a program that installs its filter with
// libseccomp (probes, then syscall(SYS_seccomp)), killing on prctl,
// membarrier and openat, runs under leakpath as natively, its two blocks
// of 77 bytes not freed.
func TestLibseccompSandbox(t *testing.T) {
	if _, err := os.Stat("/usr/include/seccomp.h"); err != nil {
		t.Skip("libseccomp-dev is not installed (apt-get install libseccomp-dev): no libseccomp program to build")
	}
	prog := fixture(t, "libseccomp.c", "-lseccomp", "-lpthread")
	want := native(t, nil, prog)
	if want.code != 0 || string(want.stdout) != "done\n" {
		t.Fatalf("natively: exit %d, stdout %q, stderr %s", want.code, want.stdout, want.stderr)
	}
	got := leakpath(t, nil, nil, prog)
	if got.code != 0 || string(got.stdout) != "done\n" {
		t.Fatalf("under leakpath: exit %d, stdout %q\n%s", got.code, got.stdout, got.text)
	}
	if blocks := blocksOfSize(got, 77); blocks != 2 {
		t.Errorf("%d blocks of 77 bytes not freed, want 2:\n%s", blocks, got.text)
	}
}

// blocksOfSize counts the blocks of size bytes r's report says were not
// freed (of any kind: a copy of an address may be left in a dead frame).
func blocksOfSize(r result, size uint64) uint64 {
	var n uint64
	for _, l := range r.report.Leaks {
		if l.Bytes == size*l.Blocks {
			n += l.Blocks
		}
	}
	return n
}

// TestPeakWithFolding: a program of one thread whose heap peaks while the
// agent holds most of it pending has the peak massif (valgrind) finds,
// folding or not: at a pending block's allocation (spike) and at a
// recorded call (realloc) with other blocks pending.
func TestPeakWithFolding(t *testing.T) {
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Skip("valgrind is not installed: no massif to compare the peak with (apt-get install valgrind)")
	}
	prog := fixture(t, "peaks.c")
	for _, mode := range []string{"spike", "realloc"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "massif.out")
			cmd := exec.Command(vg, "--tool=massif", "--peak-inaccuracy=0", "--massif-out-file="+out, prog, mode)
			cmd.Env = testEnv()
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("massif: %v\n%s", err, b)
			}
			want, err := massifPeak(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, fold := range []string{"--fold=true", "--fold=false"} {
				r := leakpath(t, []string{fold}, nil, prog, mode)
				if got := r.report.jsonImage.Totals.PeakBytes; got != want {
					t.Errorf("%s: peak %d B, massif's %d B", fold, got, want)
				}
			}
		})
	}
}

// massifPeak reads the heap bytes of the peak snapshot of a massif output
// file (mem_heap_B, the bytes asked for; the allocator's extra is apart).
func massifPeak(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var heapB string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "mem_heap_B="); ok {
			heapB = v
		}
		if line == "heap_tree=peak" {
			return strconv.ParseUint(heapB, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no peak snapshot", path)
}

// TestPendingRecordsFew: a program of many reallocs, with a few bytes
// pending, gets the agent's pending records at its highs, not after
// each realloc (which made a realloc loop's trace 55 % bigger), and its
// peak is at most those bytes low.
func TestPendingRecordsFew(t *testing.T) {
	prog := fixture(t, "peaks.c")
	trace := filepath.Join(t.TempDir(), "reallocs.lpt")
	r := leakpath(t, []string{"-o", trace}, nil, prog, "reallocs")
	off := leakpath(t, []string{"--fold=false"}, nil, prog, "reallocs")
	var highs, reallocs int
	eachTraceEvent(t, trace, func(ev *event.Event) {
		switch ev.Kind {
		case event.Pending:
			highs++
		case event.Realloc:
			reallocs++
		}
	})
	if reallocs < 20000 || highs == 0 || highs > reallocs/100 {
		t.Errorf("%d pending records for %d reallocs, want some, at most 1 %%", highs, reallocs)
	}
	// What is pending at the peak (the 8 blocks of 64 bytes kept, and
	// a small one) may be missing from it: 528 B here.
	if got, want := r.report.jsonImage.Totals.PeakBytes, off.report.jsonImage.Totals.PeakBytes; got > want || got+1024 < want {
		t.Errorf("peak %d B, %d B without folding: want at most 1 KiB less", got, want)
	}
}

// filtered says whether the tests run under a seccomp filter (a
// container's default profile): the agent then takes no part of the map
// of pending blocks over.
func filtered() bool {
	st, err := ptrace.ProcStatus(os.Getpid(), 0)
	return err == nil && st["Seccomp"] != "" && st["Seccomp"] != "0"
}
