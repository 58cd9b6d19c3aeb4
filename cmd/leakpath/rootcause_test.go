package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// rootCauseFixture is a program of testdata/rootcause whose leak's cause
// is known: the function, and the lines marked LEAK in its source.
type rootCauseFixture struct {
	name     string   // the source, in testdata/rootcause
	lib      string   // a shared library it links with ("": none)
	alloc    string   // the function that allocates the leaking blocks
	function string   // the culprit function ("": no claim expected)
	leakLine []string // sources whose LEAK-marked lines are the culprit branches
	// needsBreakpoints: without breakpoints, hardware or software, its
	// handler, run every 200 us, is stepped an instruction at a time
	// and never done.
	needsBreakpoints bool
}

var rootCauseFixtures = []rootCauseFixture{
	{name: "seed.c", alloc: "funcA", function: "funcB", leakLine: []string{"seed.c"}},
	{name: "nested.c", alloc: "make", function: "process", leakLine: []string{"nested.c"}},
	{name: "twobranches.c", alloc: "serve", function: "serve", leakLine: []string{"twobranches.c"}},
	{name: "loopcount.c", alloc: "batch", function: "batch", leakLine: []string{"loopcount.c"}},
	{name: "crossthread.c", alloc: "produce", function: "produce", leakLine: []string{"crossthread.c"}},
	{name: "earlyreturn.cc", alloc: "handle", function: "handle", leakLine: []string{"earlyreturn.cc"}},
	{name: "libleak_app.c", lib: "libleak_lib.c", alloc: "lib_parse", function: "lib_parse", leakLine: []string{"libleak_lib.c"}},
	{name: "signals.c", alloc: "serve", function: "serve", leakLine: []string{"signals.c"}, needsBreakpoints: true},
	{name: "noleak.c"},
}

// markedLines returns the lines of src that carry a LEAK comment.
func markedLines(t *testing.T, src string) []int {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		// A comment on the line that says LEAK ("/* LEAK */",
		// "/* error condition 1: LEAK */").
		line := sc.Text()
		if i := strings.Index(line, "/*"); i >= 0 && strings.Contains(line[i:], "LEAK") {
			out = append(out, n)
		} else if i := strings.Index(line, "//"); i >= 0 && strings.Contains(line[i:], "LEAK") {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s marks no line LEAK", src)
	}
	return out
}

// buildRootCause compiles a fixture (and its library) into dir.
func buildRootCause(t *testing.T, fx rootCauseFixture, dir string) string {
	t.Helper()
	src := filepath.Join(root, "testdata", "rootcause")
	cc := "cc"
	if strings.HasSuffix(fx.name, ".cc") {
		cc = "c++"
	}
	bin := filepath.Join(dir, strings.TrimSuffix(strings.TrimSuffix(fx.name, ".c"), ".cc"))
	args := []string{"-g", "-O0", "-pthread", "-o", bin, filepath.Join(src, fx.name)}
	if fx.lib != "" {
		lib := filepath.Join(dir, "librc.so")
		if b, err := exec.Command("cc", "-g", "-O0", "-shared", "-fPIC", "-o", lib, filepath.Join(src, fx.lib)).CombinedOutput(); err != nil {
			t.Fatalf("cc %s: %v\n%s", fx.lib, err, b)
		}
		args = append(args, "-L"+dir, "-lrc", "-Wl,-rpath,"+dir)
	}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, fx.name, err, b)
	}
	return bin
}

type rootCauseDoc struct {
	Leaks []struct {
		Kind      string      `json:"kind"`
		Blocks    uint64      `json:"blocks"`
		Stack     []jsonFrame `json:"stack"`
		RootCause *struct {
			Status         string      `json:"status"`
			Traced         int         `json:"traced_runs"`
			Freed          int         `json:"freed_runs"`
			Leaked         int         `json:"leaked_runs"`
			Functions      []jsonFrame `json:"functions"`
			Branches       []jsonFrame `json:"branches"`
			LeaksWhenTaken []bool      `json:"leaks_when_taken"`
			FoundAfter     float64     `json:"found_after_seconds"`
		} `json:"root_cause"`
	} `json:"leaks"`
}

