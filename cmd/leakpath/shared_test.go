package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// The tests of running on a shared machine (docs/security.md): daemons,
// privilege drops, a full disk, output names others can plant.

// loaderComplaint is what ld.so prints into a program's stderr when a file
// LD_PRELOAD names cannot be loaded.
func loaderComplaint(b []byte) bool {
	return bytes.Contains(b, []byte("ld.so")) || bytes.Contains(b, []byte("cannot be preloaded"))
}

// waitFile waits for path to exist (the fixture's mark) and returns what
// it holds.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	var b []byte
	testfixture.Poll(t, path+" appears", func() bool {
		var err error
		b, err = os.ReadFile(path)
		return err == nil
	})
	return b
}

// TestDaemonOutlivesRun: a daemon (fork, setsid, the parent exits) that
// execs a program after leakpath has ended: neither leakpath's stderr nor
// the daemon's (DIR/out, where its child writes too) gets a line from the
// dynamic loader, the child does not load the agent (its environment no
// longer names it), and no session directory is left behind. Recorded
// (the default) leakpath waits for the daemon, and is interrupted; with
// --follow-fork=false it ends with the program.
func TestDaemonOutlivesRun(t *testing.T) {
	bin := fixture(t, "daemon.c")
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env program to run from the daemon")
	}
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"recorded", nil}, {"not-followed", []string{"--follow-fork=false"}}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sessions := t.TempDir()
			args := append(append([]string{"run", "--report", filepath.Join(dir, "report.txt")}, tc.flags...), "--", bin, dir, env)
			cmd := exec.Command(lpBin, args...)
			cmd.Env = testEnv("TMPDIR=" + sessions)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// leakpath's stderr, and a note when it says it waits for
			// the daemon.
			var mu sync.Mutex
			var lpErr bytes.Buffer
			waiting := make(chan struct{})
			read := make(chan struct{})
			go func() {
				defer close(read)
				sc := bufio.NewScanner(stderr)
				once := sync.Once{}
				for sc.Scan() {
					mu.Lock()
					lpErr.WriteString(sc.Text() + "\n")
					mu.Unlock()
					if strings.Contains(sc.Text(), "waiting for") {
						once.Do(func() { close(waiting) })
					}
				}
			}()
			exited := make(chan error, 1)
			go func() { <-read; exited <- cmd.Wait() }()
			waitFile(t, filepath.Join(dir, "ready"))
			select {
			case <-exited:
			case <-waiting:
				cmd.Process.Signal(syscall.SIGINT)
				<-exited
			case <-time.After(2 * time.Minute):
				cmd.Process.Kill()
				t.Fatal("leakpath neither ended nor said it waits for the daemon")
			}
			// leakpath has ended: now the daemon runs env.
			if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			status := strings.TrimSpace(string(waitFile(t, filepath.Join(dir, "done"))))
			out, _ := os.ReadFile(filepath.Join(dir, "out"))
			mu.Lock()
			lpStderr := lpErr.Bytes()
			mu.Unlock()
			t.Logf("the daemon's child exited with wait status %s; leakpath's stderr:\n%s", status, lpStderr)
			if status != "0" {
				t.Errorf("the daemon's child (env) ended with wait status %s", status)
			}
			if loaderComplaint(out) || loaderComplaint(lpStderr) {
				t.Errorf("the dynamic loader complained; the daemon's output:\n%s\nleakpath's stderr:\n%s", out, lpStderr)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "LD_PRELOAD=") && strings.Contains(line, "libleakpath") ||
					strings.HasPrefix(line, "LEAKPATH_SESSION=/") {
					t.Errorf("the daemon's child still has the agent in its environment: %s", line)
				}
			}
			if !strings.Contains(string(out), "PATH=") {
				t.Errorf("the daemon's child printed no environment:\n%s", out)
			}
			left, _ := filepath.Glob(filepath.Join(sessions, fmt.Sprintf("leakpath-%d-*", cmd.Process.Pid)))
			if len(left) != 0 {
				t.Errorf("session directory left behind: %q", left)
			}
		})
	}
}

