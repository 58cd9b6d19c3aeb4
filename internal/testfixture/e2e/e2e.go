// Package e2e runs the real leakpath binary, with its agent beside it,
// on fixture programs compiled from testdata/fixtures: the harness of the
// end-to-end tests, which live next to the feature each checks (as
// external test packages) and in cmd/leakpath for the command line
// itself. A test package calls Main from its TestMain; Main builds
// leakpath once per source tree, shared by every test binary through a
// directory keyed by the sources' hash. Only tests import it.
package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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

// Set by Setup.
var (
	Root     string // the repository
	BinDir   string // holds leakpath and the agent link
	Bin      string // the leakpath binary
	Fixtures string // compiled fixtures
	// FixtureCache builds testdata/fixtures into Fixtures.
	FixtureCache *testfixture.Cache
)

// SlowMachineTimeout replaces go test's default limit of 10 minutes for
// an end-to-end package: cmd/leakpath's tests take ~4 minutes on a quiet
// 2-core machine and ~8 with both cores busy, and a slow machine is not a
// hang. A limit the user gave (any but 10m) stands.
const SlowMachineTimeout = 30 * time.Minute

// Main is an end-to-end package's TestMain: os.Exit(e2e.Main(m)).
func Main(m *testing.M) int {
	flag.Parse()
	cleanup, err := Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// Setup raises the default test timeout, builds the agent and leakpath
// (or finds the build another test binary made of the same sources) and
// makes the directories the tests use; cleanup removes them. Call it
// after flag.Parse.
func Setup() (cleanup func(), err error) {
	if f := flag.Lookup("test.timeout"); f != nil && f.Value.String() == (10*time.Minute).String() {
		f.Value.Set(SlowMachineTimeout.String())
	}
	_, here, _, _ := runtime.Caller(0)
	Root = filepath.Clean(filepath.Join(filepath.Dir(here), "..", "..", ".."))
	tmp, err := os.MkdirTemp("", "leakpath-e2e-")
	if err != nil {
		return nil, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	// The symbolizer's DWARF cache of every leakpath the tests run: in
	// the test binary's own directory, shared by its tests.
	os.Setenv("LEAKPATH_CACHE_DIR", filepath.Join(tmp, "cache"))
	Fixtures = filepath.Join(tmp, "fixtures")
	if FixtureCache, err = testfixture.NewCache(Fixtures); err != nil {
		return nil, err
	}
	if BinDir, err = buildShared(); err != nil {
		return nil, err
	}
	Bin = filepath.Join(BinDir, "leakpath")
	return cleanup, nil
}

// buildShared returns a directory holding leakpath and a link to the
// agent, built under a lock so that test binaries running at once build
// each only once: the agent by make (which does nothing when it is up to
// date), leakpath into a directory named after a hash of the Go sources,
// so that it is rebuilt only when they change.
func buildShared() (string, error) {
	base := filepath.Join(os.TempDir(), fmt.Sprintf("leakpath-e2e-bin-%d", os.Getuid()))
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(base, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if out, err := exec.Command("make", "-s", "-C", Root, "agent").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the agent: %v\n%s", err, out)
	}
	key, err := sourceKey()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, key)
	if _, err := os.Stat(filepath.Join(dir, "leakpath")); err == nil {
		return dir, nil
	}
	pruneOld(base)
	building := dir + ".tmp"
	os.RemoveAll(building)
	if err := os.MkdirAll(building, 0o755); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(building, "leakpath"), ".")
	build.Dir = filepath.Join(Root, "cmd", "leakpath")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as the Makefile builds it
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building leakpath: %v\n%s", err, out)
	}
	// The agent beside the binary, as `make` lays them out.
	if err := os.Symlink(filepath.Join(Root, "bin", "libleakpath.so"), filepath.Join(building, "libleakpath.so")); err != nil {
		return "", err
	}
	return dir, os.Rename(building, dir)
}

// sourceKey hashes the repository's path and every Go source leakpath
// could be built from (tests and the test support aside), with go.mod
// and go.sum.
func sourceKey() (string, error) {
	h := sha256.New()
	io.WriteString(h, Root+"\x00"+runtime.Version()+"\x00")
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(Root, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		h.Write(b)
	}
	for _, top := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join(Root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "testfixture") {
				return filepath.SkipDir // not built into leakpath
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
			h.Write(b)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), nil
}

