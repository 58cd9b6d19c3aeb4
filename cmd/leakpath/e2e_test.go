package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// The end-to-end tests run the real leakpath binary, built once by
// TestMain with the agent beside it, on fixture programs compiled from
// testdata/fixtures.

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

// slowMachineTimeout replaces go test's default limit of 10 minutes for
// this package: its tests take ~4 minutes on a quiet 2-core machine and
// ~8 with both cores busy, and a slow machine is not a hang. A limit the
// user gave (any but 10m) stands.
const slowMachineTimeout = 30 * time.Minute

func testMain(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil && f.Value.String() == (10*time.Minute).String() {
		f.Value.Set(slowMachineTimeout.String())
	}
	_, here, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(here), "..", "..")
	tmp, err := os.MkdirTemp("", "leakpath-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// The symbolizer's DWARF cache of every leakpath the tests run: in
	// the test's own directory, shared by the tests.
	os.Setenv("LEAKPATH_CACHE_DIR", filepath.Join(tmp, "cache"))
	binDir = filepath.Join(tmp, "bin")
	fixtures = filepath.Join(tmp, "fixtures")
	os.MkdirAll(binDir, 0o755)
	if fixtureCache, err = testfixture.NewCache(fixtures); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if out, err := exec.Command("make", "-s", "-C", root, "agent").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the agent: %v\n%s", err, out)
		return 1
	}
	lpBin = filepath.Join(binDir, "leakpath")
	build := exec.Command("go", "build", "-o", lpBin, ".")
	build.Dir = filepath.Join(root, "cmd", "leakpath")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as the Makefile builds it
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building leakpath: %v\n%s", err, out)
		return 1
	}
	// The agent beside the binary, as `make` lays them out.
	if err := os.Symlink(filepath.Join(root, "bin", "libleakpath.so"), filepath.Join(binDir, "libleakpath.so")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// fixture compiles testdata/fixtures/name with extra flags, once per flag
// set, and returns the executable (or shared library, with -shared).
func fixture(t testing.TB, name string, flags ...string) string {
	t.Helper()
	args := append([]string{"-g", "-O0"}, flags...)
	if strings.HasSuffix(name, ".c") {
		args = append(args, "-pthread")
	}
	return fixtureCache.Build(t, filepath.Join(root, "testdata", "fixtures", name), args...)
}

// exhaustive skips t under -short: it repeats what a quicker test (or
// the first case of this one) checks, over more programs, builds or
// tools. `make test` runs everything; -short is for a quick loop.
func exhaustive(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s (make test runs it)", what)
	}
}

// result is one run of a program, with or without leakpath.
type result struct {
	stdout, stderr []byte
	code           int // exit code, or 128+signal
	report         *jsonReport
	reportJSON     []byte // the JSON report as written, for tests that read more of it
	text           string // leakpath's text report
}

// jsonReport is the leakpath.report/v1 schema as tests read it.
type jsonReport struct {
	Schema string `json:"schema"`
	jsonImage
	Processes []jsonImage `json:"processes"`
	Warnings  []string    `json:"warnings"`
}

type jsonImage struct {
	Command []string `json:"command"`
	PID     int      `json:"pid"`
	Exit    struct {
		Code   *int   `json:"code"`
		Signal string `json:"signal"`
		Exec   bool   `json:"exec"`
	} `json:"exit"`
	Totals jsonTotalsT `json:"totals"` // see mpi_test.go
	Leaks  []struct {
		Kind   string      `json:"kind"`
		Bytes  uint64      `json:"bytes"`
		Blocks uint64      `json:"blocks"`
		Stack  []jsonFrame `json:"stack"`
	} `json:"leaks"`
	Errors []struct {
		Kind       string      `json:"kind"`
		Stack      []jsonFrame `json:"stack"`
		AllocStack []jsonFrame `json:"alloc_stack"`
	} `json:"errors"`
}

type jsonFrame struct {
	Address  string `json:"address"`
	Module   string `json:"module"`
	Offset   string `json:"offset"`
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Inlined  bool   `json:"inlined"`
}

// exitCode turns a finished command's state into a shell-style code.
func exitCode(err error, st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// testEnv is the environment every run gets, with and without leakpath
// and under the other tools: the same bytes, so programs that copy their
// environment allocate the same. Python's hash seed is fixed: a random one
// changes how often its dicts grow, and so its allocation counts.
func testEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "PYTHONHASHSEED=") ||
			strings.HasPrefix(kv, "LEAKPATH_") && !strings.HasPrefix(kv, "LEAKPATH_CACHE_DIR=") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "PYTHONHASHSEED=0"), extra...)
}

