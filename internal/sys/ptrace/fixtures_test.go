package ptrace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// Fixtures are C programs under testdata/ptrace, compiled on demand once
// per test binary run.

// hangGuard bounds every wait of these tests: long enough that a machine
// whose cores are all busy never reaches it, so it fails only a test that
// would otherwise hang. Nothing here measures speed against it.
const hangGuard = 3 * time.Minute

// fixtures builds testdata/ptrace (set by TestMain).
var fixtures *testfixture.Cache

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leakpath-ptrace-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if fixtures, err = testfixture.NewCache(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture compiles testdata/ptrace/NAME.c (once per run) and returns the
// program's path. It skips the test when there is no C compiler.
func fixture(t testing.TB, name string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "ptrace", name+".c"))
	if err != nil {
		t.Fatal(err)
	}
	return fixtures.Build(t, src, "-O2", "-g", "-Wall", "-pthread")
}

// proc is a running fixture: stdin is a pipe the test closes to let it
// finish, stdout is read line by line.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	mu     sync.Mutex
	out    strings.Builder
	eof    chan struct{}
	stderr bytes.Buffer
	waited bool
}

// start runs fixture name with args. The process is killed at the end of
// the test if still running.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	path := fixture(t, name)
	p := &proc{cmd: exec.Command(path, args...), lines: make(chan string, 1000), eof: make(chan struct{})}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = w
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() {
		defer close(p.eof)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		if p.waited {
			return
		}
		// A Tracer still attached could keep the exit from being
		// reported (seize closes it first): fail rather than hang.
		p.cmd.Process.Kill()
		errc := make(chan error, 1)
		go func() { errc <- p.cmd.Wait() }()
		select {
		case <-errc:
		case <-time.After(hangGuard):
			t.Errorf("pid %d: not reaped %v after SIGKILL\n%s", p.pid(), hangGuard, procState(p.pid()))
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// line returns the next line of output.
func (p *proc) line(t *testing.T) string {
	t.Helper()
	select {
	case l := <-p.lines:
		return l
	case <-time.After(hangGuard):
		t.Fatalf("pid %d: no output line in %v", p.pid(), hangGuard)
		return ""
	}
}

// finish closes stdin, waits (at most timeout) for the process to exit and
// returns its whole output and exit status. Never call it while a Tracer
// is attached (see the package doc on waiting).
func (p *proc) finish(t *testing.T, timeout time.Duration) (string, *os.ProcessState) {
	t.Helper()
	p.stdin.Close()
	errc := make(chan error, 1)
	go func() { errc <- p.cmd.Wait() }()
	select {
	case <-errc:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-errc
		p.waited = true
		t.Fatalf("pid %d did not finish within %v (killed); stderr: %s", p.pid(), timeout, p.stderr.String())
	}
	p.waited = true
	<-p.eof
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String(), p.cmd.ProcessState
}

// runPlain runs fixture name with args and stdin at end of file, untraced,
// and returns its output.
func runPlain(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(fixture(t, name), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	timer := time.AfterFunc(hangGuard, func() { cmd.Process.Kill() })
	defer timer.Stop()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v; stderr: %s", name, args, err, stderr.String())
	}
	return string(out)
}

// seize seizes pid or skips the test when this system forbids ptrace; the
// Tracer is closed at the end of the test.
func seize(t *testing.T, pid int) *Tracer {
	t.Helper()
	tr, err := Seize(pid)
	if err != nil {
		if errors.Is(err, unix.EPERM) && !errors.Is(err, ErrTraced) {
			t.Skipf("ptrace not permitted here: %v", err)
		}
		t.Fatal(err)
	}
	if tr.tracerTid == os.Getpid() {
		t.Errorf("the Tracer of pid %d runs on the main thread, which never exits: what it still traces at the end stays traced", pid)
	}
	// Registered after start's, so it runs first (cleanups run last in,
	// first out): the process must be untraced before its Kill and Wait.
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr.Close()
		}()
		select {
		case <-done:
		case <-time.After(hangGuard):
			t.Errorf("Close still blocked after %v\n%s", hangGuard, procState(pid))
		}
	})
	return tr
}

// within runs f and fails the test if it takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
	}
}

// parseFields parses "key value key value ..." lines into a map.
func parseFields(t *testing.T, line string) map[string]string {
	t.Helper()
	f := strings.Fields(line)
	m := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m
}

func hexField(t *testing.T, m map[string]string, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(m[key], "0x"), 16, 64)
	if err != nil {
		t.Fatalf("field %q: %v (%v)", key, err, m)
	}
	return v
}

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end uint64
	perms      string
	name       string
}

func readMaps(t *testing.T, pid int) []mapping {
	t.Helper()
	data, err := procmaps.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	var ms []mapping
	for _, m := range procmaps.Parse(data) {
		ms = append(ms, mapping{start: m.Lo, end: m.Hi, perms: m.Perms, name: m.Path})
	}
	return ms
}

func findMapping(ms []mapping, addr uint64) *mapping {
	for i := range ms {
		if ms[i].start <= addr && addr < ms[i].end {
			return &ms[i]
		}
	}
	return nil
}

// tracerPids returns TracerPid of every thread of pid.
func tracerPids(t *testing.T, pid int) map[int]int {
	t.Helper()
	tids, err := listTasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]int{}
	for _, tid := range tids {
		st, err := ProcStatus(pid, tid)
		if err != nil {
			continue
		}
		m[tid] = statusInt(st, "TracerPid")
	}
	return m
}
