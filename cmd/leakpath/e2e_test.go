package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// The end-to-end tests of the command line run the real leakpath binary
// through the shared harness, internal/testfixture/e2e; the names below
// are its own under the names this package's tests use.

var (
	root     string // the repository
	binDir   string // holds leakpath and the agent link
	lpBin    string
	fixtures string // compiled fixtures
	// fixtureCache builds testdata/fixtures into fixtures.
	fixtureCache *testfixture.Cache
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	cleanup, err := e2e.Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	root, binDir, lpBin, fixtures, fixtureCache = e2e.Root, e2e.BinDir, e2e.Bin, e2e.Fixtures, e2e.FixtureCache
	return m.Run()
}

type (
	jsonImage   = e2e.Image
	jsonFrame   = e2e.Frame
	jsonTotalsT = e2e.Totals
)

// jsonReport is e2e.Report with the image under this package's name.
type jsonReport struct {
	Schema string
	jsonImage
	Processes []jsonImage
	Warnings  []string
}

// result is e2e.Result with this package's field names.
type result struct {
	stdout, stderr []byte
	code           int
	report         *jsonReport
	reportJSON     []byte
	text           string
}

func fromE2E(r e2e.Result) result {
	out := result{stdout: r.Stdout, stderr: r.Stderr, code: r.Code, reportJSON: r.ReportJSON, text: r.Text}
	if r.Report != nil {
		out.report = &jsonReport{r.Report.Schema, r.Report.Image, r.Report.Processes, r.Report.Warnings}
	}
	return out
}

func (r result) toE2E() e2e.Result {
	out := e2e.Result{Stdout: r.stdout, Stderr: r.stderr, Code: r.code, ReportJSON: r.reportJSON, Text: r.text}
	if r.report != nil {
		out.Report = &e2e.Report{Schema: r.report.Schema, Image: r.report.jsonImage, Processes: r.report.Processes, Warnings: r.report.Warnings}
	}
	return out
}

func fixture(t testing.TB, name string, flags ...string) string {
	t.Helper()
	return e2e.Fixture(t, name, flags...)
}

func exhaustive(t *testing.T, what string) { t.Helper(); e2e.Exhaustive(t, what) }

func exitCode(err error, st *os.ProcessState) int { return e2e.ExitCode(err, st) }

func testEnv(extra ...string) []string { return e2e.TestEnv(extra...) }

func valgrindEnv(t testing.TB) []string { return e2e.ValgrindEnv(t) }

func native(t testing.TB, stdin []byte, argv ...string) result {
	t.Helper()
	return fromE2E(e2e.Native(t, stdin, argv...))
}

func nativeEnv(t testing.TB, env []string, stdin []byte, argv ...string) result {
	t.Helper()
	return fromE2E(e2e.RunCapture(t, env, stdin, argv...))
}

func runCapture(t testing.TB, env []string, stdin []byte, argv ...string) result {
	t.Helper()
	return fromE2E(e2e.RunCapture(t, env, stdin, argv...))
}

func leakpath(t testing.TB, flags []string, stdin []byte, argv ...string) result {
	t.Helper()
	return fromE2E(e2e.Leakpath(t, flags, stdin, argv...))
}

func leakpathEnv(t testing.TB, env []string, flags []string, stdin []byte, argv ...string) result {
	t.Helper()
	return fromE2E(e2e.LeakpathEnv(t, env, flags, stdin, argv...))
}

func (r result) image(t testing.TB, name string) jsonImage {
	t.Helper()
	return r.toE2E().Image(t, name)
}

func stackHas(st []jsonFrame, fn string) bool { return e2e.StackHas(st, fn) }

func sameBehaviour(t *testing.T, with, without result) {
	t.Helper()
	e2e.SameBehaviour(t, with.toE2E(), without.toE2E())
}

func atoi(s string) uint64 { return e2e.Atoi(s) }

func includeFlag() string { return e2e.IncludeFlag() }

type kindsImage = e2e.KindsImage

func runKinds(t *testing.T, flags []string, argv ...string) (result, kindsImage) {
	t.Helper()
	r, k := e2e.RunKinds(t, flags, argv...)
	return fromE2E(r), k
}

func compareLeakSummary(t *testing.T, k kindsImage, argv ...string) {
	t.Helper()
	e2e.CompareLeakSummary(t, k, argv...)
}

func compileTo(t *testing.T, cc, out string, args ...string) {
	t.Helper()
	e2e.CompileTo(t, cc, out, args...)
}

func memcheckLog(t *testing.T, argv ...string) []byte {
	t.Helper()
	return e2e.MemcheckLog(t, argv...)
}

func eachTraceEvent(t testing.TB, path string, each func(ev *event.Event)) {
	t.Helper()
	e2e.EachTraceEvent(t, path, each)
}

type jsonTypesT = e2e.Types

func typesOf(t *testing.T, reportJSON []byte) *jsonTypesT {
	t.Helper()
	return e2e.TypesOf(t, reportJSON)
}

// uiServer is e2e.UIServer with this package's names.
type uiServer struct {
	*e2e.UIServer
	printed string
	cmd     *exec.Cmd
}

func wrapUI(s *e2e.UIServer) *uiServer { return &uiServer{s, s.Printed, s.Cmd} }

func startUI(t *testing.T, trace string) *uiServer {
	t.Helper()
	return wrapUI(e2e.StartUI(t, trace))
}

func startUIAsync(t *testing.T, trace string) *uiServer {
	t.Helper()
	return wrapUI(e2e.StartUIAsync(t, trace))
}

func (s *uiServer) get(t *testing.T, path string, v any) {
	t.Helper()
	s.Get(t, path, v)
}

func exportTrace(t *testing.T) (string, *jsonReport) {
	t.Helper()
	trace, r := e2e.ExportTrace(t)
	return trace, fromE2E(e2e.Result{Report: r}).report
}

func exportReport(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	return e2e.LeakpathReport(t, dir, args...)
}

func lp(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return e2e.Run(t, args...)
}

type uiTimeline = e2e.UITimeline

var vgKind, vgPossible = e2e.VGKind, e2e.VGPossible

func funcs(st []jsonFrame) string { return e2e.Funcs(st) }

type snapDoc = e2e.SnapDoc

func readSnapDoc(t *testing.T, path string) *snapDoc {
	t.Helper()
	return e2e.ReadSnapDoc(t, path)
}
