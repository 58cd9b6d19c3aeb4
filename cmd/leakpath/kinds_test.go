package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kindsImage is the part of a report's image the kind tests read.
type kindsImage struct {
	Totals struct {
		ByKind     map[string]struct{ Bytes, Blocks uint64 } `json:"by_kind"`
		Suppressed *struct{ Bytes, Blocks uint64 }           `json:"suppressed"`
	} `json:"totals"`
	Leaks []struct {
		Kind           string      `json:"kind"`
		Bytes          uint64      `json:"bytes"`
		Blocks         uint64      `json:"blocks"`
		IndirectBytes  uint64      `json:"indirect_bytes"`
		IndirectBlocks uint64      `json:"indirect_blocks"`
		Owner          []jsonFrame `json:"owner"`
		Suppressed     string      `json:"suppressed"`
		Stack          []jsonFrame `json:"stack"`
	} `json:"leaks"`
	Scan      *struct{ PauseSeconds float64 } `json:"scan"`
	ScanError string                          `json:"scan_error"`
}

// runKinds runs leakpath on argv and returns the first image's kinds part
// of the JSON report.
func runKinds(t *testing.T, flags []string, argv ...string) (result, kindsImage) {
	t.Helper()
	r := leakpath(t, flags, nil, argv...)
	var k kindsImage
	if err := json.Unmarshal(r.reportJSON, &k); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if k.ScanError != "" {
		t.Fatalf("the exit scan failed: %s\n%s", k.ScanError, r.text)
	}
	if k.Scan == nil || k.Totals.ByKind == nil {
		t.Fatalf("no scan in the report:\n%s", r.text)
	}
	return r, k
}

// TestLeakKinds checks the kind of each classic case in the kinds fixture.
func TestLeakKinds(t *testing.T) {
	bin := fixture(t, "kinds.c")
	lib := fixture(t, "kindslib.c", "-shared", "-fPIC")
	for _, mode := range []string{"", "thread", "dtls", "vfork"} {
		t.Run("mode="+mode, func(t *testing.T) {
			argv := []string{bin}
			if mode != "" {
				argv = append(argv, mode)
			}
			if mode == "dtls" {
				argv = append(argv, lib)
			}
			plain := native(t, nil, argv...)
			r, k := runKinds(t, nil, argv...)
			sameBehaviour(t, r, plain)
			want := map[uint64]string{
				101: "reachable", 102: "reachable", 104: "reachable", 105: "reachable", 111: "reachable",
				112: "reachable", // only in a register of the thread held at exit
				108: "possible", 32: "definite", 40: "indirect", 48: "indirect",
				109: "definite", 110: "definite",
			}
			switch mode {
			case "thread":
				want[103] = "reachable" // only in a register of a live thread
			case "dtls":
				want[106] = "reachable" // only in dynamic TLS (a dlopen'ed library's __thread)
			}
			got := map[uint64]string{}
			for _, l := range k.Leaks {
				// The fixture's own blocks (not the C runtime's, which
				// may be of the same sizes).
				if l.Blocks == 1 && len(l.Stack) > 0 && strings.HasSuffix(l.Stack[0].File, "kinds.c") {
					got[l.Bytes] = l.Kind
				}
				if l.Kind == "definite" && l.Bytes == 32 && (l.IndirectBytes != 88 || l.IndirectBlocks != 2) {
					t.Errorf("the tree's root holds %d bytes in %d blocks indirectly, want 88 in 2", l.IndirectBytes, l.IndirectBlocks)
				}
				if l.Kind == "indirect" && (l.Bytes == 40 || l.Bytes == 48) && !stackHas(l.Owner, "leak_tree") {
					t.Errorf("indirect %d B: owner stack %v, want leak_tree's", l.Bytes, l.Owner)
				}
			}
			for size, kind := range want {
				if got[size] != kind {
					t.Errorf("%d B block: kind %q, want %q", size, got[size], kind)
				}
			}
			// The cycle: the lower address is the clique's leader.
			if a, b := got[56], got[64]; !(a == "definite" && b == "indirect" || a == "indirect" && b == "definite") {
				t.Errorf("cycle: 56 B %q, 64 B %q; want one definite, one indirect", a, b)
			}
			if !strings.Contains(r.text, "by kind: definite 307 B in 4 blocks") {
				t.Errorf("text report lacks the sums by kind:\n%s", r.text)
			}
			compareLeakSummary(t, k, argv...)
		})
	}
}

var (
	vgKind     = regexp.MustCompile(`(definitely lost|indirectly lost|possibly lost|still reachable): ([\d,]+) bytes in ([\d,]+) blocks`)
	vgPossible = regexp.MustCompile(`([\d,]+) bytes in ([\d,]+) blocks are possibly lost in loss record[^\n]*\n((?:==\d+==\s+(?:at|by) [^\n]*\n)*)`)
)