var (
	valgrindEnvOnce  sync.Once
	valgrindEnvExtra []string
)

// valgrindEnv is the variables valgrind adds to its client's environment
// (besides LD_PRELOAD): GLIBCXX_FORCE_NEW, GLIBCPP_FORCE_NEW and
// LD_LIBRARY_PATH. Runs compared with valgrind's get them too: programs
// that copy their environment (git does) allocate by its size.
func valgrindEnv(t testing.TB) []string {
	valgrindEnvOnce.Do(func() {
		out, err := exec.Command("valgrind", "-q", "env").Output()
		if err != nil {
			return
		}
		for _, kv := range strings.Split(string(out), "\n") {
			for _, name := range []string{"GLIBCXX_FORCE_NEW=", "GLIBCPP_FORCE_NEW=", "LD_LIBRARY_PATH="} {
				if strings.HasPrefix(kv, name) && !slices.Contains(os.Environ(), kv) {
					valgrindEnvExtra = append(valgrindEnvExtra, kv)
				}
			}
		}
	})
	return valgrindEnvExtra
}

// native runs argv without leakpath.
func native(t testing.TB, stdin []byte, argv ...string) result {
	t.Helper()
	return nativeEnv(t, testEnv(), stdin, argv...)
}

// nativeEnv runs argv without leakpath in environment env.
func nativeEnv(t testing.TB, env []string, stdin []byte, argv ...string) result {
	t.Helper()
	return runCapture(t, env, stdin, argv...)
}

// runCapture runs argv in env with stdin, capturing stdout and stderr;
// a command that cannot be started fails the test, one that exits
// non-zero does not.
func runCapture(t testing.TB, env []string, stdin []byte, argv ...string) result {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &errb, env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running %v: %v", argv, err)
	}
	return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: exitCode(err, cmd.ProcessState)}
}

// leakpath runs `leakpath run FLAGS -- argv` with the reports written to
// files, so that stdout and stderr are the program's alone.
func leakpath(t testing.TB, flags []string, stdin []byte, argv ...string) result {
	t.Helper()
	return leakpathEnv(t, testEnv(), flags, stdin, argv...)
}

// leakpathEnv is leakpath in environment env.
func leakpathEnv(t testing.TB, env []string, flags []string, stdin []byte, argv ...string) result {
	t.Helper()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "report.json")
	textPath := filepath.Join(dir, "report.txt")
	args := append([]string{lpBin, "run", "--json", jsonPath, "--report", textPath}, flags...)
	r := runCapture(t, env, stdin, append(append(args, "--"), argv...)...)
	text, err := os.ReadFile(textPath)
	if err != nil {
		t.Fatalf("leakpath wrote no text report: %v\nstderr: %s", err, r.stderr)
	}
	r.text = string(text)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("leakpath wrote no JSON report: %v", err)
	}
	r.reportJSON = b
	r.report = new(jsonReport)
	if err := json.Unmarshal(b, r.report); err != nil {
		t.Fatalf("JSON report: %v\n%s\nleakpath exited %d; stderr:\n%s", err, b, r.code, r.stderr)
	}
	if r.report.Schema != "leakpath.report/v1" {
		t.Fatalf("schema %q", r.report.Schema)
	}
	return r
}

// image returns the report of the first image whose program's name starts
// with name (fixtures carry a suffix), or fails.
func (r result) image(t testing.TB, name string) jsonImage {
	t.Helper()
	imgs := r.report.Processes
	if len(imgs) == 0 {
		imgs = []jsonImage{r.report.jsonImage}
	}
	for _, im := range imgs {
		if len(im.Command) > 0 && strings.HasPrefix(filepath.Base(im.Command[0]), name) {
			return im
		}
	}
	t.Fatalf("no image of %s in the report:\n%s", name, r.text)
	return jsonImage{}
}

// stackHas reports whether a stack names function fn (or, unsymbolized,
// lies in a module ending in fn).
func stackHas(st []jsonFrame, fn string) bool {
	for _, f := range st {
		if f.Function == fn || (f.Function == "" && strings.HasSuffix(f.Module, fn)) {
			return true
		}
	}
	return false
}