// privilegeDrop returns the command line that runs a program as uid and
// gid 65534 without a setuid executable (setpriv, else runuser), or skips.
func privilegeDrop(t *testing.T) []string {
	if os.Geteuid() != 0 {
		t.Skip("dropping privileges needs root")
	}
	if p, err := exec.LookPath("setpriv"); err == nil {
		return []string{p, "--reuid=65534", "--regid=65534", "--clear-groups", "--"}
	}
	if p, err := exec.LookPath("runuser"); err == nil {
		if _, err := exec.Command(p, "-u", "nobody", "--", "true").CombinedOutput(); err == nil {
			return []string{p, "-u", "nobody", "--"}
		}
	}
	t.Skip("neither setpriv nor runuser (with a user nobody) is here")
	return nil
}

// publicCopy copies the executable at path into a directory any user can
// enter (the tests' own are private), for another user to run.
func publicCopy(t *testing.T, path string) string {
	dir, err := os.MkdirTemp("", "leakpath-public-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestPrivilegeDrop: root runs a program that drops to uid 65534 and execs
// another: that one cannot reach the collector. It gets no line from the
// dynamic loader, prints and exits as without leakpath (the agent took
// itself out of its environment before it looked), and the report names
// it in a warning.
func TestPrivilegeDrop(t *testing.T) {
	drop := privilegeDrop(t)
	bin := publicCopy(t, fixture(t, "dropped.c"))
	argv := append(append([]string(nil), drop...), bin)
	// A preload of the user's own stays in LD_PRELOAD: libm, harmless.
	env := testEnv()
	if libm, _ := filepath.Glob("/lib/*-linux-gnu/libm.so.6"); len(libm) > 0 {
		env = testEnv("LD_PRELOAD=" + libm[0])
	}
	without := nativeEnv(t, env, nil, argv...)
	if without.code != 3 || !strings.HasPrefix(string(without.stdout), "uid=65534 ") {
		t.Fatalf("without leakpath: exit %d, stdout %q, stderr %q", without.code, without.stdout, without.stderr)
	}
	r := leakpathEnv(t, env, nil, nil, argv...)
	t.Logf("stdout %q; warnings %q", r.stdout, r.report.Warnings)
	sameBehaviour(t, r, without)
	if loaderComplaint(r.stderr) {
		t.Errorf("the dynamic loader complained:\n%s", r.stderr)
	}
	named := false
	for _, w := range r.report.Warnings {
		named = named || strings.Contains(w, "uid 65534") && strings.Contains(w, filepath.Base(bin))
	}
	if !named {
		t.Errorf("no warning names %s, run as uid 65534: %q", filepath.Base(bin), r.report.Warnings)
	}
	if !strings.Contains(r.text, "uid 65534") {
		t.Errorf("the text report does not name the process:\n%s", r.text)
	}
}

// TestFullDisk: -o on a file system of 64 KiB that the trace overflows.
// The program runs as without leakpath, the text report is printed whole
// with a warning of where the trace was cut, leakpath exits with the
// program's code, and `leakpath report` reads the cut trace with its
// warning.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	mnt := filepath.Join(t.TempDir(), "full")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	bin := fixture(t, "filler.c")
	trace := filepath.Join(mnt, "trace.lpt")
	cmd := exec.Command(lpBin, "run", "-o", trace, "--", bin, "200000", "7")
	cmd.Env = testEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := exitCode(err, cmd.ProcessState)
	stderr := errb.String()
	t.Logf("leakpath exited %d; stderr:\n%s", code, lastLines(stderr, 6))
	if code != 7 {
		t.Errorf("exit code %d, want the program's 7", code)
	}
	// 200,000 allocations in the loop, 1,000 leaked after: all counted.
	if !strings.Contains(stderr, "exited with code 7") || !strings.Contains(stderr, "201,000 allocations") {
		t.Errorf("no text report of the whole run (201,000 allocations) on stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "writing the trace "+trace+" failed at") || !strings.Contains(stderr, "no space left on device") ||
		!strings.Contains(stderr, "covers the whole run") {
		t.Errorf("no warning of where the trace was cut:\n%s", stderr)
	}
	rep := exec.Command(lpBin, "report", trace)
	repOut, err := rep.CombinedOutput()
	if err != nil {
		t.Fatalf("leakpath report of the cut trace: %v\n%s", err, repOut)
	}
	if !strings.Contains(string(repOut), "reporting what came before") {
		t.Errorf("leakpath report says nothing of the cut:\n%s", lastLines(string(repOut), 4))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestOutputSymlinks: in a directory others may write to (like /tmp), a
// symbolic link planted at an output's name is not written through: -o
// named in advance fails before the program starts; -o with %p (created
// when the program's first events come) is cut with a warning and the run
// goes on; --json with %p (created at the end) fails with a clear error.
// The link's target is never touched. A link in a private directory
// (/dev/stdout) is still written through.
func TestOutputSymlinks(t *testing.T) {
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(shared, "victim")
	if err := os.WriteFile(victim, []byte("victim\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	untouched := func() {
		t.Helper()
		if b, err := os.ReadFile(victim); err != nil || string(b) != "victim\n" {
			t.Errorf("the link's target was written: %q, %v", b, err)
		}
	}
	plant := func(name string) string {
		link := filepath.Join(shared, name)
		if err := os.Symlink(victim, link); err != nil {
			t.Fatal(err)
		}
		return link
	}
	prog := fixture(t, "fork.c")

	t.Run("named", func(t *testing.T) {
		link := plant("plain.lpt")
		marker := filepath.Join(t.TempDir(), "ran")
		r := runCapture(t, testEnv(), nil, lpBin, "run", "-o", link, "--", "sh", "-c", "touch "+marker)
		if r.code == 0 || !strings.Contains(string(r.stderr), "symbolic link") {
			t.Errorf("exit %d; stderr %s", r.code, r.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Error("the program ran though its output could not be created")
		}
		untouched()
	})

	// waiter (static: records nothing) tells its pid, waits for the
	// links, then execs the program in the same process.
	waiter := fixture(t, "waiter.c", "-static")
	withPID := func(t *testing.T, flags []string, names ...string) result {
		dir := t.TempDir()
		args := append(append([]string{lpBin, "run"}, flags...), "--", waiter, dir, prog)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = testEnv()
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := strings.TrimSpace(string(waitFile(t, filepath.Join(dir, "pid"))))
		if _, err := strconv.Atoi(pid); err != nil {
			t.Fatalf("pid %q", pid)
		}
		for _, n := range names {
			plant(strings.ReplaceAll(n, "%p", pid))
		}
		os.WriteFile(filepath.Join(dir, "go"), nil, 0o600)
		err := cmd.Wait()
		return result{stdout: out.Bytes(), stderr: errb.Bytes(), code: exitCode(err, cmd.ProcessState)}
	}

	t.Run("trace-pid", func(t *testing.T) {
		r := withPID(t, []string{"-o", filepath.Join(shared, "t.%p.lpt")}, "t.%p.lpt")
		t.Logf("exit %d; stderr:\n%s", r.code, lastLines(string(r.stderr), 4))
		if r.code != 0 {
			t.Errorf("exit %d, want the program's 0", r.code)
		}
		if !strings.Contains(string(r.stderr), "symbolic link") || !strings.Contains(string(r.stderr), "no trace was kept") {
			t.Errorf("no warning of the refused link:\n%s", r.stderr)
		}
		untouched()
	})

	t.Run("json-pid", func(t *testing.T) {
		r := withPID(t, []string{"--json", filepath.Join(shared, "r.%p.json"), "--report", os.DevNull}, "r.%p.json")
		t.Logf("exit %d; stderr:\n%s", r.code, lastLines(string(r.stderr), 4))
		if r.code == 0 || !strings.Contains(string(r.stderr), "symbolic link") {
			t.Errorf("exit %d; stderr %s", r.code, r.stderr)
		}
		untouched()
	})

	t.Run("dev-stdout", func(t *testing.T) {
		if st, err := os.Lstat("/dev/stdout"); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Skip("/dev/stdout is no symbolic link here")
		}
		r := runCapture(t, testEnv(), nil, lpBin, "run", "--json", "/dev/stdout", "--report", os.DevNull, "--", prog)
		var rep jsonReport
		if err := json.NewDecoder(io.LimitReader(bytes.NewReader(r.stdout), 1<<24)).Decode(&rep); err != nil || rep.Schema != "leakpath.report/v1" {
			t.Errorf("--json /dev/stdout: %v; exit %d; stderr %s", err, r.code, r.stderr)
		}
	})
}
