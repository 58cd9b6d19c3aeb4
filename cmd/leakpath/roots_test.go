package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestRootsLikeMemcheck checks what counts as a root on programs where a
// stale copy of a pointer lies where memcheck reads none: below the
// program's frames (the allocator's and the exit's frames), in the dead
// frames of exited threads whose stacks glibc keeps, in the program's own
// memory that the kernel merged with a chunk malloc mapped. Each mode of
// the roots fixture against its stated kinds, and against memcheck's
// LEAK SUMMARY on the same binary where valgrind is installed (and
// LeakSanitizer's where it agrees with memcheck).
func TestRootsLikeMemcheck(t *testing.T) {
	bin := fixture(t, "roots.c", includeFlag())
	for _, tc := range []struct {
		mode       string
		definite   [2]uint64 // bytes, blocks
		memcheck   bool      // the fixture's blocks are malloc's under valgrind too
		lsanAgrees bool
	}{
		{mode: "static", definite: [2]uint64{1024, 1}, memcheck: true, lsanAgrees: true},
		// LeakSanitizer's scan at exit starts at its own stack pointer:
		// the copies in the exit's frames hide the leak from it.
		{mode: "spray", definite: [2]uint64{1024, 1}, memcheck: true},
		// LeakSanitizer does not check at _exit.
		{mode: "_exit", definite: [2]uint64{1024, 1}, memcheck: true},
		{mode: "threads", definite: [2]uint64{1600, 16}, memcheck: true, lsanAgrees: true},
		// Under valgrind the 1 MiB block is no glibc chunk (no mapping of
		// its own to put one beside): the fixture's own statement only.
		{mode: "merged", definite: [2]uint64{0, 0}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			argv := []string{bin, tc.mode}
			plain := native(t, nil, argv...)
			if plain.code == 77 {
				t.Skipf("the fixture cannot set the case up here: %s", plain.stderr)
			}
			if plain.code != 0 {
				t.Fatalf("without leakpath: exit %d, stderr %q", plain.code, plain.stderr)
			}
			r, k := runKinds(t, nil, argv...)
			sameBehaviour(t, r, plain)
			got := k.Totals.ByKind["definite"]
			if got.Bytes != tc.definite[0] || got.Blocks != tc.definite[1] {
				t.Errorf("definite: %d bytes in %d blocks, want %d in %d\n%s", got.Bytes, got.Blocks, tc.definite[0], tc.definite[1], r.text)
			}
			if tc.mode == "merged" {
				found := false
				for _, l := range k.Leaks {
					if l.Bytes == 48 && l.Blocks == 1 && len(l.Stack) > 0 && strings.HasSuffix(l.Stack[0].File, "roots.c") {
						found = true
						if l.Kind != "reachable" {
							t.Errorf("the 48 B block kept in the program's mapping beside the chunk: %s, want reachable", l.Kind)
						}
					}
				}
				if !found {
					t.Errorf("no 48 B block in the report:\n%s", r.text)
				}
			}
			if testing.Short() {
				t.Log("-short: memcheck and LeakSanitizer are not compared (make test compares them)")
				return
			}
			if tc.memcheck {
				compareLeakSummary(t, k, argv...)
			}
			if tc.lsanAgrees {
				compareLSan(t, tc.mode, got.Bytes, got.Blocks)
			}
		})
	}
}

var lsanSummary = regexp.MustCompile(`SUMMARY: LeakSanitizer: (\d+) byte\(s\) leaked in (\d+) allocation\(s\)`)

// compareLSan builds the roots fixture with LeakSanitizer and compares
// what it calls leaked in mode with bytes in blocks.
func compareLSan(t *testing.T, mode string, bytes, blocks uint64) {
	t.Helper()
	compareLSanOn(t, "roots.c", []string{includeFlag()}, []string{mode}, bytes, blocks)
}

