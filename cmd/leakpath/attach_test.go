package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// server is the attach fixture running with its stdin held open.
type server struct {
	*watched
	stdin io.WriteCloser
	gap   string
}

func startServer(t *testing.T, bin string) *server {
	t.Helper()
	s := &server{gap: filepath.Join(t.TempDir(), "gap")}
	cmd := exec.Command(bin, s.gap)
	cmd.Env = testEnv()
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	s.watched = startWatched(t, cmd)
	// Its workers have their rings and run once it says ready.
	s.stdout.Await(t, "ready", 1)
	return s
}

// finish closes the server's stdin and returns its exit code and longest
// loop gap (µs).
func (s *server) finish(t *testing.T) (int, int) {
	t.Helper()
	s.stdin.Close()
	code := s.wait(t)
	b, _ := os.ReadFile(s.gap)
	gap, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return code, gap
}

// leakRound sends the server its nth SIGUSR1 and waits until each worker
// has renewed its whole ring since, leaking at leak_site meanwhile.
func (s *server) leakRound(t *testing.T, n int) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGUSR1)
	s.stderr.Await(t, fmt.Sprintf(": round %d\n", n), 4)
}

// attaching is a `leakpath attach` in the background.
type attaching struct {
	*watched
	json, report string
}

func startAttach(t *testing.T, pid int, flags ...string) *attaching {
	t.Helper()
	return startAttachEnv(t, nil, pid, flags...)
}

// startAttachEnv is startAttach in environment env (nil: the test's).
func startAttachEnv(t *testing.T, env []string, pid int, flags ...string) *attaching {
	t.Helper()
	dir := t.TempDir()
	a := &attaching{json: filepath.Join(dir, "r.json"), report: filepath.Join(dir, "r.txt")}
	args := append([]string{"attach", "--json", a.json, "--report", a.report}, flags...)
	cmd := exec.Command(lpBin, append(args, strconv.Itoa(pid))...)
	cmd.Env = env
	a.watched = startWatched(t, cmd)
	// Attached once its session answers and the agent registered.
	a.stderr.Await(t, "attached to pid", 1)
	return a
}

// wait waits for the attach to end and reads its JSON report.
func (a *attaching) wait(t *testing.T) (jsonAttachReport, string) {
	t.Helper()
	if code := a.watched.wait(t); code != 0 {
		t.Fatalf("leakpath attach exited %d:\n%s", code, a.stderr)
	}
	b, err := os.ReadFile(a.json)
	if err != nil {
		t.Fatalf("no JSON report: %v\n%s", err, a.stderr)
	}
	var r jsonAttachReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, b)
	}
	text, _ := os.ReadFile(a.report)
	return r, string(text)
}

type jsonAttachReport struct {
	jsonImage
	Attached bool `json:"attached"`
	Exit     struct {
		Code     *int `json:"code"`
		Detached bool `json:"detached"`
	} `json:"exit"`
	Totals struct {
		Allocations  uint64 `json:"allocations"`
		Frees        uint64 `json:"frees"`
		UnknownFrees uint64 `json:"unknown_frees"`
	} `json:"totals"`
}

var pauseRE = regexp.MustCompile(`paused ([0-9.e+-]+) ms at attach, ([0-9.e+-]+) ms at detach`)

