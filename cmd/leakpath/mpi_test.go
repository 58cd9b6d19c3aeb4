package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/session"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// The MPI tests run `mpiexec -n 4 leakpath run -o DIR/out.%r.lpt ...` on
// testdata/fixtures/mpileak.c, whose rank r leaks r+1 blocks of 100 bytes
// from rank_leak, and report the four traces together. Open MPI allocates
// and leaks in every rank too: the tests look at mpileak's own leak groups,
// found by the function in their stacks.

// multiReport is `leakpath report --format json` of several traces.
type multiReport struct {
	Schema   string        `json:"schema"`
	Command  []string      `json:"command"`
	Totals   jsonTotalsT   `json:"totals"`
	Leaks    []mergedLeak  `json:"leaks"`
	Errors   []any         `json:"errors"`
	Traces   []traceReport `json:"traces"`
	Warnings []string      `json:"warnings"`
}

type mergedLeak struct {
	Bytes      uint64      `json:"bytes"`
	Blocks     uint64      `json:"blocks"`
	TraceCount int         `json:"trace_count"`
	Ranks      []int       `json:"ranks"`
	Stack      []jsonFrame `json:"stack"`
}

// traceReport is one trace's report: leakpath.report/v1 with its rank.
type traceReport struct {
	jsonReport
	Rank  *int   `json:"rank"`
	Trace string `json:"trace"`
}

// images returns the trace's images (the top level alone when it has one).
func (r *traceReport) images() []jsonImage {
	if len(r.Processes) > 0 {
		return r.Processes
	}
	return []jsonImage{r.jsonImage}
}

func rankStr(r *int) string {
	if r == nil {
		return "none"
	}
	return strconv.Itoa(*r)
}

// fnLeak sums the leak groups of the images whose stacks name fn.
func fnLeak(imgs []jsonImage, fn string) (bytes, blocks uint64) {
	return leakWhere(imgs, func(st []jsonFrame) bool { return stackHas(st, fn) })
}

// leakWhere sums the leaks of imgs whose stack match accepts.
func leakWhere(imgs []jsonImage, match func([]jsonFrame) bool) (bytes, blocks uint64) {
	for _, im := range imgs {
		for _, l := range im.Leaks {
			if match(l.Stack) {
				bytes += l.Bytes
				blocks += l.Blocks
			}
		}
	}
	return bytes, blocks
}

var (
	mpiOnce sync.Once
	mpiBin  string
	mpiErr  string
)

// mpiFixture returns mpiexec and mpileak built with mpicc, or skips.
func mpiFixture(t *testing.T) (mpiexec, bin string) {
	t.Helper()
	for _, tool := range []string{"mpicc", "mpiexec"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian: apt-get install openmpi-bin libopenmpi-dev)", tool)
		}
	}
	mpiOnce.Do(func() {
		out := filepath.Join(fixtures, "mpileak")
		if err := testfixture.Compile("mpicc", out, "-g", "-O0", filepath.Join(root, "testdata", "fixtures", "mpileak.c")); err != nil {
			mpiErr = err.Error()
			return
		}
		mpiBin = out
	})
	if mpiErr != "" {
		t.Fatal(mpiErr)
	}
	mpiexec, _ = exec.LookPath("mpiexec")
	return mpiexec, mpiBin
}

// mpiEnv is the tests' environment without any MPI rank (these tests
// may run inside a batch job), plus extra.
func mpiEnv(extra ...string) []string {
	var env []string
	for _, kv := range testEnv() {
		if slices.ContainsFunc(session.RankVars, func(v string) bool { return strings.HasPrefix(kv, v+"=") }) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runTimeout runs argv in env, killing it after d.
func runTimeout(t *testing.T, d time.Duration, env []string, argv ...string) (result, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, env
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running %v: %v", argv, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%v did not end within %v\nstderr: %s", argv, d, errb.Bytes())
	}
	return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: exitCode(err, cmd.ProcessState)}, took
}