// pruneOld removes builds of sources older than a day: each edit of the
// sources leaves one behind.
func pruneOld(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && e.IsDir() && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// Fixture compiles testdata/fixtures/name with extra flags, once per flag
// set, and returns the executable (or shared library, with -shared).
func Fixture(t testing.TB, name string, flags ...string) string {
	t.Helper()
	args := append([]string{"-g", "-O0"}, flags...)
	if strings.HasSuffix(name, ".c") {
		args = append(args, "-pthread")
	}
	return FixtureCache.Build(t, filepath.Join(Root, "testdata", "fixtures", name), args...)
}

// Exhaustive skips t under -short: it repeats what a quicker test (or
// the first case of this one) checks, over more programs, builds or
// tools. `make test` runs everything; -short is for a quick loop.
func Exhaustive(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s (make test runs it)", what)
	}
}

// Result is one run of a program, with or without leakpath.
type Result struct {
	Stdout, Stderr []byte
	Code           int // exit code, or 128+signal
	Report         *Report
	ReportJSON     []byte // the JSON report as written, for tests that read more of it
	Text           string // leakpath's text report
}

// Report is the leakpath.report/v1 schema as tests read it.
type Report struct {
	Schema string `json:"schema"`
	Image
	Processes []Image  `json:"processes"`
	Warnings  []string `json:"warnings"`
}

// Image is one program's part of a report.
type Image struct {
	Command []string `json:"command"`
	PID     int      `json:"pid"`
	Exit    struct {
		Code   *int   `json:"code"`
		Signal string `json:"signal"`
		Exec   bool   `json:"exec"`
	} `json:"exit"`
	Totals Totals `json:"totals"`
	Leaks  []Leak `json:"leaks"`
	Errors []struct {
		Kind       string  `json:"kind"`
		Stack      []Frame `json:"stack"`
		AllocStack []Frame `json:"alloc_stack"`
	} `json:"errors"`
}

// Leak is a group of leaked blocks in a report.
type Leak struct {
	Kind   string  `json:"kind"`
	Bytes  uint64  `json:"bytes"`
	Blocks uint64  `json:"blocks"`
	Stack  []Frame `json:"stack"`
}

// Totals is an image's totals.
type Totals = struct {
	Calls          map[string]uint64 `json:"calls"`
	Allocations    uint64            `json:"allocations"`
	Frees          uint64            `json:"frees"`
	AllocatedBytes uint64            `json:"allocated_bytes"`
	PeakBytes      uint64            `json:"peak_bytes"`
	LeakedBytes    uint64            `json:"leaked_bytes"`
	LeakedBlocks   uint64            `json:"leaked_blocks"`
	Temporary      uint64            `json:"temporary_allocations"`
}

// Frame is one frame of a stack in a report.
type Frame struct {
	Address  string `json:"address"`
	Module   string `json:"module"`
	Offset   string `json:"offset"`
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Inlined  bool   `json:"inlined"`
}

