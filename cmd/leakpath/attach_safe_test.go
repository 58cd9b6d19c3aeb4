package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// lineProc is a program the test talks to line by line: what it prints
// is the handshake, never a sleep.
type lineProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	out   strings.Builder // every line read so far
	done  chan struct{}
	err   error
}

func startLineProc(t *testing.T, argv ...string) *lineProc {
	t.Helper()
	p := &lineProc{lines: make(chan string, 64), done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = testEnv()
	p.cmd.Stderr = os.Stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	return p
}

// expect waits for the program's next line (hang guard: 2 minutes) and
// checks that it starts with prefix.
func (p *lineProc) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			t.Fatalf("the program ended (%v, exit %d) before printing %q; it printed:\n%s",
				p.err, exitCode(p.err, p.cmd.ProcessState), prefix, p.out.String())
		}
		p.out.WriteString(l + "\n")
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("the program printed %q, want %q first", l, prefix)
		}
		return l
	case <-time.After(2 * time.Minute):
		t.Fatalf("the program did not print %q in 2 minutes", prefix)
		return ""
	}
}

func (p *lineProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("write to the program: %v", err)
	}
}

// wait returns the program's exit code once it ended.
func (p *lineProc) wait(t *testing.T) int {
	t.Helper()
	for l := range p.lines {
		p.out.WriteString(l + "\n")
	}
	select {
	case <-p.done:
		return exitCode(p.err, p.cmd.ProcessState)
	case <-time.After(2 * time.Minute):
		t.Fatal("the program did not end")
		return 0
	}
}

// detach runs `leakpath detach PID` and waits for the attach to end.
func detach(t *testing.T, pid int, a *attaching) (jsonAttachReport, string) {
	t.Helper()
	if out, err := exec.Command(lpBin, "detach", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("detach: %v\n%s\n%s", err, out, a.stderr.String())
	}
	return a.wait(t)
}

// attachCalls reads the calls by function of an attach's JSON report.
func attachCalls(t *testing.T, a *attaching) map[string]uint64 {
	t.Helper()
	var r struct {
		Totals jsonTotalsT `json:"totals"`
	}
	b, err := os.ReadFile(a.json)
	if err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("JSON report %s: %v", a.json, err)
	}
	return r.Totals.Calls
}

// TestAttachNonPIE: a non-PIE program that takes malloc's and free's
// addresses (canonical PLT entries, as Debian's python3.11) is attached,
// its allocations made meanwhile are recorded with their counts (direct
// calls and calls through the pointers), and after the detach it runs on
// to its normal end, its output intact.
func TestAttachNonPIE(t *testing.T) {
	bin := fixture(t, "attach_nopie.c", "-fno-pic", "-no-pie")
	p := startLineProc(t, bin)
	pid := p.cmd.Process.Pid
	p.expect(t, "ready")
	p.send(t, "a") // a round before the attach: not recorded
	want1 := p.expect(t, "round 1: 1512 mallocs, 1500 frees, sum ")

	a := startAttach(t, pid, "--scan=false")
	p.send(t, "a")
	want2 := p.expect(t, "round 2: 1512 mallocs, 1500 frees, sum ")
	r, text := detach(t, pid, a)
	calls := attachCalls(t, a)

	p.send(t, "a") // after the detach: the program's own allocator again
	want3 := p.expect(t, "round 3: ")
	p.send(t, "q")
	p.expect(t, "bye")
	if code := p.wait(t); code != 7 {
		t.Errorf("exit code %d after attach and detach, want 7\n%s", code, a.stderr.String())
	}
	if want1[len("round 1"):] != want2[len("round 2"):] || want1[len("round 1"):] != want3[len("round 3"):] {
		t.Errorf("the rounds differ: %q, %q, %q", want1, want2, want3)
	}

	// Round 2 ran attached: its 7 + 5 leaked blocks at their functions,
	// and at least its calls (the C library may allocate a little more).
	blocks := map[string]uint64{}
	for _, l := range r.Leaks {
		if len(l.Stack) > 0 {
			blocks[l.Stack[0].Function] += l.Blocks
		}
	}
	if blocks["leak_direct"] != 7 || blocks["leak_pointer"] != 5 {
		t.Errorf("live blocks at leak_direct %d, leak_pointer %d; want 7 and 5 (round 2 only)\n%s",
			blocks["leak_direct"], blocks["leak_pointer"], text)
	}
	if m, f := calls["malloc"], calls["free"]; m < 1512 || m > 1512+32 || f < 1500 || f > 1500+32 {
		t.Errorf("recorded %d mallocs and %d frees, want 1512 and 1500 (+ a few of the C library's)\n%s", m, f, text)
	}
	if !r.Exit.Detached || len(r.Errors) != 0 {
		t.Errorf("report: detached %v, improper uses %+v", r.Exit.Detached, r.Errors)
	}
	t.Logf("recorded while attached: %d mallocs, %d frees, %d live at leak_direct, %d at leak_pointer; %s",
		calls["malloc"], calls["free"], blocks["leak_direct"], blocks["leak_pointer"], firstLine(a.stderr.String(), "detached from"))
}