// TestAttachServer attaches to a busy multi-threaded server, records,
// snapshots, detaches, attaches again and detaches by SIGINT: the server's
// output is the one it has without leakpath, the leaks it makes after the
// attach are found where they are made, and the blocks from before the
// attach are neither leaks nor errors.
func TestAttachServer(t *testing.T) {
	t.Parallel()
	bin := fixture(t, "attach_server.c")

	// Without leakpath: the reference output and loop gap.
	ref := startServer(t, bin)
	refCode, refGap := ref.finish(t)
	if refCode != 0 {
		t.Fatalf("the server without leakpath exited %d", refCode)
	}

	s := startServer(t, bin)
	pid := s.cmd.Process.Pid
	a := startAttach(t, pid)
	// The workers leak until each has renewed its ring: every block from
	// before the attach is freed since.
	s.leakRound(t, 1)

	// A snapshot while attached: the leak site is there, classified.
	snap := filepath.Join(t.TempDir(), "snap.json")
	if out, err := exec.Command(lpBin, "snapshot", "--quiet", "-o", snap, strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, out)
	}
	var sr jsonAttachReport
	if b, err := os.ReadFile(snap); err != nil || json.Unmarshal(b, &sr) != nil {
		t.Fatalf("snapshot file: %v", err)
	}
	if !hasLeak(sr.jsonImage, "definite", "leak_site") {
		t.Errorf("the snapshot has no definite leak at leak_site: %+v", sr.Leaks)
	}

	out, err := exec.Command(lpBin, "detach", strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	r1, text1 := a.wait(t)
	t.Logf("first attach: %s", firstLine(a.stderr.String(), "detached from"))
	if m := pauseRE.FindStringSubmatch(a.stderr.String()); m != nil {
		t.Logf("pause at attach %s ms, at detach (scan included) %s ms", m[1], m[2])
	}
	if !r1.Attached || !r1.Exit.Detached || r1.Exit.Code != nil {
		t.Errorf("report: attached %v, detached %v, exit code %v; want attached, detached, no code", r1.Attached, r1.Exit.Detached, r1.Exit.Code)
	}
	if !strings.Contains(text1, "recorded since attach only") || !strings.Contains(text1, "live at detach") {
		t.Errorf("the text report does not say that it covers the time since the attach:\n%s", text1)
	}
	// Each worker's 64 ring blocks from before the attach are freed once
	// after it: unknown frees, not errors.
	if r1.Totals.UnknownFrees != 4*64 {
		t.Errorf("unknown frees %d, want %d (4 workers × 64 blocks from before the attach)", r1.Totals.UnknownFrees, 4*64)
	}
	if len(r1.Errors) != 0 {
		t.Errorf("improper uses reported after attach: %+v", r1.Errors)
	}
	checkLeakSite(t, r1.jsonImage, bin)
	for _, l := range r1.Leaks {
		if l.Kind == "unclassified" {
			t.Errorf("unclassified blocks at detach (the scan and the detach share one stop): %+v", l)
		}
	}

	// Attach again; end it with SIGINT to leakpath.
	a2 := startAttach(t, pid)
	s.leakRound(t, 2)
	a2.cmd.Process.Signal(syscall.SIGINT)
	r2, _ := a2.wait(t)
	if !r2.Attached || !r2.Exit.Detached || r2.Totals.Allocations == 0 {
		t.Errorf("second attach: attached %v, detached %v, %d allocations", r2.Attached, r2.Exit.Detached, r2.Totals.Allocations)
	}
	if !hasLeak(r2.jsonImage, "definite", "leak_site") {
		t.Errorf("second attach: no definite leak at leak_site")
	}
	if len(r2.Errors) != 0 {
		t.Errorf("second attach: improper uses: %+v", r2.Errors)
	}
	t.Logf("second attach: %s", firstLine(a2.stderr.String(), "detached from"))

	code, gap := s.finish(t)
	if code != 0 {
		t.Errorf("the server exited %d after the attaches", code)
	}
	if got, want := s.stdout.String(), ref.stdout.String(); got != want {
		t.Errorf("the server's output with attaches differs:\n%s\nwithout:\n%s", got, want)
	}
	t.Logf("longest loop gap of a worker: %d µs with two attaches, %d µs without (a loaded machine's noise included)", gap, refGap)
}

// hasLeak says whether a report has a leak of kind whose stack starts at fn.
func hasLeak(im jsonImage, kind, fn string) bool {
	for _, l := range im.Leaks {
		if l.Kind == kind && len(l.Stack) > 0 && sameFunc(l.Stack[0].Function, fn) {
			return true
		}
	}
	return false
}

