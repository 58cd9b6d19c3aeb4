package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// hangGuard bounds how long these tests wait for leakpath to end: not a
// measure of speed, only so that a leakpath that never ends fails the test
// instead of hanging it. One bound for every test (testfixture's).
const hangGuard = testfixture.HangGuard

// guarded is one run of leakpath under the hang guard.
type guarded struct {
	code    int
	ended   bool  // before the guard
	maxRSS  int64 // leakpath's peak resident memory, in KiB (its child's included)
	stdout  string
	stderr  string
	text    string // the text report
	reportW []string
}

// runGuarded runs leakpath with args; each line the program prints on
// stdout goes to onLine (with the leakpath process and the file its
// stderr goes to) as it comes. Once
// leakpath ended, after (if not nil) runs before the program's output is
// read to its end (a program that outlives leakpath holds it open).
func runGuarded(t *testing.T, args []string, onLine func(line string, lp *os.Process, stderr string), after func()) guarded {
	t.Helper()
	dir := t.TempDir()
	textPath, jsonPath := filepath.Join(dir, "report.txt"), filepath.Join(dir, "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	defer cancel()
	cmd := exec.CommandContext(ctx, lpBin, append([]string{"run", "--report", textPath, "--json", jsonPath}, args...)...)
	cmd.Env = testEnv()
	// Files, not pipes the exec package copies from: Wait would wait for a
	// program that outlives leakpath to close them.
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var lines []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if onLine != nil {
				onLine(sc.Text(), cmd.Process, errf.Name())
			}
		}
	}()
	var g guarded
	err = cmd.Wait()
	g.ended = ctx.Err() == nil
	g.code = exitCode(err, cmd.ProcessState)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		g.maxRSS = ru.Maxrss
	}
	if after != nil {
		after()
	}
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatalf("the program's output did not end within %v", hangGuard)
	}
	b, _ := os.ReadFile(errf.Name())
	g.stdout, g.stderr = strings.Join(lines, "\n"), string(b)
	if b, err := os.ReadFile(textPath); err == nil {
		g.text = string(b)
	}
	if b, err := os.ReadFile(jsonPath); err == nil {
		var rep jsonReport
		if json.Unmarshal(b, &rep) == nil {
			g.reportW = rep.Warnings
		}
	}
	return g
}

// TestScribbledRegion: a program that writes over the memory it shares
// with the collector (random bytes over the header, runs of 0xff, random
// bytes over its ring, slot and fold area, random bytes anywhere), then
// goes on allocating and exits with code 3. leakpath must end with it,
// exit with its code, say that the region is corrupt and that recording
// stopped, and stay well under the memory limit it is given.
func TestScribbledRegion(t *testing.T) {
	prog := fixture(t, "scribble.c")
	const limitMiB = 256
	for _, mode := range []string{"header", "ff", "rings", "all"} {
		t.Run(mode, func(t *testing.T) {
			g := runGuarded(t, []string{"--max-memory", strconv.Itoa(limitMiB), "--", prog, mode}, nil, nil)
			if !g.ended {
				t.Fatalf("leakpath did not end within %v of the program's start\nstderr: %s", hangGuard, g.stderr)
			}
			if !strings.HasPrefix(g.stdout, "scribbled ") || g.stdout == "scribbled 0" {
				t.Fatalf("the program did not scribble: %q\nstderr: %s", g.stdout, g.stderr)
			}
			if g.code != 3 {
				t.Errorf("leakpath exited %d, want the program's 3\nstderr: %s\nreport: %s", g.code, g.stderr, g.text)
			}
			warned := false
			for _, w := range g.reportW {
				warned = warned || strings.Contains(w, "the shared region is corrupt (") && strings.Contains(w, "recording of this image stopped at")
			}
			if !warned || !strings.Contains(g.text, "the shared region is corrupt") {
				t.Errorf("no warning of the corrupt region: %q\nreport: %s", g.reportW, g.text)
			}
			if g.maxRSS <= 0 || g.maxRSS >= limitMiB<<10 {
				t.Errorf("leakpath's peak RSS %d KiB, want under the limit of %d MiB", g.maxRSS, limitMiB)
			}
			t.Logf("%s: peak RSS %d KiB; %q", mode, g.maxRSS, g.reportW)
		})
	}
}