// testSlowdown is the --root-cause-slowdown of the tests that check what
// root causes name (what it costs is measured by make bench, not tested).
const testSlowdown = "4"

// TestRootCause runs each fixture with --root-cause: its output stays its
// own, and the report names the culprit function and the marked branch
// lines under the leak (and claims nothing for the program that does not
// leak).
func TestRootCause(t *testing.T) {
	for _, fx := range rootCauseFixtures {
		t.Run(fx.name, func(t *testing.T) {
			if hw, why := ptrace.HardwareBreakpoints(); fx.needsBreakpoints && !hw && !ptrace.SoftBreakpoints() {
				t.Skip("needs breakpoints: hardware ones do not fire (" + why + "), software ones are turned off")
			}
			t.Parallel()
			dir := t.TempDir()
			bin := buildRootCause(t, fx, dir)
			want := native(t, nil, bin)
			start := time.Now()
			trace := filepath.Join(dir, "rc.lpt")
			// Paced loosely: the windows cost more on a loaded machine
			// while the program's sleeps do not, and the default pace
			// (1.25) then leaves too few paths for an answer.
			r := leakpath(t, []string{"--root-cause", "--root-cause-slowdown", testSlowdown, "-o", trace}, nil, bin)
			t.Logf("%s: run %.2f s under leakpath --root-cause", fx.name, time.Since(start).Seconds())
			sameBehaviour(t, r, want)
			var d rootCauseDoc
			if err := json.Unmarshal(r.reportJSON, &d); err != nil {
				t.Fatal(err)
			}
			if fx.function == "" {
				for _, l := range d.Leaks {
					if l.RootCause != nil && l.RootCause.Status == "found" {
						t.Errorf("a root cause was claimed for a program that does not leak:\n%s", r.text)
					}
				}
				return
			}
			var wantLines []string
			for _, src := range fx.leakLine {
				for _, n := range markedLines(t, filepath.Join(root, "testdata", "rootcause", src)) {
					wantLines = append(wantLines, src+":"+strconv.Itoa(n))
				}
			}
			found := false
			for _, l := range d.Leaks {
				if l.Kind != "definite" || !stackHasFunc(l.Stack, fx.alloc) {
					continue
				}
				found = true
				rc := l.RootCause
				if rc == nil || rc.Status != "found" {
					t.Fatalf("no root cause found for the leak at %s:\n%s", fx.alloc, r.text)
				}
				t.Logf("traced %d: %d freed, %d leaked", rc.Traced, rc.Freed, rc.Leaked)
				if len(rc.Functions) == 0 || !sameFunc(rc.Functions[0].Function, fx.function) {
					t.Errorf("culprit functions %v, want %s first\n%s", rc.Functions, fx.function, r.text)
				}
				var got []string
				for _, b := range rc.Branches {
					got = append(got, filepath.Base(b.File)+":"+strconv.Itoa(b.Line))
				}
				for _, w := range wantLines {
					if !slices.Contains(got, w) {
						t.Errorf("culprit branches %v lack %s\n%s", got, w, r.text)
					}
				}
			}
			if !found {
				t.Fatalf("no definite leak allocated by %s:\n%s", fx.alloc, r.text)
			}
			// The trace keeps the root cause: the report from it says
			// the same.
			out, err := exec.Command(lpBin, "report", "--format", "json", trace).Output()
			if err != nil {
				t.Fatalf("leakpath report: %v", err)
			}
			var again rootCauseDoc
			if err := json.Unmarshal(out, &again); err != nil {
				t.Fatal(err)
			}
			same := false
			for i, l := range again.Leaks {
				if i < len(d.Leaks) && l.RootCause != nil && d.Leaks[i].RootCause != nil {
					a, b := l.RootCause, d.Leaks[i].RootCause
					same = a.Status == b.Status && a.Traced == b.Traced && len(a.Functions) == len(b.Functions) &&
						len(a.Functions) > 0 && a.Functions[0].Function == b.Functions[0].Function && len(a.Branches) == len(b.Branches)
				}
			}
			if !same {
				t.Errorf("leakpath report on the trace does not give the run's root cause:\n%s", out)
			}
			// The SARIF export shows the culprit branches as related
			// locations of the leak's result.
			out, err = exec.Command(lpBin, "report", "--format", "sarif", trace).Output()
			if err != nil {
				t.Fatalf("leakpath report --format sarif: %v", err)
			}
			var log struct {
				Runs []struct {
					Results []struct {
						Message struct {
							Text string `json:"text"`
						} `json:"message"`
						RelatedLocations []struct {
							PhysicalLocation struct {
								ArtifactLocation struct {
									URI string `json:"uri"`
								} `json:"artifactLocation"`
								Region struct {
									StartLine int `json:"startLine"`
								} `json:"region"`
							} `json:"physicalLocation"`
							Message struct {
								Text string `json:"text"`
							} `json:"message"`
						} `json:"relatedLocations"`
					} `json:"results"`
				} `json:"runs"`
			}
			if err := json.Unmarshal(out, &log); err != nil || len(log.Runs) != 1 {
				t.Fatalf("SARIF: %v\n%s", err, out)
			}
			var branches []string
			for _, res := range log.Runs[0].Results {
				if !strings.Contains(res.Message.Text, "root cause:") {
					continue
				}
				for _, rl := range res.RelatedLocations {
					if strings.Contains(rl.Message.Text, "branch") {
						pl := rl.PhysicalLocation
						branches = append(branches, path.Base(pl.ArtifactLocation.URI)+":"+strconv.Itoa(pl.Region.StartLine))
					}
				}
			}
			var jsonBranches []string // the JSON report's, which the checks above judge
			for _, l := range d.Leaks {
				if l.RootCause != nil && l.RootCause.Status == "found" {
					for _, b := range l.RootCause.Branches {
						jsonBranches = append(jsonBranches, filepath.Base(b.File)+":"+strconv.Itoa(b.Line))
					}
				}
			}
			if len(jsonBranches) == 0 {
				t.Errorf("no culprit branch in the JSON report to find in the SARIF log")
			}
			for _, w := range jsonBranches {
				if !slices.Contains(branches, w) {
					t.Errorf("SARIF: the root cause's branches %v lack %s", branches, w)
				}
			}
		})
	}
}