// TestLeakCheckFromCaller: leakpath_leak_check scans the asking thread
// from the program's frame that called it; the dead frame of an earlier
// call, full of copies of a lost block's address, lies below, where the
// agent's frames go, and hides nothing.
func TestLeakCheckFromCaller(t *testing.T) {
	bin := fixture(t, "roots.c", includeFlag())
	if got := native(t, nil, bin, "check"); string(got.stdout) != "check 0\n" {
		t.Fatalf("without leakpath: %q, want \"check 0\"", got.stdout)
	}
	r := leakpath(t, []string{"--snapshot-dir", t.TempDir()}, nil, bin, "check")
	if string(r.stdout) != "check 1\n" {
		t.Errorf("leakpath_leak_check found %q, want \"check 1\" (the 72 B block)\n%s", r.stdout, r.text)
	}
}

// TestForkChildrenScanned: each of 200 fork children that exit is scanned
// at its exit (its block, kept in a global, is reachable), however its
// exit and its parent's fork interleave in the collector.
func TestForkChildrenScanned(t *testing.T) {
	const children = 200
	bin := fixture(t, "roots.c", includeFlag())
	r := leakpath(t, nil, nil, bin, "forks", "200")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.text)
	}
	var rep struct {
		kindsImage
		Processes []struct {
			PID int `json:"pid"`
			kindsImage
		} `json:"processes"`
	}
	if err := json.Unmarshal(r.reportJSON, &rep); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if len(rep.Processes) != children+1 {
		t.Fatalf("%d processes in the report, want %d", len(rep.Processes), children+1)
	}
	bad := 0
	for _, p := range rep.Processes[1:] {
		switch {
		case p.ScanError != "":
			t.Errorf("child %d: scan error %q", p.PID, p.ScanError)
			bad++
		case p.Scan == nil:
			t.Errorf("child %d: no scan at its exit, and no scan_error", p.PID)
			bad++
		case p.Totals.ByKind["definite"].Blocks != 0 || p.Totals.ByKind["reachable"].Blocks == 0:
			t.Errorf("child %d: kinds %v, want its block reachable", p.PID, p.Totals.ByKind)
			bad++
		}
		if bad > 5 {
			t.Fatalf("and more")
		}
	}
}

// TestNoExitScanSaysWhy: a process killed by a signal runs no exit hook,
// so nothing holds it for a scan: scan_error says so, and the text report
// once.
func TestNoExitScanSaysWhy(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to kill itself")
	}
	r := leakpath(t, nil, nil, sh, "-c", "kill -KILL $$")
	var k kindsImage
	if err := json.Unmarshal(r.reportJSON, &k); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if !strings.Contains(k.ScanError, "SIGKILL") {
		t.Errorf("scan_error %q, want why: killed by SIGKILL", k.ScanError)
	}
	if n := strings.Count(r.text, "killed by SIGKILL: no exit hook"); n != 1 {
		t.Errorf("the text report says it %d times, want once:\n%s", n, r.text)
	}
}

// TestPythonThreadNoLeak: python3 starting and joining a thread leaks
// nothing (memcheck: nothing lost). Its allocator's arenas lie in
// anonymous mappings the kernel merges with chunks malloc mapped; they are
// roots all the same.
func TestPythonThreadNoLeak(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	// The interpreter itself, not a wrapper script (pyenv's shims).
	out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 does not run: %v", err)
	}
	exe := strings.TrimSpace(string(out))
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("python3's executable %q: %v", exe, err)
	}
	argv := []string{exe, "-c", "import threading; t=threading.Thread(target=lambda: None); t.start(); t.join()"}
	r, k := runKinds(t, nil, argv...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.text)
	}
	for _, kind := range []string{"definite", "indirect", "possible"} {
		if got := k.Totals.ByKind[kind]; got.Blocks != 0 {
			t.Errorf("%s: %d bytes in %d blocks, want none\n%s", kind, got.Bytes, got.Blocks, r.text)
		}
	}
	compareLeakSummary(t, k, argv...)
}
