package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// reportJSON runs `leakpath report --format json TRACE`.
func reportJSON(t *testing.T, trace string) (*jsonReport, string, int) {
	t.Helper()
	cmd := exec.Command(lpBin, "report", "--format", "json", trace)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if code != 0 {
		return nil, errb.String(), code
	}
	var r jsonReport
	if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out.String())
	}
	return &r, errb.String(), code
}

func TestTraceReplaysTheSameReport(t *testing.T) {
	bin := fixture(t, "fork.c")
	trace := filepath.Join(t.TempDir(), "fork.lpt")
	live := leakpath(t, []string{"-o", trace}, nil, bin)
	off, stderr, code := reportJSON(t, trace)
	if code != 0 {
		t.Fatalf("leakpath report exited %d: %s", code, stderr)
	}
	if len(off.Processes) != len(live.report.Processes) {
		t.Fatalf("%d images offline, %d live", len(off.Processes), len(live.report.Processes))
	}
	for i := range off.Processes {
		a, b := off.Processes[i], live.report.Processes[i]
		if a.PID != b.PID || a.Totals.Allocations != b.Totals.Allocations || a.Totals.Frees != b.Totals.Frees ||
			a.Totals.LeakedBytes != b.Totals.LeakedBytes || a.Totals.PeakBytes != b.Totals.PeakBytes ||
			len(a.Leaks) != len(b.Leaks) {
			t.Errorf("image %d differs offline:\n%+v\nlive:\n%+v", i, a.Totals, b.Totals)
		}
		for j := range a.Leaks {
			if j < len(b.Leaks) && (a.Leaks[j].Bytes != b.Leaks[j].Bytes || len(a.Leaks[j].Stack) != len(b.Leaks[j].Stack)) {
				t.Errorf("image %d leak %d differs offline", i, j)
			}
		}
	}
	// The text report from the trace names the same leaks.
	text, err := exec.Command(lpBin, "report", trace).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(live.text, "\n") {
		if strings.HasPrefix(line, "LEAK ") && !strings.Contains(string(text), line) {
			t.Errorf("offline text report lacks %q", line)
		}
	}
}

func TestTruncatedAndCorruptTraces(t *testing.T) {
	bin := fixture(t, "busy.c")
	dir := t.TempDir()
	trace := filepath.Join(dir, "busy.lpt")
	leakpath(t, []string{"-o", trace}, nil, bin, "300")
	full, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	whole, _, code := reportJSON(t, trace)
	if code != 0 || whole.Totals.Allocations < 1000 {
		t.Fatalf("whole trace: exit %d, %+v", code, whole)
	}
	// Cut anywhere after the header: a report of what came before, and a
	// warning; never a crash.
	for _, frac := range []float64{0.3, 0.6, 0.95} {
		cut := filepath.Join(dir, "cut.lpt")
		os.WriteFile(cut, full[:int(float64(len(full))*frac)], 0o644)
		r, stderr, code := reportJSON(t, cut)
		if code != 0 {
			t.Errorf("cut at %.0f%%: exit %d: %s", frac*100, code, stderr)
			continue
		}
		if r.Totals.Allocations > whole.Totals.Allocations || len(r.Warnings) == 0 {
			t.Errorf("cut at %.0f%%: %d allocations (whole %d), warnings %q", frac*100, r.Totals.Allocations, whole.Totals.Allocations, r.Warnings)
		}
	}
	// Not a trace, an empty file, a cut header: a clear error.
	for name, data := range map[string][]byte{"text": []byte("hello, this is not a trace\n"), "empty": nil, "header": full[:10]} {
		bad := filepath.Join(dir, name+".lpt")
		os.WriteFile(bad, data, 0o644)
		_, stderr, code := reportJSON(t, bad)
		if code != 1 || !strings.HasPrefix(stderr, "leakpath: ") || strings.Contains(stderr, "panic") {
			t.Errorf("%s: exit %d, stderr %q", name, code, stderr)
		}
	}
	// Flipped bytes in the middle: a report with a warning, or a clear
	// error; never a panic.
	flipped := append([]byte(nil), full...)
	for i := len(flipped) / 2; i < len(flipped)/2+64 && i < len(flipped); i++ {
		flipped[i] ^= 0x5a
	}
	bad := filepath.Join(dir, "flipped.lpt")
	os.WriteFile(bad, flipped, 0o644)
	if _, stderr, code := reportJSON(t, bad); code != 0 && (code != 1 || strings.Contains(stderr, "panic")) {
		t.Errorf("flipped: exit %d, stderr %q", code, stderr)
	}
	// A missing file.
	if _, stderr, code := reportJSON(t, filepath.Join(dir, "missing.lpt")); code != 1 || !strings.Contains(stderr, "missing.lpt") {
		t.Errorf("missing: exit %d, stderr %q", code, stderr)
	}
}

