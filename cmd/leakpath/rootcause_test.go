package main

import (
	"bufio"
	"encoding/json"
	"io"
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
	"github.com/leakpath/leakpath/internal/testfixture"
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

// buildRootCause compiles a fixture (with its library, named by its
// path: the program finds it without a search path).
func buildRootCause(t *testing.T, fx rootCauseFixture) string {
	t.Helper()
	src := filepath.Join(root, "testdata", "rootcause")
	flags := []string{"-g", "-O0", "-pthread"}
	if fx.lib != "" {
		flags = append(flags, fixtureCache.Build(t, filepath.Join(src, fx.lib), "-g", "-O0", "-shared", "-fPIC"))
	}
	return fixtureCache.Build(t, filepath.Join(src, fx.name), flags...)
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
			if fx.name != "seed.c" && fx.name != "noleak.c" {
				exhaustive(t, "seed.c and noleak.c stand for the root-cause fixtures")
			}
			if hw, why := ptrace.HardwareBreakpoints(); fx.needsBreakpoints && !hw && !ptrace.SoftBreakpoints() {
				t.Skip("needs breakpoints: hardware ones do not fire (" + why + "), software ones are turned off")
			}
			t.Parallel()
			dir := t.TempDir()
			bin := buildRootCause(t, fx)
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
	t.Parallel()
	fx := rootCauseFixtures[0] // seed.c
	run := startSeed(t, "--root-cause")
	// A window traces the program's thread: its TracerPid is set. A
	// snapshot meanwhile pauses the windows; they go on after it.
	if !traced(run.pid) {
		t.Fatalf("no root-cause window was seen in %v", testfixture.HangGuard)
	}
	for i := 0; i < 2; i++ {
		if sout, serr, code := lp(t, "snapshot", "--quiet", "-o", filepath.Join(run.dir, "s"+strconv.Itoa(i)+".json"), run.pid); code != 0 {
			t.Fatalf("snapshot %d: exit %d\n%s%s", i, code, sout, serr)
		}
	}
	// The program runs until its stdin ends: the exit scan, which traces
	// it too, cannot be what is seen.
	if !traced(run.pid) {
		t.Error("no root-cause window after the snapshots: they did not go on")
	}
	run.awaitRootCause(t, fx.function)
	run.foundIn(t, fx.function)
}

// seedRun is seedwait.c (seed.c, JP2009-217617's worked example, until
// its stdin ends) under leakpath run.
type seedRun struct {
	dir  string
	argv []string
	want result // natively
	js   string // the JSON report
	*underRun
}

// startSeed starts seedwait.c under leakpath run with flags, the JSON
// report going to js.
func startSeed(t *testing.T, flags ...string) *seedRun {
	t.Helper()
	r := &seedRun{dir: t.TempDir()}
	r.argv = []string{fixtureCache.Build(t, filepath.Join(root, "testdata", "rootcause", "seedwait.c"), "-g", "-O0")}
	r.want = native(t, nil, r.argv...)
	r.js = filepath.Join(r.dir, "r.json")
	r.underRun = startUnder(t, r.argv, append(flags, "--json", r.js, "--report", filepath.Join(r.dir, "r.txt"))...)
	return r
}

// awaitRootCause takes snapshots until one shows fn as the root cause.
func (r *seedRun) awaitRootCause(t *testing.T, fn string) {
	t.Helper()
	i := 0
	testfixture.Poll(t, "a snapshot shows the root cause", func() bool {
		i++
		snap := filepath.Join(r.dir, "wait"+strconv.Itoa(i)+".json")
		if sout, serr, code := lp(t, "snapshot", "--quiet", "-o", snap, r.pid); code != 0 {
			t.Fatalf("snapshot %d: exit %d\n%s%s", i, code, sout, serr)
		}
		b, _ := os.ReadFile(snap)
		var d rootCauseDoc
		json.Unmarshal(b, &d)
		for _, l := range d.Leaks {
			if rc := l.RootCause; rc != nil && rc.Status == "found" && len(rc.Functions) > 0 && rc.Functions[0].Function == fn {
				t.Logf("snapshot %d shows the root cause (%d paths)", i, rc.Traced)
				return true
			}
		}
		return false
	})
}

// underRun is a program under leakpath run; its stdin is a pipe.
type underRun struct {
	*watched // leakpath's
	pid      string
	stdin    io.WriteCloser
}

// startUnder starts argv under leakpath run with flags, and returns once
// leakpath has started the program.
func startUnder(t *testing.T, argv []string, flags ...string) *underRun {
	t.Helper()
	cmd := exec.Command(lpBin, append(append(append([]string{"run"}, flags...), "--"), argv...)...)
	cmd.Env = testEnv()
	u := &underRun{}
	var err error
	if u.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	u.watched = startWatched(t, cmd)
	t.Cleanup(func() { u.stdin.Close() })
	u.pid = strconv.Itoa(programUnder(t, cmd.Process.Pid, argv[0]))
	return u
}

// foundIn ends the program (its stdin) and checks that it behaved as
// natively and that the JSON report names fn as a root cause.
func (r *seedRun) foundIn(t *testing.T, fn string) {
	t.Helper()
	r.stdin.Close()
	if code := r.wait(t); code != r.want.code || r.stdout.String() != string(r.want.stdout) {
		t.Fatalf("under leakpath: exit %d, stdout %q; natively %d, %q\n%s", code, r.stdout, r.want.code, r.want.stdout, r.stderr)
	}
	b, err := os.ReadFile(r.js)
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
	t.Parallel()
	fx := rootCauseFixtures[0] // seed.c
	run := startSeed(t, "--root-cause", "--root-cause-after=request")
	// No window for a while: a loaded machine makes this check weaker
	// (fewer requests meanwhile), never false.
	if tracedWithin(run.pid, 1500*time.Millisecond) {
		t.Fatal("a root-cause window ran before the request")
	}
	sout, serr, code := lp(t, "root-cause", run.pid)
	if code != 0 || !strings.Contains(sout, "started") {
		t.Fatalf("root-cause: exit %d\n%s%s", code, sout, serr)
	}
	if sout, _, code := lp(t, "root-cause", run.pid); code != 0 || !strings.Contains(sout, "already on") {
		t.Errorf("a second request: exit %d, %q", code, sout)
	}
	if !traced(run.pid) {
		t.Fatalf("no root-cause window was seen in %v after the request", testfixture.HangGuard)
	}
	run.awaitRootCause(t, fx.function)
	run.foundIn(t, fx.function)

	other := startUnder(t, run.argv, "--quiet")
	if _, serr, code := lp(t, "root-cause", other.pid); code != 1 || !strings.Contains(serr, "without --root-cause") {
		t.Errorf("request to a run without --root-cause: exit %d, %q", code, serr)
	}
	other.stdin.Close()
	if code := other.wait(t); code != 0 {
		t.Errorf("the program under leakpath run exited %d after a refused request", code)
	}
}

// traced reports whether the thread pid was seen traced (its TracerPid
// set) before testfixture.HangGuard passed or it ended.
func traced(pid string) bool { return tracedWithin(pid, testfixture.HangGuard) }

// tracedWithin reports whether the thread pid was seen traced within d,
// watched closely (windows are short).
func tracedWithin(pid string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat("/proc/" + pid); err != nil {
			return false
		}
		if tracedNow(pid) {
			return true
		}
	}
	return false
}

// tracedNow reports whether the thread pid is traced now.
func tracedNow(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
			return true
		}
	}
	return false
}