// runMPI runs the 4-rank job under leakpath in dir: traces out.R.lpt,
// text reports r.R.txt, JSON reports j.R.json.
func runMPI(t *testing.T, dir string, args ...string) (result, time.Duration) {
	t.Helper()
	mpiexec, bin := mpiFixture(t)
	argv := []string{mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "4",
		lpBin, "run", "-o", filepath.Join(dir, "out.%r.lpt"), "--report", filepath.Join(dir, "r.%r.txt"),
		"--json", filepath.Join(dir, "j.%r.json"), "--", bin}
	env := mpiEnv("OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	return runTimeout(t, hangGuard, env, append(argv, args...)...)
}

// reportMulti runs `leakpath report --format json` on traces.
func reportMulti(t *testing.T, traces ...string) (*multiReport, result) {
	t.Helper()
	r, _ := runTimeout(t, hangGuard, testEnv(), append([]string{lpBin, "report", "--format", "json"}, traces...)...)
	if r.code != 0 && len(r.stdout) == 0 {
		return nil, r
	}
	var m multiReport
	if err := json.Unmarshal(r.stdout, &m); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, r.stdout)
	}
	if m.Schema != "leakpath.report/v1" {
		t.Fatalf("schema %q", m.Schema)
	}
	return &m, r
}

// mpiTraces returns the job's four traces, the last rank first: the
// report orders them itself.
func mpiTraces(t *testing.T, dir string) []string {
	t.Helper()
	var traces []string
	for r := 3; r >= 0; r-- {
		p := filepath.Join(dir, fmt.Sprintf("out.%d.lpt", r))
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("rank %d wrote no trace: %v", r, err)
		}
		traces = append(traces, p)
	}
	if more, _ := filepath.Glob(filepath.Join(dir, "out.*.lpt")); len(more) != 4 {
		t.Fatalf("traces %v, want out.0.lpt to out.3.lpt", more)
	}
	return traces
}

// checkSummary checks that the summary of m sums its traces: totals and
// the merged group of rank_leak.
func checkSummary(t *testing.T, m *multiReport) {
	t.Helper()
	var sum jsonTotalsT
	var lb, lk uint64
	var ranks []int
	for _, tr := range m.Traces {
		for _, im := range tr.images() {
			sum.Allocations += im.Totals.Allocations
			sum.Frees += im.Totals.Frees
			sum.AllocatedBytes += im.Totals.AllocatedBytes
			sum.Temporary += im.Totals.Temporary
			if !im.Exit.Exec {
				sum.LeakedBytes += im.Totals.LeakedBytes
				sum.LeakedBlocks += im.Totals.LeakedBlocks
			}
		}
		b, k := fnLeak(tr.images(), "rank_leak")
		if b > 0 {
			ranks = append(ranks, *tr.Rank)
		}
		lb, lk = lb+b, lk+k
	}
	got := m.Totals
	if got.Allocations != sum.Allocations || got.Frees != sum.Frees || got.AllocatedBytes != sum.AllocatedBytes ||
		got.Temporary != sum.Temporary || got.LeakedBytes != sum.LeakedBytes || got.LeakedBlocks != sum.LeakedBlocks {
		t.Errorf("summary totals %+v, the traces sum to %+v", got, sum)
	}
	if got.Allocations == 0 || got.LeakedBytes < lb {
		t.Errorf("summary totals %+v: no allocations, or fewer bytes leaked than mpileak's %d", got, lb)
	}
	// One merged group for rank_leak, however many ranks had it.
	var groups []mergedLeak
	for _, l := range m.Leaks {
		if stackHas(l.Stack, "rank_leak") {
			groups = append(groups, l)
		}
	}
	if len(groups) != 1 {
		t.Fatalf("%d merged groups of rank_leak, want 1: %+v", len(groups), groups)
	}
	g := groups[0]
	if g.Bytes != lb || g.Blocks != lk || g.TraceCount != len(ranks) || !slices.Equal(g.Ranks, ranks) {
		t.Errorf("merged rank_leak: %d B in %d blocks in %d traces, ranks %v; the traces have %d B in %d blocks, ranks %v",
			g.Bytes, g.Blocks, g.TraceCount, g.Ranks, lb, lk, ranks)
	}
}