// compareLeakSummary compares leakpath's sums by kind with memcheck's LEAK
// SUMMARY on the same program. Where they differ by design: memcheck
// calls some of the dynamic loader's blocks "possibly lost" (glibc's DTV
// of a live thread, whose TCB points inside it; dlopen's find-object
// table); leakpath knows they are the C runtime's and calls them
// reachable. And the agent's own thread-local storage makes every DTV 16
// bytes bigger.
func compareLeakSummary(t *testing.T, k kindsImage, argv ...string) {
	t.Helper()
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Log("valgrind is not installed: LEAK SUMMARY not compared (apt-get install valgrind)")
		return
	}
	logf := filepath.Join(t.TempDir(), "vg.log")
	cmd := exec.Command(vg, append([]string{"--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no",
		"--run-cxx-freeres=no", "--log-file=" + logf}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, testEnv()
	cmd.Run()
	log, err := os.ReadFile(logf)
	if err != nil {
		t.Fatalf("valgrind log: %v", err)
	}
	names := map[string]string{"definitely lost": "definite", "indirectly lost": "indirect",
		"possibly lost": "possible", "still reachable": "reachable"}
	vgSums := map[string][2]uint64{}
	for _, m := range vgKind.FindAllSubmatch(log, -1) {
		vgSums[names[string(m[1])]] = [2]uint64{atoi(string(m[2])), atoi(string(m[3]))}
	}
	if len(vgSums) == 0 {
		t.Fatalf("no LEAK SUMMARY in valgrind's log:\n%s", log)
	}
	var dtvBytes, dtvBlocks, grown uint64
	for _, m := range vgPossible.FindAllSubmatch(log, -1) {
		stack := string(m[3])
		if !strings.Contains(stack, "(rtld-malloc.h:") {
			continue // not the loader's own
		}
		dtvBytes += atoi(string(m[1]))
		dtvBlocks += atoi(string(m[2]))
		if strings.Contains(stack, "allocate_dtv") || strings.Contains(stack, "_dl_allocate_tls") {
			grown += 16 * atoi(string(m[2]))
		}
	}
	p := vgSums["possible"]
	vgSums["possible"] = [2]uint64{p[0] - dtvBytes, p[1] - dtvBlocks}
	r := vgSums["reachable"]
	vgSums["reachable"] = [2]uint64{r[0] + dtvBytes + grown, r[1] + dtvBlocks}
	for _, kind := range []string{"definite", "indirect", "possible", "reachable"} {
		got := k.Totals.ByKind[kind]
		want := vgSums[kind]
		t.Logf("%s: leakpath %d bytes in %d blocks; valgrind %d in %d (the loader's moved to reachable: %d bytes in %d blocks)",
			kind, got.Bytes, got.Blocks, want[0], want[1], dtvBytes, dtvBlocks)
		if got.Bytes != want[0] || got.Blocks != want[1] {
			t.Errorf("%s: leakpath %d bytes in %d blocks, valgrind %d in %d", kind, got.Bytes, got.Blocks, want[0], want[1])
		}
	}
}

// TestCheckKindsAndSuppressions checks --check against kinds and LSan
// suppressions: leaks all suppressed pass, --check-kinds reachable fails.
func TestCheckKindsAndSuppressions(t *testing.T) {
	bin := fixture(t, "kinds.c")
	if r := leakpath(t, []string{"--check"}, nil, bin); r.code != exitLeaks {
		t.Errorf("--check with definite leaks exited %d, want %d", r.code, exitLeaks)
	}
	supp := filepath.Join(t.TempDir(), "supp.txt")
	os.WriteFile(supp, []byte("# every leak of the fixture\nleak:leak_plain\nleak:leak_tree\nleak:leak_cycle\nleak:^main$\n"), 0o644)
	r, k := runKinds(t, []string{"--check", "--suppressions", supp}, bin)
	if r.code != 0 {
		t.Errorf("--check with every leak suppressed exited %d, want 0\n%s", r.code, r.text)
	}
	if k.Totals.Suppressed == nil || k.Totals.Suppressed.Blocks != 8 {
		t.Errorf("suppressed: %+v, want the 8 blocks of definite, indirect and possible leaks", k.Totals.Suppressed)
	}
	if !strings.Contains(r.text, "suppressions used:") || !strings.Contains(r.text, "leak:leak_tree") {
		t.Errorf("the text report does not list the suppressions used:\n%s", r.text)
	}
	if r := leakpath(t, []string{"--check", "--suppressions", supp, "--check-kinds", "reachable"}, nil, bin); r.code != exitLeaks {
		t.Errorf("--check-kinds reachable exited %d, want %d", r.code, exitLeaks)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(bad, []byte("leak:ok\nrace:foo\n"), 0o644)
	if r := runCapture(t, testEnv(), nil, lpBin, "run", "--suppressions", bad, "--", bin); r.code == 0 || !strings.Contains(string(r.stderr), "bad.txt:2") {
		t.Errorf("a bad suppressions file: exit %d, stderr %q; want an error naming bad.txt:2", r.code, r.stderr)
	}
}