// ExitCode turns a finished command's state into a shell-style code.
func ExitCode(err error, st *os.ProcessState) int {
	if st == nil {
		return -1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// TestEnv is the environment every run gets, with and without leakpath
// and under the other tools: the same bytes, so programs that copy their
// environment allocate the same. Python's hash seed is fixed: a random one
// changes how often its dicts grow, and so its allocation counts.
func TestEnv(extra ...string) []string {
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

// ValgrindEnv is the variables valgrind adds to its client's environment
// (besides LD_PRELOAD): GLIBCXX_FORCE_NEW, GLIBCPP_FORCE_NEW and
// LD_LIBRARY_PATH. Runs compared with valgrind's get them too: programs
// that copy their environment (git does) allocate by its size.
func ValgrindEnv(t testing.TB) []string {
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

// Native runs argv without leakpath.
func Native(t testing.TB, stdin []byte, argv ...string) Result {
	t.Helper()
	return RunCapture(t, TestEnv(), stdin, argv...)
}

// RunCapture runs argv in env with stdin, capturing stdout and stderr;
// a command that cannot be started fails the test, one that exits
// non-zero does not.
func RunCapture(t testing.TB, env []string, stdin []byte, argv ...string) Result {
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
	return Result{Stdout: out.Bytes(), Stderr: errb.Bytes(), Code: ExitCode(err, cmd.ProcessState)}
}

// Leakpath runs `leakpath run FLAGS -- argv` with the reports written to
// files, so that stdout and stderr are the program's alone.
func Leakpath(t testing.TB, flags []string, stdin []byte, argv ...string) Result {
	t.Helper()
	return LeakpathEnv(t, TestEnv(), flags, stdin, argv...)
}

// LeakpathEnv is Leakpath in environment env.
func LeakpathEnv(t testing.TB, env []string, flags []string, stdin []byte, argv ...string) Result {
	t.Helper()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "report.json")
	textPath := filepath.Join(dir, "report.txt")
	args := append([]string{Bin, "run", "--json", jsonPath, "--report", textPath}, flags...)
	r := RunCapture(t, env, stdin, append(append(args, "--"), argv...)...)
	text, err := os.ReadFile(textPath)
	if err != nil {
		t.Fatalf("leakpath wrote no text report: %v\nstderr: %s", err, r.Stderr)
	}
	r.Text = string(text)
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatalf("leakpath wrote no JSON report: %v", err)
	}
	r.ReportJSON = b
	r.Report = new(Report)
	if err := json.Unmarshal(b, r.Report); err != nil {
		t.Fatalf("JSON report: %v\n%s\nleakpath exited %d; stderr:\n%s", err, b, r.Code, r.Stderr)
	}
	if r.Report.Schema != "leakpath.report/v1" {
		t.Fatalf("schema %q", r.Report.Schema)
	}
	return r
}

// Image returns the report of the first image whose program's name starts
// with name (fixtures carry a suffix), or fails.
func (r Result) Image(t testing.TB, name string) Image {
	t.Helper()
	imgs := r.Report.Processes
	if len(imgs) == 0 {
		imgs = []Image{r.Report.Image}
	}
	for _, im := range imgs {
		if len(im.Command) > 0 && strings.HasPrefix(filepath.Base(im.Command[0]), name) {
			return im
		}
	}
	t.Fatalf("no image of %s in the report:\n%s", name, r.Text)
	return Image{}
}

// Funcs is a stack's function names, innermost first, separated by
// spaces.
func Funcs(st []Frame) string {
	var n []string
	for _, f := range st {
		n = append(n, f.Function)
	}
	return strings.Join(n, " ")
}

// StackHas reports whether a stack names function fn (or, unsymbolized,
// lies in a module ending in fn).
func StackHas(st []Frame, fn string) bool {
	for _, f := range st {
		if f.Function == fn || (f.Function == "" && strings.HasSuffix(f.Module, fn)) {
			return true
		}
	}
	return false
}

// SameBehaviour fails unless the program behaved identically with and
// without leakpath: stdout, stderr and exit code.
func SameBehaviour(t testing.TB, with, without Result) {
	t.Helper()
	if with.Code != without.Code {
		t.Errorf("exit code %d under leakpath, %d without", with.Code, without.Code)
	}
	if !bytes.Equal(with.Stdout, without.Stdout) {
		t.Errorf("stdout differs under leakpath:\n%q\nwithout:\n%q", with.Stdout, without.Stdout)
	}
	if !bytes.Equal(with.Stderr, without.Stderr) {
		t.Errorf("stderr differs under leakpath:\n%q\nwithout:\n%q", with.Stderr, without.Stderr)
	}
}

// IncludeFlag is the compiler flag that finds the agent's public header
// (<leakpath.h>), for fixtures that mark scopes or pools.
func IncludeFlag() string { return "-I" + filepath.Join(Root, "agent", "include") }

// The exit codes of leakpath that tests check (docs/run.md).
const (
	ExitUsage = 2  // a bad command line
	ExitLeaks = 23 // --check found leaks
)

// CompileTo compiles out with cc from args, or fails the test.
func CompileTo(t testing.TB, cc, out string, args ...string) {
	t.Helper()
	if err := testfixture.Compile(cc, out, args...); err != nil {
		t.Fatal(err)
	}
}