// sameFunc reports whether a symbolized function is fn (a C++ one
// demangled with its parameters).
func sameFunc(got, fn string) bool { return got == fn || strings.HasPrefix(got, fn+"(") }

func stackHasFunc(st []jsonFrame, fn string) bool {
	for _, f := range st {
		if sameFunc(f.Function, fn) {
			return true
		}
	}
	return false
}

// TestRootCauseWithSnapshot: snapshots taken while root-cause windows run
// pause them (a thread has one tracer) and let them go on: the snapshots
// succeed, a snapshot shows the root cause once it is found, the
// program's output stays its own, the root cause is in the report.
func TestRootCauseWithSnapshot(t *testing.T) {
	fx := rootCauseFixtures[0] // seed.c
	dir, _, want, js, cmd, pid, out := startSeed(t, "--root-cause")
	// A window traces the program's thread: its TracerPid is set. A
	// snapshot meanwhile pauses the windows; they go on after it.
	if !traced(pid, 10*time.Second) {
		t.Fatal("no root-cause window was seen in 10 s")
	}
	for i := 0; i < 2; i++ {
		if sout, serr, code := lp(t, "snapshot", "--quiet", "-o", filepath.Join(dir, "s"+strconv.Itoa(i)+".json"), pid); code != 0 {
			t.Fatalf("snapshot %d: exit %d\n%s%s", i, code, sout, serr)
		}
	}
	if !traced(pid, time.Second) { // well before the exit scan traces it too
		t.Error("no root-cause window after the snapshots: they did not go on")
	}
	shown := false
	for i := 2; i < 60 && !shown; i++ {
		time.Sleep(500 * time.Millisecond)
		snap := filepath.Join(dir, "s"+strconv.Itoa(i)+".json")
		if _, _, code := lp(t, "snapshot", "--quiet", "-o", snap, pid); code != 0 {
			break // the program ended
		}
		b, _ := os.ReadFile(snap)
		var d rootCauseDoc
		json.Unmarshal(b, &d)
		for _, l := range d.Leaks {
			if rc := l.RootCause; rc != nil && rc.Status == "found" && len(rc.Functions) > 0 && rc.Functions[0].Function == fx.function {
				shown = true
				t.Logf("snapshot %d shows the root cause (%d paths)", i, rc.Traced)
			}
		}
	}
	if !shown {
		t.Error("no snapshot showed the root cause before the program ended")
	}
	foundIn(t, cmd, out, want, js, fx.function)
}