// TestMPIJob: every rank ends normally; each writes its own files, named
// by its rank, and reports its rank and exactly its leak; the report of
// the four traces sums them.
func TestMPIJob(t *testing.T) {
	dir := t.TempDir()
	job, took := runMPI(t, dir)
	t.Logf("4-rank job under leakpath: %.2f s", took.Seconds())
	if job.code != 0 {
		t.Fatalf("mpiexec exited %d\nstdout: %s\nstderr: %s", job.code, job.stdout, job.stderr)
	}
	traces := mpiTraces(t, dir)
	pids := map[int]bool{}
	for r := 0; r < 4; r++ {
		text, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("r.%d.txt", r)))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		head := regexp.MustCompile(`^leakpath: \S+ exited with code 0 after [0-9.]+ s \(pid (\d+), rank (\d+)\)\n`).FindStringSubmatch(string(text))
		if head == nil || head[2] != strconv.Itoa(r) {
			t.Errorf("rank %d: report header %q", r, strings.SplitN(string(text), "\n", 2)[0])
		} else {
			pid, _ := strconv.Atoi(head[1])
			pids[pid] = true
		}
		var live traceReport
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("j.%d.json", r)))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if err := json.Unmarshal(b, &live); err != nil {
			t.Fatalf("rank %d JSON: %v", r, err)
		}
		if live.Rank == nil || *live.Rank != r {
			t.Errorf("rank %d: JSON rank %s", r, rankStr(live.Rank))
		}
		if bytes, blocks := fnLeak(live.images(), "rank_leak"); bytes != uint64(100*(r+1)) || blocks != uint64(r+1) {
			t.Errorf("rank %d: rank_leak leaked %d B in %d blocks, want %d B in %d", r, bytes, blocks, 100*(r+1), r+1)
		}
	}
	if len(pids) != 4 {
		t.Errorf("pids %v: want four processes", pids)
	}
	start := time.Now()
	m, rep := reportMulti(t, traces...)
	t.Logf("leakpath report of the 4 traces: %.2f s", time.Since(start).Seconds())
	if rep.code != 0 || m == nil {
		t.Fatalf("leakpath report: exit %d: %s", rep.code, rep.stderr)
	}
	if len(m.Traces) != 4 {
		t.Fatalf("%d traces in the report, want 4", len(m.Traces))
	}
	for i, tr := range m.Traces {
		if tr.Rank == nil || *tr.Rank != i || filepath.Base(tr.Trace) != fmt.Sprintf("out.%d.lpt", i) {
			t.Errorf("trace %d of the report: rank %s, %s", i, rankStr(tr.Rank), tr.Trace)
			continue
		}
		if bytes, blocks := fnLeak(tr.images(), "rank_leak"); bytes != uint64(100*(i+1)) || blocks != uint64(i+1) {
			t.Errorf("rank %d from its trace: rank_leak leaked %d B in %d blocks", i, bytes, blocks)
		}
	}
	checkSummary(t, m)
	for _, l := range m.Leaks {
		if stackHas(l.Stack, "rank_leak") && (l.Bytes != 1000 || l.Blocks != 10 || !slices.Equal(l.Ranks, []int{0, 1, 2, 3})) {
			t.Errorf("merged rank_leak: %d B in %d blocks, ranks %v; want 1000 B in 10, ranks 0-3", l.Bytes, l.Blocks, l.Ranks)
		}
	}
	if len(m.Command) == 0 || !strings.HasPrefix(filepath.Base(m.Command[0]), "mpileak") {
		t.Errorf("summary command %q", m.Command)
	}

	// The text: a section per rank, in order, then the summary.
	text, _ := runTimeout(t, hangGuard, testEnv(), append([]string{lpBin, "report"}, traces...)...)
	if text.code != 0 {
		t.Fatalf("leakpath report (text): exit %d: %s", text.code, text.stderr)
	}
	s := string(text.stdout)
	last := -1
	for r := 0; r < 4; r++ {
		i := strings.Index(s, fmt.Sprintf("==== rank %d: %s\n", r, filepath.Join(dir, fmt.Sprintf("out.%d.lpt", r))))
		if i < last {
			t.Errorf("section of rank %d missing or out of order", r)
		}
		last = i
		if !regexp.MustCompile(fmt.Sprintf(`\(pid \d+, rank %d\)`, r)).MatchString(s) {
			t.Errorf("no header of rank %d", r)
		}
	}
	if i := strings.Index(s, "==== summary of 4 traces (ranks 0-3)\n"); i < last {
		t.Errorf("summary missing or not last:\n%s", s)
	}
	if !regexp.MustCompile(`\nleakpath: 4 traces: \d+ leak groups \(.*\) not freed(, \d+ in your code)?; 0 improper uses\.\n$`).MatchString(s) {
		t.Errorf("text report ends with %q", s[max(0, len(s)-200):])
	}
}