// checkLeakSite checks the leak of leak_site: definite, its stack
// leak_site ← worker, and its frame #0 at the line addr2line gives for
// the address.
func checkLeakSite(t *testing.T, im jsonImage, bin string) {
	t.Helper()
	for _, l := range im.Leaks {
		if len(l.Stack) < 2 || l.Stack[0].Function != "leak_site" {
			continue
		}
		if l.Kind != "definite" || l.Stack[1].Function != "worker" {
			t.Errorf("leak at leak_site: kind %s, caller %s; want definite from worker", l.Kind, l.Stack[1].Function)
		}
		if l.Blocks == 0 || l.Bytes != 48*l.Blocks {
			t.Errorf("leak at leak_site: %d bytes in %d blocks, want 48 per block", l.Bytes, l.Blocks)
		}
		f := l.Stack[0]
		off, err := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
		if err != nil {
			t.Errorf("frame offset %q: %v", f.Offset, err)
			return
		}
		// The return address is after the call: the line is the call's.
		out, err := exec.Command("addr2line", "-e", bin, fmt.Sprintf("%#x", off-1)).Output()
		if err != nil {
			t.Skipf("addr2line: %v", err)
		}
		want := strings.TrimSpace(string(out))
		if got := fmt.Sprintf("%s:%d", f.File, f.Line); !strings.HasSuffix(want, filepath.Base(got)) {
			t.Errorf("leak_site frame at %s, addr2line says %s", got, want)
		}
		return
	}
	t.Errorf("no leak at leak_site in the report: %+v", im.Leaks)
}

func firstLine(s, with string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, with) {
			return l
		}
	}
	return ""
}