// TestMemoryLimitStopsRecording: past --max-memory the collector stops
// recording, says so, and the program runs on to its own end and code.
func TestMemoryLimitStopsRecording(t *testing.T) {
	prog := fixture(t, "scribble.c")
	// The program allocates until leakpath says it stopped recording
	// (its memory is measured ten times a second, at the collector's
	// last garbage collection: a loaded machine may take a while).
	stop := filepath.Join(t.TempDir(), "stop")
	done := make(chan struct{})
	defer close(done)
	g := runGuarded(t, []string{"--max-memory", "1", "--", prog, "none", "1", stop}, func(line string, lp *os.Process, stderr string) {
		go func() {
			for {
				if b, _ := os.ReadFile(stderr); strings.Contains(string(b), "stopping the recording") {
					os.WriteFile(stop, nil, 0o644)
					return
				}
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}, nil)
	if !g.ended {
		t.Fatalf("leakpath did not end within %v\nstderr: %s", hangGuard, g.stderr)
	}
	if g.code != 3 || g.stdout != "scribbled 0" {
		t.Errorf("exit %d, stdout %q: want the program's 3 and its output", g.code, g.stdout)
	}
	if !strings.Contains(strings.Join(g.reportW, "\n"), "passed its limit of 1 MiB (--max-memory): recording stopped") {
		t.Errorf("no warning of the limit: %q\nreport: %s", g.reportW, g.text)
	}
}

// TestSigtermWhileRunning: SIGTERM to leakpath while its program runs.
// The first is the program's: killed by it, leakpath ends with 128+15. A
// program that ignores SIGTERM: leakpath, sent another, stops recording
// and ends (the program runs on, and its report says so).
func TestSigtermWhileRunning(t *testing.T) {
	prog := fixture(t, "termed.c")
	for _, mode := range []string{"default", "ignore"} {
		t.Run(mode, func(t *testing.T) {
			var progPID atomic.Int64
			alive := true
			stop := make(chan struct{})
			g := runGuarded(t, []string{"--", prog, mode}, func(line string, lp *os.Process, stderr string) {
				if pid, ok := strings.CutPrefix(line, "ready "); ok {
					n, _ := strconv.Atoi(pid)
					progPID.Store(int64(n))
					lp.Signal(syscall.SIGTERM)
					if mode != "ignore" {
						return
					}
					// Again until leakpath says it stops recording: two
					// sent at once could arrive as one.
					go func() {
						for {
							select {
							case <-stop:
								return
							case <-time.After(200 * time.Millisecond):
							}
							if b, _ := os.ReadFile(stderr); strings.Contains(string(b), "stopping the recording") {
								return
							}
							lp.Signal(syscall.SIGTERM)
						}
					}()
				}
			}, func() {
				close(stop)
				if pid := int(progPID.Load()); pid > 0 && mode == "ignore" {
					alive = syscall.Kill(pid, 0) == nil
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if !g.ended {
				t.Fatalf("leakpath did not end within %v of SIGTERM\nstderr: %s", hangGuard, g.stderr)
			}
			if progPID.Load() == 0 {
				t.Fatalf("the program never got ready: %q\nstderr: %s", g.stdout, g.stderr)
			}
			if g.code != 128+int(syscall.SIGTERM) {
				t.Errorf("leakpath exited %d, want %d\nstderr: %s", g.code, 128+int(syscall.SIGTERM), g.stderr)
			}
			want := "was killed by SIGTERM"
			if mode == "ignore" {
				want = "was detached from (it runs on)"
				if !alive {
					t.Errorf("the program that ignores SIGTERM ended with leakpath")
				}
			}
			if !strings.Contains(g.text, want) {
				t.Errorf("report without %q:\n%s", want, g.text)
			}
		})
	}
}

// TestShrunkRegion: the program gets the region's memfd (and, as root,
// may open it again through /proc/self/map_files). Shrunk, the
// collector's reads of its mapping would die of SIGBUS and take leakpath
// down; the memfd's size is sealed, so leakpath ends with the program,
// its code and its output.
func TestShrunkRegion(t *testing.T) {
	prog := fixture(t, "scribble.c")
	g := runGuarded(t, []string{"--", prog, "shrink"}, nil, nil)
	if !g.ended {
		t.Fatalf("leakpath did not end within %v\nstderr: %s", hangGuard, g.stderr)
	}
	if g.stdout == "shrink 0" {
		t.Skip("the program found no descriptor of its region to shrink (not root: no /proc/self/map_files)")
	}
	if !strings.HasPrefix(g.stdout, "shrink ") {
		t.Fatalf("the program's output %q, want shrink N\nstderr: %s", g.stdout, g.stderr)
	}
	if g.code != 3 {
		t.Errorf("leakpath exited %d, want the program's 3\nstderr: %s", g.code, g.stderr)
	}
	if strings.Contains(g.stderr, "shrunk ") {
		t.Errorf("the program shrank the region's memfd: %s", g.stderr)
	}
	if !strings.Contains(g.text, "exited with code 3") {
		t.Errorf("no report of the program's end: %s", g.text)
	}
}