// TestOutlivesKilledCollector: a program whose collector was SIGKILLed
// and not yet reaped (a zombie, which kill(2) still finds) goes on
// without waiting for it: its next allocations fill its ring many times
// over, it asks for a snapshot and exits, with its output and exit code.
// Through sh, which the collector started (it sees its parent change) and
// which starts the program (it sees the collector's clock stand still).
// Before the agent looked for a dead collector at each wait, the full
// ring waited for ever: the hang guard fails this test then.
func TestOutlivesKilledCollector(t *testing.T) {
	bin := fixture(t, "outlive.c", includeFlag())
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	stop := filepath.Join(dir, "stop")
	code := filepath.Join(dir, "code")
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// 2,000,000 blocks: about 50 MB of records, 200 times a 256 KiB ring.
	const blocks = 2000000
	cmd := exec.Command(lpBin, "run", "-o", filepath.Join(dir, "t.lpt"), "--report", filepath.Join(dir, "r.txt"), "--",
		"sh", "-c", fmt.Sprintf("%s %s %s %d; echo \"exit $?\" > %s", bin, stop, ready, blocks, code))
	cmd.Env = testEnv("TMPDIR=" + dir)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(ready); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL) // hung: not to outlive the test
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	testfixture.Poll(t, "the program is recorded", func() bool {
		b, err := os.ReadFile(ready)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped (no cmd.Wait) until the program is done.
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testfixture.Poll(t, "the program ended after leakpath was killed", func() bool {
		b, err := os.ReadFile(code)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	cmd.Wait()
	if b, _ := os.ReadFile(code); string(b) != "exit 3\n" {
		t.Errorf("the program's exit: %q, want exit 3", b)
	}
	got, _ := os.ReadFile(out.Name())
	// -1: leakpath no longer answers (the agent knows its collector is gone).
	want := fmt.Sprintf("kept %d blocks\nsnapshot -1\n", blocks)
	if string(got) != want {
		t.Errorf("the program's output: %q, want %q", got, want)
	}
}

// TestCollectorKilled: SIGKILL leakpath itself while it records. The
// program goes on and ends normally, and the trace is readable up to the
// last chunk written. The session directory the killed collector left is
// removed by a later run once the program is gone.
func TestCollectorKilled(t *testing.T) {
	bin := fixture(t, "busy.c")
	dir := t.TempDir()
	sessions := t.TempDir()
	trace := filepath.Join(dir, "killed.lpt")
	marker := filepath.Join(dir, "done")
	stop := filepath.Join(dir, "stop")
	// The program runs until the test says stop; its exit is seen through a
	// marker file written after it.
	cmd := exec.Command(lpBin, "run", "-o", trace, "--report", filepath.Join(dir, "r.txt"), "--",
		"sh", "-c", bin+" 600000 "+stop+" && touch "+marker)
	cmd.Env = testEnv("TMPDIR=" + sessions)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once the trace holds a thousand allocations (the collector
	// flushes it every second), however long that takes on a busy machine.
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); os.WriteFile(stop, nil, 0o644) })
	testfixture.Poll(t, "the trace holds a thousand allocations", func() bool { return traceAllocations(t, trace) >= 1000 })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testfixture.Poll(t, "the program finished after leakpath was killed", func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	r, stderr, code := reportJSON(t, trace)
	if code != 0 {
		t.Fatalf("report of the killed run's trace: exit %d: %s", code, stderr)
	}
	im := r.Processes
	if len(im) == 0 {
		im = []jsonImage{r.jsonImage}
	}
	var allocs uint64
	for _, p := range im {
		allocs += p.Totals.Allocations
	}
	if allocs < 1000 || len(r.Warnings) == 0 {
		t.Errorf("killed run's trace: %d allocations, warnings %q", allocs, r.Warnings)
	}

	left, _ := filepath.Glob(filepath.Join(sessions, fmt.Sprintf("leakpath-%d-*", cmd.Process.Pid)))
	if len(left) != 1 {
		t.Fatalf("the killed collector's session directory: %q, want one", left)
	}
	// The shell may outlive the marker by a moment: while it runs, its
	// LD_PRELOAD names the directory, which then stays.
	testfixture.Poll(t, "a next run removed "+left[0], func() bool {
		next := exec.Command(lpBin, "run", "--report", os.DevNull, "--", "true")
		next.Env = testEnv("TMPDIR=" + sessions)
		if out, err := next.CombinedOutput(); err != nil {
			t.Fatalf("the next run: %v\n%s", err, out)
		}
		_, err := os.Stat(left[0])
		return os.IsNotExist(err)
	})
	if ents, _ := os.ReadDir(sessions); len(ents) != 0 {
		t.Errorf("left in TMPDIR after the next runs: %v", ents)
	}
}

// traceAllocations is how many allocations the (maybe still growing) trace
// at path holds so far: 0 while it has no whole chunk.
func traceAllocations(t testing.TB, path string) uint64 {
	out, err := exec.Command(lpBin, "report", "--format", "json", path).Output()
	if err != nil {
		return 0
	}
	var r jsonReport
	if json.Unmarshal(out, &r) != nil {
		return 0
	}
	im := r.Processes
	if len(im) == 0 {
		im = []jsonImage{r.jsonImage}
	}
	var n uint64
	for _, p := range im {
		n += p.Totals.Allocations
	}
	return n
}