// TestMPIRankFails: rank 2 exits with code 3 after MPI_Finalize, while
// the others sleep (10 minutes: a rank not killed makes the job outlast
// runMPI's hang guard); mpiexec then kills them (SIGTERM, then SIGKILL, to
// each process group: leakpath and its program). Every rank's trace is
// readable and names its rank; rank 2's leak is exact; a killed rank has
// at most its leak (exactly, when its trace is whole), and the summary
// sums what the traces hold.
func TestMPIRankFails(t *testing.T) {
	dir := t.TempDir()
	job, took := runMPI(t, dir, "2", "600")
	t.Logf("4-rank job, rank 2 failing: %.2f s", took.Seconds())
	if job.code != 3 {
		t.Errorf("mpiexec exited %d, want rank 2's 3\nstderr: %s", job.code, job.stderr)
	}
	traces := mpiTraces(t, dir)
	// Rank 2 ended by itself: its report is whole.
	text, err := os.ReadFile(filepath.Join(dir, "r.2.txt"))
	if err != nil || !regexp.MustCompile(`^leakpath: \S+ exited with code 3 after [0-9.]+ s \(pid \d+, rank 2\)\n(.|\n)*\nleakpath: \d+ leak groups`).Match(text) {
		t.Errorf("rank 2's report (%v):\n%s", err, text)
	}
	m, rep := reportMulti(t, traces...)
	if rep.code != 0 || m == nil {
		t.Fatalf("leakpath report: exit %d: %s", rep.code, rep.stderr)
	}
	if len(m.Traces) != 4 {
		t.Fatalf("%d traces in the report, want 4", len(m.Traces))
	}
	for i, tr := range m.Traces {
		if tr.Rank == nil || *tr.Rank != i {
			t.Errorf("trace %d of the report: rank %s (%s)", i, rankStr(tr.Rank), tr.Trace)
			continue
		}
		bytes, blocks := fnLeak(tr.images(), "rank_leak")
		whole := !slices.ContainsFunc(tr.Warnings, func(w string) bool { return strings.Contains(w, "ends early") })
		exit := tr.Exit.Signal
		if tr.Exit.Code != nil {
			exit = fmt.Sprintf("code %d", *tr.Exit.Code)
		}
		t.Logf("rank %d: exit %q, trace whole %v, rank_leak %d B in %d blocks", i, exit, whole, bytes, blocks)
		switch {
		case i == 2:
			if tr.Exit.Code == nil || *tr.Exit.Code != 3 || bytes != 300 || blocks != 3 || !whole {
				t.Errorf("rank 2: exit %q, whole %v, rank_leak %d B in %d blocks; want code 3, whole, 300 B in 3", exit, whole, bytes, blocks)
			}
		default:
			if tr.Exit.Code != nil {
				t.Errorf("rank %d exited with code %d: it should have been killed", i, *tr.Exit.Code)
			}
			// Killed when rank 2 failed: perhaps before it leaked (leaving
			// MPI_Init is not collective, and a loaded machine can keep
			// a rank in it), so at most its leak, whole trace or not.
			if bytes > uint64(100*(i+1)) || blocks > uint64(i+1) || bytes != 100*blocks {
				t.Errorf("rank %d: rank_leak leaked %d B in %d blocks (trace whole: %v), want at most %d B in %d, 100 B each",
					i, bytes, blocks, whole, 100*(i+1), i+1)
			}
		}
	}
	checkSummary(t, m)
}