// TestAttachErrors: each way an attach cannot work gives a clear message
// and exit code 1, never a hang or a panic.
func TestAttachErrors(t *testing.T) {
	t.Parallel()
	attach := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(lpBin, args...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(testfixture.HangGuard):
			cmd.Process.Kill()
			<-done
			t.Fatalf("leakpath %v hangs", args)
		}
		if strings.Contains(string(out), "panic") || strings.Contains(string(out), "goroutine ") {
			t.Fatalf("leakpath %v panicked:\n%s", args, out)
		}
		return exitCode(err, cmd.ProcessState), string(out)
	}
	want := func(t *testing.T, code int, out, msg string) {
		t.Helper()
		if code != 1 || !strings.Contains(out, msg) {
			t.Errorf("exit %d, output:\n%s\nwant 1 and %q", code, out, msg)
		}
	}

	t.Run("no-such-pid", func(t *testing.T) {
		c := exec.Command("true")
		c.Run()
		code, out := attach(t, "attach", strconv.Itoa(c.Process.Pid))
		want(t, code, out, "no such process")
	})
	t.Run("static", func(t *testing.T) {
		if !testfixture.StaticLibc() {
			t.Skip("no static C library (libc.a) to link a static program with: apt-get install libc6-dev")
		}
		p := startReady(t, fixture(t, "idle.c", "-static"))
		code, out := attach(t, "attach", strconv.Itoa(p.pid()))
		want(t, code, out, "statically linked")
	})
	t.Run("under-run", func(t *testing.T) {
		bin := fixture(t, "idle.c")
		cmd := exec.Command(lpBin, "run", "--quiet", "--", bin)
		cmd.Env = testEnv()
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		w := startWatched(t, cmd)
		pid := programUnder(t, cmd.Process.Pid, bin)
		code, out := attach(t, "attach", strconv.Itoa(pid))
		want(t, code, out, "already runs under leakpath run")
		// The run goes on undisturbed, and ends with its program.
		stdin.Close()
		if code := w.wait(t); code != 0 {
			t.Errorf("leakpath run exited %d after the refused attach:\n%s", code, w.stderr)
		}
	})
	t.Run("detach-not-attached", func(t *testing.T) {
		p := startReady(t, fixture(t, "idle.c"))
		code, out := attach(t, "detach", strconv.Itoa(p.pid()))
		want(t, code, out, "not recorded by leakpath")
	})
	t.Run("other-user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to run leakpath as another user against a root process")
		}
		dir, err := os.MkdirTemp("", "leakpath-nobody-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		bin := filepath.Join(dir, "leakpath")
		if b, err := os.ReadFile(lpBin); err != nil || os.WriteFile(bin, b, 0o755) != nil {
			t.Fatalf("copy leakpath: %v", err)
		}
		os.Symlink(filepath.Join(root, "bin", "libleakpath.so"), filepath.Join(dir, "libleakpath.so"))
		p := startReady(t, fixture(t, "idle.c"))
		cmd := exec.Command(bin, "attach", strconv.Itoa(p.pid()))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Env = append(testEnv(), "TMPDIR="+dir)
		os.Chmod(dir, 0o777)
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), "permission denied") && strings.Contains(string(out), "agent library") {
			t.Skipf("uid 65534 cannot read the agent: %s", out)
		}
		want(t, exitCode(err, cmd.ProcessState), string(out), "operation not permitted")
		if !strings.Contains(string(out), "uid") && !strings.Contains(string(out), "ptrace_scope") {
			t.Errorf("the message does not say why: %s", out)
		}
	})
	t.Run("exits-while-attached", func(t *testing.T) {
		// A program that ends while attached, once its stdin does: the
		// attach reports its exit and ends by itself.
		bin := fixtureCache.BuildSource(t, "ending.c", `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *volatile keep;
int main(void) {
	char c;
	printf("ready\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	for (int i = 0; i < 150; i++) keep = malloc(24);
	return 3;
}
`, "-g")
		p := startReady(t, bin)
		a := startAttach(t, p.pid())
		p.stdin.Close()
		r, text := a.wait(t)
		if r.Exit.Detached || r.Exit.Code == nil || *r.Exit.Code != 3 {
			t.Errorf("report of a program that exited with 3 while attached: %+v\n%s", r.Exit, text)
		}
		if !hasLeak(r.jsonImage, "definite", "main") {
			t.Errorf("its leaks since the attach are not found:\n%s", text)
		}
	})
	t.Run("exits-during-attach", func(t *testing.T) {
		// Programs that end within milliseconds of their start, the
		// attach started meanwhile: whatever the moment, a clear outcome
		// and no leftover session.
		for i := 0; i < 5; i++ {
			p := startWatched(t, exec.Command("sleep", fmt.Sprintf("0.0%d", 2*i+1))).cmd.Process.Pid
			code, out := attach(t, "attach", strconv.Itoa(p))
			if code != 0 && code != 1 {
				t.Errorf("exit %d:\n%s", code, out)
			}
			if code == 1 && !regexp.MustCompile(`no such process|exited|ended|not recorded|zombie`).MatchString(out) {
				t.Errorf("unclear message for a program that exited: %s", out)
			}
			for _, dir := range control.AttachDirs(p) {
				if _, err := os.Stat(dir); err == nil {
					t.Errorf("the session directory %s was left behind", dir)
				}
			}
		}
	})
}

// readyProgram is a program started in the background that said ready;
// its stdin is a pipe (closing it ends the fixtures that wait on it).
type readyProgram struct {
	*watched
	stdin io.WriteCloser
}

func (p *readyProgram) pid() int { return p.cmd.Process.Pid }

// startReady starts argv in the background (killed and reaped at the end
// of the test) and waits for it to say ready: started, its libraries
// loaded, at the point the test wants it.
func startReady(t *testing.T, argv ...string) *readyProgram {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = testEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &readyProgram{watched: startWatched(t, cmd), stdin: stdin}
	t.Cleanup(func() { stdin.Close() })
	p.stdout.Await(t, "ready", 1)
	return p
}