// startSeed starts seed.c, JP2009-217617's worked example, for twice its
// usual work (time for snapshots and requests while it runs) under
// leakpath run with flags, the JSON report going to js.
func startSeed(t *testing.T, flags ...string) (dir string, argv []string, want result, js string, cmd *exec.Cmd, pid string, out *strings.Builder) {
	t.Helper()
	dir = t.TempDir()
	argv = []string{buildRootCause(t, rootCauseFixtures[0], dir), "6000"}
	want = native(t, nil, argv...)
	js = filepath.Join(dir, "r.json")
	cmd, pid, out = startUnder(t, argv, append(flags, "--json", js, "--report", filepath.Join(dir, "r.txt"))...)
	return
}

// startUnder starts argv under leakpath run with flags, and returns the
// program's pid, leakpath's child.
func startUnder(t *testing.T, argv []string, flags ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(lpBin, append(append(append([]string{"run"}, flags...), "--"), argv...)...)
	cmd.Env = testEnv()
	out := new(strings.Builder)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// Any of leakpath's threads may have started it; other children
	// (its probe of the breakpoints) run other programs.
	var pid string
	for i := 0; i < 500 && pid == ""; i++ {
		files, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "task", "*", "children"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, child := range strings.Fields(string(b)) {
				if line, _ := os.ReadFile("/proc/" + child + "/cmdline"); strings.HasPrefix(string(line), argv[0]+"\x00") {
					pid = child
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pid == "" {
		t.Fatalf("leakpath did not start %s", argv[0])
	}
	return cmd, pid, out
}

// foundIn waits for cmd and checks that the program behaved as natively
// and that the JSON report js names fn as a root cause.
func foundIn(t *testing.T, cmd *exec.Cmd, out *strings.Builder, want result, js, fn string) {
	t.Helper()
	err := cmd.Wait()
	if code := exitCode(err, cmd.ProcessState); code != want.code || out.String() != string(want.stdout) {
		t.Fatalf("under leakpath: exit %d, stdout %q; natively %d, %q", code, out.String(), want.code, want.stdout)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var d rootCauseDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	for _, l := range d.Leaks {
		rc := l.RootCause
		if rc != nil && rc.Status == "found" && len(rc.Functions) > 0 && rc.Functions[0].Function == fn {
			return
		}
	}
	t.Errorf("no root cause in %s:\n%s", fn, b)
}

// TestRootCauseOnRequest: with --root-cause-after=request no window runs
// until `leakpath root-cause PID` asks; then the root cause is found. A
// run without --root-cause refuses the request.
func TestRootCauseOnRequest(t *testing.T) {
	fx := rootCauseFixtures[0] // seed.c
	_, argv, want, js, cmd, pid, out := startSeed(t, "--root-cause", "--root-cause-after=request")
	if traced(pid, 1500*time.Millisecond) {
		t.Fatal("a root-cause window ran before the request")
	}
	sout, serr, code := lp(t, "root-cause", pid)
	if code != 0 || !strings.Contains(sout, "started") {
		t.Fatalf("root-cause: exit %d\n%s%s", code, sout, serr)
	}
	if sout, _, code := lp(t, "root-cause", pid); code != 0 || !strings.Contains(sout, "already on") {
		t.Errorf("a second request: exit %d, %q", code, sout)
	}
	if !traced(pid, 10*time.Second) {
		t.Fatal("no root-cause window was seen in 10 s after the request")
	}
	foundIn(t, cmd, out, want, js, fx.function)

	cmd, pid, _ = startUnder(t, argv, "--quiet")
	if _, serr, code := lp(t, "root-cause", pid); code != 1 || !strings.Contains(serr, "without --root-cause") {
		t.Errorf("request to a run without --root-cause: exit %d, %q", code, serr)
	}
	cmd.Process.Kill()
	cmd.Wait()
}

// traced reports whether the thread pid was seen traced (its TracerPid
// set) within timeout.
func traced(pid string, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}