// TestReportSeveralTraces: traces without ranks are ordered by name; a
// cut trace is reported up to its end with a warning; a file that is not
// a trace is an error naming it, exit code 1, and the others are reported
// all the same.
func TestReportSeveralTraces(t *testing.T) {
	bin := fixture(t, "busy.c")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.lpt"), filepath.Join(dir, "b.lpt")
	ra := leakpathEnv(t, mpiEnv(), []string{"-o", a}, nil, bin, "200")
	rb := leakpathEnv(t, mpiEnv("PMI_RANK=7"), []string{"-o", b}, nil, bin, "200")
	if ra.report.Totals.LeakedBlocks == 0 || rb.report.Totals.LeakedBlocks == 0 {
		t.Fatalf("busy leaked nothing: %+v %+v", ra.report.Totals, rb.report.Totals)
	}
	if !regexp.MustCompile(`^leakpath: \S+ exited with code 0 after [0-9.]+ s \(pid \d+, rank 7\)\n`).MatchString(rb.text) ||
		strings.Contains(strings.SplitN(ra.text, "\n", 2)[0], "rank") {
		t.Errorf("headers without and with PMI_RANK=7:\n%s\n%s", strings.SplitN(ra.text, "\n", 2)[0], strings.SplitN(rb.text, "\n", 2)[0])
	}
	full, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "c.lpt")
	os.WriteFile(cut, full[:len(full)*2/3], 0o644)
	notTrace := filepath.Join(dir, "d.lpt")
	os.WriteFile(notTrace, []byte("not a trace\n"), 0o644)

	m, rep := reportMulti(t, notTrace, cut, a, b)
	if rep.code != 1 || !strings.Contains(string(rep.stderr), "d.lpt") || m == nil {
		t.Fatalf("exit %d (want 1), stderr %q, report %v", rep.code, rep.stderr, m != nil)
	}
	// Ranked first (b, rank 7), then by name: a, c.
	var names []string
	for _, tr := range m.Traces {
		names = append(names, filepath.Base(tr.Trace))
	}
	if !slices.Equal(names, []string{"b.lpt", "a.lpt", "c.lpt"}) {
		t.Errorf("traces in the order %v, want b.lpt a.lpt c.lpt", names)
	}
	if len(m.Traces) == 3 {
		whole, cutR := m.Traces[1], m.Traces[2]
		if whole.Totals.Allocations != ra.report.Totals.Allocations || whole.Totals.LeakedBytes != ra.report.Totals.LeakedBytes {
			t.Errorf("a.lpt: %+v, live %+v", whole.Totals, ra.report.Totals)
		}
		if len(cutR.Warnings) == 0 || cutR.Totals.Allocations >= whole.Totals.Allocations {
			t.Errorf("c.lpt (cut): %d allocations of %d, warnings %q", cutR.Totals.Allocations, whole.Totals.Allocations, cutR.Warnings)
		}
		if sum := whole.Totals.LeakedBytes + cutR.Totals.LeakedBytes + m.Traces[0].Totals.LeakedBytes; m.Totals.LeakedBytes != sum {
			t.Errorf("summary: %d B leaked, the traces %d", m.Totals.LeakedBytes, sum)
		}
	}
	if !slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, "d.lpt could not be read") }) ||
		!slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.Contains(w, "c.lpt ends early") }) {
		t.Errorf("summary warnings %q", m.Warnings)
	}
	// busy's leak, from the same code in each: one merged group. (The
	// cut trace may also hold a block of the loop above it, allocated
	// before the cut and freed after: a group of its own.)
	leakLine := fixtureLines(t, "busy.c")["leak"]
	atLeak := func(st []jsonFrame) bool { return top(st).line == leakLine }
	var merged []mergedLeak
	for _, l := range m.Leaks {
		if atLeak(l.Stack) {
			merged = append(merged, l)
		}
	}
	var had int
	var bytes uint64
	for _, tr := range m.Traces {
		if b, _ := leakWhere(tr.images(), atLeak); b > 0 {
			had, bytes = had+1, bytes+b
		}
	}
	if had < 2 || len(merged) != 1 || merged[0].TraceCount != had || merged[0].Bytes != bytes || !slices.Equal(merged[0].Ranks, []int{7}) {
		t.Errorf("merged groups of busy's leak: %+v; %d traces have %d B of it", merged, had, bytes)
	}
	// Nothing readable: exit 1, each file named.
	r, _ := runTimeout(t, hangGuard, testEnv(), lpBin, "report", notTrace, filepath.Join(dir, "missing.lpt"))
	if r.code != 1 || !strings.Contains(string(r.stderr), "d.lpt") || !strings.Contains(string(r.stderr), "missing.lpt") {
		t.Errorf("no readable trace: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestOutputNames: %p names files by the program's pid, %r by the MPI rank
// (by the pid, with a note, without one), %% is a percent sign, and any
// other % is a usage error before anything runs.
func TestOutputNames(t *testing.T) {
	bin := fixture(t, "busy.c")
	dir := t.TempDir()
	run := func(env []string, args ...string) result {
		r, _ := runTimeout(t, hangGuard, env, append(append([]string{lpBin, "run"}, args...), "--", bin, "50")...)
		return r
	}
	r := run(mpiEnv(), "-o", filepath.Join(dir, "t.%p.lpt"), "--json", filepath.Join(dir, "j.%r.json"),
		"--report", filepath.Join(dir, "r.%%.%p.txt"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := strings.Count(string(r.stderr), "no MPI rank in the environment"); n != 1 {
		t.Errorf("the note of no rank printed %d times: %q", n, r.stderr)
	}
	js, _ := filepath.Glob(filepath.Join(dir, "j.*.json"))
	if len(js) != 1 {
		t.Fatalf("JSON reports %v", js)
	}
	b, _ := os.ReadFile(js[0])
	var rep jsonReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(rep.PID)
	for _, name := range []string{"t." + pid + ".lpt", "j." + pid + ".json", "r.%." + pid + ".txt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("no %s (the program's pid is %s): %v", name, pid, err)
		}
	}
	if tr, _, code := reportJSON(t, filepath.Join(dir, "t."+pid+".lpt")); code != 0 || tr.PID != rep.PID {
		t.Errorf("trace named by the pid: exit %d", code)
	}
	// With a rank, %r is the rank; no note.
	r = run(mpiEnv("OMPI_COMM_WORLD_RANK=5"), "-o", filepath.Join(dir, "rank.%r.lpt"), "--report", filepath.Join(dir, "rank.%r.txt"))
	text, err := os.ReadFile(filepath.Join(dir, "rank.5.txt"))
	if r.code != 0 || err != nil || strings.Contains(string(r.stderr), "no MPI rank") || !strings.Contains(string(text), ", rank 5)") {
		t.Errorf("with a rank: exit %d, %v, stderr %q, report %q", r.code, err, r.stderr, text)
	}
	if m, _ := reportMulti(t, filepath.Join(dir, "t."+pid+".lpt"), filepath.Join(dir, "rank.5.lpt")); m == nil ||
		len(m.Traces) != 2 || m.Traces[0].Rank == nil || *m.Traces[0].Rank != 5 || m.Traces[1].Rank != nil {
		t.Errorf("ranks from the traces: %+v", m)
	}
	// A bad directive: a usage error, nothing run, no file made.
	marker := filepath.Join(dir, "ran")
	for _, bad := range []string{"x.%x.lpt", "x.%"} {
		r, _ = runTimeout(t, hangGuard, mpiEnv(), lpBin, "run", "-o", filepath.Join(dir, bad), "--", "touch", marker)
		if r.code != 2 || !strings.Contains(string(r.stderr), "-o ") || !strings.Contains(string(r.stderr), bad) {
			t.Errorf("-o %s: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran despite the bad path")
	}
	if xs, _ := filepath.Glob(filepath.Join(dir, "x.*")); len(xs) > 0 {
		t.Errorf("files made: %v", xs)
	}
	// A file named by the pid in a directory that does not exist: fails
	// before running.
	r, _ = runTimeout(t, hangGuard, mpiEnv(), lpBin, "run", "--report", filepath.Join(dir, "nodir", "r.%p.txt"), "--", "touch", marker)
	if r.code == 0 || !strings.Contains(string(r.stderr), "nodir") {
		t.Errorf("missing directory: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran despite the missing directory")
	}
}

// TestSIGTERMForwarded: SIGTERM sent to leakpath alone (mpiexec sends it
// to the process group; a batch system may not) reaches the program, and
// leakpath still writes its trace and both reports. The signal goes once
// the trace holds the allocations of 100 leaks, however long that takes.
func TestSIGTERMForwarded(t *testing.T) {
	bin := fixture(t, "busy.c")
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.lpt")
	stop := filepath.Join(dir, "stop")
	cmd := exec.Command(lpBin, "run", "-o", trace, "--report", filepath.Join(dir, "r.txt"), "--json", filepath.Join(dir, "r.json"),
		"--", bin, "600000", stop)
	cmd.Env = testEnv()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer os.WriteFile(stop, nil, 0o644) // a failed test's program ends too
	// busy leaks a block every 1,001 allocations.
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testfixture.Poll(t, "the trace holds 100 leaks", func() bool { return traceAllocations(t, trace) >= 100*1001 })
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	t.Logf("leakpath ended %.3f s after SIGTERM", time.Since(start).Seconds())
	if code := exitCode(err, cmd.ProcessState); code != 128+int(syscall.SIGTERM) {
		t.Errorf("leakpath exited %d, want %d (the program killed by SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
	text, err := os.ReadFile(filepath.Join(dir, "r.txt"))
	if err != nil || !regexp.MustCompile(`^leakpath: \S+ was killed by SIGTERM after`).Match(text) || !strings.Contains(string(text), "\nLEAK ") {
		t.Errorf("report (%v):\n%s", err, text)
	}
	var live jsonReport
	if b, err := os.ReadFile(filepath.Join(dir, "r.json")); err != nil || json.Unmarshal(b, &live) != nil {
		t.Fatalf("JSON report: %v", err)
	}
	off, stderr, code := reportJSON(t, trace)
	if code != 0 || slices.ContainsFunc(off.Warnings, func(w string) bool { return strings.Contains(w, "ends early") }) {
		t.Fatalf("trace: exit %d, %s, warnings %q", code, stderr, off.Warnings)
	}
	if live.Exit.Signal != "SIGTERM" || off.Exit.Signal != "SIGTERM" || off.Totals.LeakedBytes != live.Totals.LeakedBytes ||
		off.Totals.Allocations != live.Totals.Allocations || live.Totals.LeakedBlocks < 100 {
		t.Errorf("live %+v %+v, from the trace %+v %+v", live.Exit, live.Totals, off.Exit, off.Totals)
	}
}
