package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// The end-to-end tests wait for what programs and leakpath say or do,
// never for a time: see testfixture.Output and testfixture.Poll.

// watched is a program started in the background with its stdout (and
// stderr, when asked) collected; killed and reaped at the end of the
// test.
type watched struct {
	cmd            *exec.Cmd
	stdout, stderr *testfixture.Output
	done           chan error // its Wait's result, once
}

// startWatched starts cmd with its output collected (what cmd.Stdout or
// cmd.Stderr already names is replaced).
func startWatched(t *testing.T, cmd *exec.Cmd) *watched {
	t.Helper()
	w := &watched{cmd: cmd, stdout: new(testfixture.Output), stderr: new(testfixture.Output), done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		w.stdout.Close()
		w.stderr.Close()
		w.done <- err
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-w.done
	})
	return w
}

// wait waits for the program to end and returns its exit code.
func (w *watched) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for the cleanup, or another wait
		return exitCode(err, w.cmd.ProcessState)
	case <-time.After(testfixture.HangGuard):
		t.Fatalf("%s still runs after %v:\n%s", w.cmd.Path, testfixture.HangGuard, w.stderr)
		return 0
	}
}

// programUnder returns the pid of prog once leakpath (pid lp) has started
// it: a child whose command line starts with prog, after its exec, so
// its environment (the agent preloaded) is its own. Any of leakpath's
// threads may have started it; other children (its probe of the
// breakpoints) run other programs.
func programUnder(t *testing.T, lp int, prog string) int {
	t.Helper()
	pid := 0
	testfixture.Poll(t, "leakpath started "+prog, func() bool {
		files, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(lp), "task", "*", "children"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, child := range strings.Fields(string(b)) {
				if line, _ := os.ReadFile("/proc/" + child + "/cmdline"); strings.HasPrefix(string(line), prog+"\x00") {
					pid, _ = strconv.Atoi(child)
					return true
				}
			}
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(lp)); err != nil {
			t.Fatalf("leakpath (pid %d) ended before it started %s", lp, prog)
		}
		return false
	})
	return pid
}