// pythonThreads is the script of TestAttachPython: 4 threads that
// allocate and drop blocks, running (taking turns at the GIL) while the
// attach runs, then, once told, each allocating 1,000 blocks of 4 KiB it
// keeps and 2,000 it drops.
const pythonThreads = `import sys, threading
N, KEEP = 4, 1000
held = [[] for _ in range(N)]
tids = [0] * N
started = threading.Barrier(N + 1)
go = threading.Event()
done = threading.Barrier(N + 1)
def work(i):
    tids[i] = threading.get_native_id()
    started.wait()
    while not go.is_set():
        bytearray(2000 + i)
    for j in range(KEEP):
        held[i].append(bytearray(4096 + i))
    for j in range(2000):
        bytearray(3000)
    done.wait()
ts = [threading.Thread(target=work, args=(i,)) for i in range(N)]
for t in ts:
    t.start()
started.wait()
print("ready", *tids, flush=True)
sys.stdin.readline()
go.set()
done.wait()
print("allocated", sum(len(h) for h in held), flush=True)
sys.stdin.readline()
more = [bytearray(5000) for _ in range(1000)]
for t in ts:
    t.join()
print("bye", len(more), sum(len(h) for h in held), flush=True)
`

// TestAttachPython attaches to /usr/bin/python3 running 4 threads that
// allocate: every thread's allocations are recorded, and python ends
// normally with its output intact after the detach.
func TestAttachPython(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no %s to attach to: %v", py, err)
	}
	script := filepath.Join(t.TempDir(), "threads.py")
	if err := os.WriteFile(script, []byte(pythonThreads), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startLineProc(t, py, script)
	pid := p.cmd.Process.Pid
	f := strings.Fields(p.expect(t, "ready "))
	var tids []int32
	for _, s := range f[1:] {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("thread id %q: %v", s, err)
		}
		tids = append(tids, int32(n))
	}

	trace := filepath.Join(t.TempDir(), "py.lpt")
	a := startAttach(t, pid, "--scan=false", "-o", trace)
	p.send(t, "go")
	p.expect(t, "allocated 4000")
	r, text := detach(t, pid, a)
	p.send(t, "end")
	p.expect(t, "bye 1000 4000")
	if code := p.wait(t); code != 0 {
		t.Errorf("python exited %d after attach and detach, want 0\n%s", code, p.out.String())
	}

	// Each worker's blocks, from the trace: its 1,000 kept ones at least
	// less those still pending in its fold area (LP_PEND, 256).
	per := map[int32]int{}
	eachTraceEvent(t, trace, func(ev *event.Event) {
		if ev.Kind == event.Alloc {
			per[ev.Thread]++
		}
	})
	recording := 0
	for _, tid := range tids {
		if per[tid] >= 1000-256 {
			recording++
		}
	}
	if recording != len(tids) || r.Totals.Allocations == 0 {
		t.Errorf("allocations by worker thread %v (%d threads with >= 744), %d in all; want every one of the 4 workers recorded\n%s",
			perThread(per, tids), recording, r.Totals.Allocations, text)
	}
	t.Logf("python3 attached: %d allocations recorded; by worker thread %v; %s", r.Totals.Allocations,
		perThread(per, tids), firstLine(a.stderr.String(), "detached from"))
}