// TestAttachLaterModulesAndCxx: a module dlopen'ed after the attach has
// its allocations recorded (its leaks found at its function), and C++
// programs' operator new and delete pair up (no mismatched free from
// blocks that new made before the attach or after it).
func TestAttachLaterModulesAndCxx(t *testing.T) {
	t.Parallel()
	t.Run("dlopen", func(t *testing.T) {
		lib := fixture(t, "plugin.c", "-shared", "-fPIC")
		bin := fixtureCache.BuildSource(t, "later.c", `#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
	char c;
	printf("ready\n");
	fflush(stdout);
	while (read(0, &c, 1) > 0) /* attached meanwhile */
		;
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) return 3;
	void *(*make)(void) = (void *(*)(void))dlsym(h, "plugin_make");
	void *volatile a = make(), *volatile b = make();
	(void)a; (void)b;
	return 0;
}
`, "-g", "-ldl")
		p := startReady(t, bin, lib)
		a := startAttach(t, p.pid())
		p.stdin.Close()
		r, text := a.wait(t)
		var blocks uint64
		for _, l := range r.Leaks {
			if l.Kind == "definite" && len(l.Stack) > 0 && l.Stack[0].Function == "plugin_make" {
				blocks += l.Blocks
			}
		}
		if blocks != 2 || r.Exit.Code == nil || *r.Exit.Code != 0 {
			t.Errorf("%d definite blocks at plugin_make, exit %v; want 2 and 0:\n%s", blocks, r.Exit.Code, text)
		}
	})
	t.Run("cxx", func(t *testing.T) {
		// Strings made with new before the attach are deleted after it,
		// among those made after.
		bin := fixtureCache.BuildSource(t, "cxx.cc", `#include <cstdio>
#include <string>
#include <vector>
#include <unistd.h>
int *volatile keep;
static std::vector<std::string *> v;
static void work(int from, int to) {
	for (int i = from; i < to; i++) {
		v.push_back(new std::string(100, 'x'));
		if (v.size() > 10) { delete v.front(); v.erase(v.begin()); }
		int *a = new int[10];
		delete[] a;
		if (i % 50 == 0) keep = new int(5);
	}
}
int main() {
	work(0, 100);
	std::printf("ready\n");
	std::fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	work(100, 200);
	for (auto *s : v) delete s;
	return 0;
}
`, "-g", "-O0")
		p := startReady(t, bin)
		a := startAttach(t, p.pid())
		p.stdin.Close()
		r, text := a.wait(t)
		if len(r.Errors) != 0 {
			t.Errorf("improper uses after attach to a C++ program: %+v\n%s", r.Errors, text)
		}
		if !hasLeak(r.jsonImage, "definite", "work") || r.Totals.Allocations == 0 {
			t.Errorf("its `new int(5)` leaks after the attach are not found:\n%s", text)
		}
		if r.Totals.UnknownFrees < 10 {
			t.Errorf("%d unknown frees, want at least the 10 strings made before the attach", r.Totals.UnknownFrees)
		}
		if calls := firstLine(text, "calls:"); !strings.Contains(calls, "new_array") || !strings.Contains(calls, "delete_array") {
			t.Errorf("new[] and delete[] not recorded as such: %s", calls)
		}
	})
}

// TestAttachSingleThreadAfterMalloc: the only thread sleeps right after
// calling malloc, so its stack still holds malloc's return addresses in
// slots the sleep's frames reuse; it is at a safe point all the same (a
// blocked thread is judged by its system call, not by stale words).
func TestAttachSingleThreadAfterMalloc(t *testing.T) {
	t.Parallel()
	bin := fixtureCache.BuildSource(t, "sleeper.c", `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
void *volatile keep;
int main(void) {
	for (int n = 0;; n++) {
		for (int i = 0; i < 100; i++) { keep = malloc(1000 + i); memset(keep, 1, 1000); free(keep); }
		keep = malloc(33);
		if (n == 0) { printf("ready\n"); fflush(stdout); }
		usleep(200000);
	}
}
`, "-g", "-O1")
	p := startReady(t, bin)
	a := startAttach(t, p.pid(), "--for", "1s")
	r, text := a.wait(t)
	if !r.Exit.Detached || !hasLeak(r.jsonImage, "definite", "main") {
		t.Errorf("attach to a thread sleeping after malloc: detached %v\n%s\n%s", r.Exit.Detached, text, a.stderr)
	}
}