func perThread(per map[int32]int, tids []int32) string {
	var b strings.Builder
	for _, tid := range tids {
		fmt.Fprintf(&b, " %d:%d", tid, per[tid])
	}
	return strings.TrimSpace(b.String())
}

// TestAttachRefuses: what an attach could harm is refused before anything
// changes in the process (no agent loaded), and the process runs on.
func TestAttachRefuses(t *testing.T) {
	refused := func(t *testing.T, pid int, msg string) {
		t.Helper()
		// Hang guard: an attach that is not refused records until killed.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, lpBin, "attach", strconv.Itoa(pid))
		out, err := cmd.CombinedOutput()
		if code := exitCode(err, cmd.ProcessState); err == nil || !strings.Contains(string(out), msg) {
			t.Errorf("attach: exit %d, %v:\n%s\nwant a refusal saying %q", code, err, out, msg)
		}
		maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if strings.Contains(string(maps), "libleakpath.so") {
			t.Errorf("the agent was loaded into pid %d all the same", pid)
		}
	}
	t.Run("seccomp", func(t *testing.T) {
		bin := fixtureCache.BuildSource(t, "filtered.c", `#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(void) {
	struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	struct sock_fprog prog = { 1, f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) return 2;
	printf("filtered\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) == 1) {}
	printf("done\n");
	return 0;
}
`)
		p := startLineProc(t, bin)
		p.expect(t, "filtered")
		refused(t, p.cmd.Process.Pid, "seccomp filter")
		p.stdin.Close()
		p.expect(t, "done")
		if code := p.wait(t); code != 0 {
			t.Errorf("the filtered program exited %d after the refusal", code)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		p := startLineProc(t, "cat")
		pid := p.cmd.Process.Pid
		p.send(t, "before")
		p.expect(t, "before")
		syscall.Kill(pid, syscall.SIGSTOP)
		// Stopped once /proc says so (the signal is asynchronous).
		testfixture.Poll(t, "cat stopped", func() bool {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			i := strings.LastIndexByte(string(st), ')')
			return i > 0 && strings.HasPrefix(string(st[i+1:]), " T")
		})
		refused(t, pid, "is stopped")
		syscall.Kill(pid, syscall.SIGCONT)
		p.send(t, "after")
		p.expect(t, "after")
		p.stdin.Close()
		if code := p.wait(t); code != 0 {
			t.Errorf("cat exited %d after the refusal", code)
		}
	})
}

// TestAttachThenSandbox: a program attached to installs a seccomp filter
// that kills it for prctl(2) and membarrier(2), through libc's prctl, then
// two threads allocate and free each other's blocks. The agent follows the
// filter's installation and makes neither call: the program ends normally
// (before: killed by SIGSYS, exit 159), and the attach ends with it.
func TestAttachThenSandbox(t *testing.T) {
	bin := fixtureCache.BuildSource(t, "sandboxed.c", `#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
void *blocks[2][500];
static void *work(void *arg) {
	long id = (long)arg;
	for (int i = 0; i < 500; i++) blocks[id][i] = malloc(24);
	return NULL;
}
int main(void) {
	printf("ready\n");
	fflush(stdout);
	getchar();
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prctl, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) return 2;
	pthread_t th[2];
	for (long i = 0; i < 2; i++) pthread_create(&th[i], NULL, work, (void *)i);
	for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
	for (int i = 0; i < 500; i++) { free(blocks[0][i]); free(blocks[1][i]); }
	printf("done\n");
	return 0;
}
`, "-pthread")
	p := startLineProc(t, bin)
	p.expect(t, "ready")
	a := startAttach(t, p.cmd.Process.Pid, "--scan=false")
	p.send(t, "go")
	p.expect(t, "done")
	if code := p.wait(t); code != 0 {
		t.Fatalf("the program exited %d under its filter after the attach, want 0", code)
	}
	r, text := a.wait(t)
	if r.Exit.Code == nil || *r.Exit.Code != 0 || r.Totals.Allocations < 1000 {
		t.Errorf("report: exit %v, %d allocations; want 0 and at least 1000\n%s", r.Exit.Code, r.Totals.Allocations, text)
	}
	t.Logf("attached, then sandboxed: %d allocations, %d frees recorded", r.Totals.Allocations, r.Totals.Frees)
}
