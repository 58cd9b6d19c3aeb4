package ptrace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const leakpathMagic = 0x6c65616b70617468

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readU64(t *testing.T, tr *Tracer, addr uint64) uint64 {
	t.Helper()
	var b [8]byte
	if n, err := tr.ReadMemory(addr, b[:]); err != nil || n != 8 {
		t.Fatalf("ReadMemory(%#x): n=%d err=%v", addr, n, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// readCounters reads the threads fixture's per-worker counters.
func readCounters(t *testing.T, tr *Tracer, addr uint64, workers int) []uint64 {
	t.Helper()
	b := make([]byte, 64*workers)
	if n, err := tr.ReadMemory(addr, b); err != nil || n != len(b) {
		t.Fatalf("ReadMemory(counters): n=%d err=%v", n, err)
	}
	c := make([]uint64, workers)
	for i := range c {
		c[i] = binary.LittleEndian.Uint64(b[64*i:])
	}
	return c
}

func sum(v []uint64) (s uint64) {
	for _, x := range v {
		s += x
	}
	return s
}

func durations(ds []time.Duration) (median, max time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// TestStopResumeThreads stops and resumes a program whose 8 threads spin
// and create and join short-lived threads, 500 times; each time every
// thread's registers must look like a real stopped thread's, a known global
// must read back, no counter may move while stopped, and the counters must
// move once resumed (waited for: a busy machine may run them late). The
// program must print what it prints untraced.
func TestStopResumeThreads(t *testing.T) {
	want := runPlain(t, "threads")
	p := start(t, "threads")
	hdr := parseFields(t, p.line(t))
	magicAddr, countersAddr := hexField(t, hdr, "magic"), hexField(t, hdr, "counters")
	const workers = 8
	tr := seize(t, p.pid())

	const rounds = 500
	var pauses, stops []time.Duration
	maxThreads := 0
	for round := 0; round < rounds; round++ {
		t0 := time.Now()
		if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
			t.Fatalf("round %d: StopAll: %v\n%s", round, err, diagnose(tr))
		}
		t1 := time.Now()
		before := readCounters(t, tr, countersAddr, workers)
		if got := readU64(t, tr, magicAddr); got != leakpathMagic {
			t.Fatalf("round %d: magic at %#x = %#x, want %#x", round, magicAddr, got, uint64(leakpathMagic))
		}
		tids := tr.Threads()
		maxThreads = max(maxThreads, len(tids))
		if len(tids) < workers+1 || !slices.Contains(tids, p.pid()) {
			t.Fatalf("round %d: Threads() = %v, want the leader and at least %d workers", round, tids, workers)
		}
		maps := readMaps(t, p.pid())
		stacks := map[uint64]int{}
		for _, tid := range tids {
			r, err := tr.Regs(tid)
			if err != nil {
				t.Fatalf("round %d: Regs(%d): %v", round, tid, err)
			}
			if m := findMapping(maps, r.Rip); m == nil || m.perms[2] != 'x' {
				t.Fatalf("round %d: thread %d rip %#x not in an executable mapping (%v)", round, tid, r.Rip, m)
			}
			m := findMapping(maps, r.Rsp)
			if m == nil || m.perms[:2] != "rw" {
				t.Fatalf("round %d: thread %d rsp %#x not in a writable mapping (%v)", round, tid, r.Rsp, m)
			}
			if tid == p.pid() && m.name != "[stack]" {
				t.Fatalf("round %d: leader rsp %#x in %q, want [stack]", round, r.Rsp, m.name)
			}
			if other, dup := stacks[m.start]; dup {
				t.Fatalf("round %d: threads %d and %d have rsp in the same mapping %#x", round, other, tid, m.start)
			}
			stacks[m.start] = tid
		}
		after := readCounters(t, tr, countersAddr, workers)
		if !slices.Equal(before, after) {
			t.Fatalf("round %d: counters moved while stopped: %v -> %v", round, before, after)
		}
		t2 := time.Now()
		if err := tr.ResumeAll(); err != nil {
			t.Fatalf("round %d: ResumeAll: %v", round, err)
		}
		t3 := time.Now()
		pauses = append(pauses, t1.Sub(t0)+t3.Sub(t2))
		stops = append(stops, t3.Sub(t0))
		stopped := sum(after)
		for deadline := time.Now().Add(hangGuard); sum(readCounters(t, tr, countersAddr, workers)) == stopped; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no counter moved in %v after ResumeAll\n%s", round, hangGuard, diagnose(tr))
			}
		}
	}
	med, mx := durations(pauses)
	smed, smx := durations(stops)
	t.Logf("StopAll+ResumeAll round trip over %d rounds (up to %d threads): median %v, max %v; with the inspection of every thread: median %v, max %v",
		rounds, maxThreads, med, mx, smed, smx)
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got, st := p.finish(t, hangGuard)
	if !st.Success() {
		t.Fatalf("traced run: %v", st)
	}
	// The first line holds addresses, which differ between runs.
	if g, w := lastLine(got), lastLine(want); g != w {
		t.Fatalf("traced run printed %q, untraced %q", g, w)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// TestSignals checks that the signals a program sends itself while seized
// reach its handlers exactly as often as untraced, while StopAll/ResumeAll
// run 200 times.
func TestSignals(t *testing.T) {
	const rounds = "2000"
	want := runPlain(t, "signals", rounds)
	wantLine := "alarms=2000 usr1=2000 rt=200/200 rtsum=199000/199000 chld=40/40 lost=0"
	if lastLine(want) != wantLine {
		t.Fatalf("untraced run printed %q, want %q", lastLine(want), wantLine)
	}
	p := start(t, "signals", rounds)
	if l := p.line(t); l != "ready" {
		t.Fatalf("first line %q", l)
	}
	tr := seize(t, p.pid())
	for i := 0; i < 200; i++ {
		if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
			t.Fatalf("round %d: StopAll: %v\n%s", i, err, diagnose(tr))
		}
		if err := tr.ResumeAll(); err != nil {
			t.Fatalf("round %d: ResumeAll: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Keep tracing to the end: every signal goes through the Tracer.
	select {
	case <-tr.Exited():
	case <-time.After(hangGuard):
		t.Fatalf("the program did not exit within %v while traced", hangGuard)
	}
	if ws, ok := tr.ExitStatus(); !ok || !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("ExitStatus = %v, %v; want exit code 0", ws, ok)
	}
	got, st := p.finish(t, hangGuard)
	if !st.Success() {
		t.Fatalf("traced run: %v", st)
	}
	if lastLine(got) != wantLine {
		t.Fatalf("traced run printed %q, want %q", lastLine(got), wantLine)
	}
}

// TestExitDuringStopLoop lets the program exit in the middle of a
// StopAll/ResumeAll loop: the loop must end with ErrExited, every later
// call must fail the same way at once, and the exit status must still
// reach the parent's Wait.
func TestExitDuringStopLoop(t *testing.T) {
	for _, mode := range []string{"thread", "main", "leaderexit"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"300", "7"}
			if mode != "thread" {
				args = append(args, mode)
			}
			p := start(t, "exiter", args...)
			p.line(t)
			tr := seize(t, p.pid())
			deadline := time.Now().Add(hangGuard)
			var err error
			rounds := 0
			within(t, hangGuard+time.Minute, "StopAll loop", func() {
				for time.Now().Before(deadline) {
					if err = tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
						break
					}
					for _, tid := range tr.Threads() {
						if _, err = tr.Regs(tid); err != nil && !errors.Is(err, ErrNoThread) {
							break
						}
						err = nil
					}
					if err != nil {
						break
					}
					if err = tr.ResumeAll(); err != nil {
						break
					}
					rounds++
				}
			})
			if !errors.Is(err, ErrExited) {
				t.Fatalf("after %d rounds: err = %v, want ErrExited\n%s", rounds, err, diagnose(tr))
			}
			if !strings.Contains(err.Error(), "exit code 7") {
				t.Errorf("error %q does not say the exit code", err)
			}
			t.Logf("%d rounds, then: %v", rounds, err)
			within(t, hangGuard, "calls after the exit", func() {
				checkExited(t, tr, p.pid())
			})
			if ws, ok := tr.ExitStatus(); !ok || ws.ExitStatus() != 7 {
				t.Errorf("ExitStatus = %v, %v; want exit code 7", ws, ok)
			}
			within(t, hangGuard, "Close", func() {
				if err := tr.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			_, st := p.finish(t, hangGuard)
			if st.ExitCode() != 7 {
				t.Fatalf("the parent's Wait got %v, want exit code 7", st)
			}
		})
	}
}

// TestZombieLeader traces a process whose main thread has called
// pthread_exit: its leader is a zombie until the process exits. Seized
// after that, the leader is untraced; seized during it, past its
// PTRACE_EVENT_EXIT stop, it is traced but will never stop (a race the
// test forces by marking the leader running again). Either way StopAll
// must stop the other threads without waiting for the leader, and the
// exit, which the test lets come only after that, must be seen.
func TestZombieLeader(t *testing.T) {
	for _, mode := range []string{"seized-after-exit", "seized-during-exit"} {
		t.Run(mode, func(t *testing.T) {
			p := start(t, "exiter", "-", "7", "leaderexit") // exits at end of file on stdin
			p.line(t)
			waitZombie := func() {
				deadline := time.Now().Add(hangGuard)
				for taskState(p.pid(), p.pid()) != 'Z' {
					if time.Now().After(deadline) {
						t.Fatalf("the leader is not a zombie %v after pthread_exit\n%s", hangGuard, procState(p.pid()))
					}
					time.Sleep(time.Millisecond)
				}
			}
			if mode == "seized-after-exit" {
				waitZombie()
			}
			tr := seize(t, p.pid())
			if mode == "seized-during-exit" {
				waitZombie()
				tr.do("test", func() error {
					tr.threads[p.pid()].state = running
					return nil
				})
			}
			// The program cannot exit before its stdin is closed: a
			// StopAll that waited for the zombie leader to stop would
			// wait until the hang guard and fail.
			if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
				t.Fatalf("StopAll: %v\n%s", err, diagnose(tr))
			}
			if tids := tr.Threads(); slices.Contains(tids, p.pid()) || len(tids) < 4 {
				t.Errorf("Threads() = %v, want the 4 workers at least and not the zombie leader %d", tids, p.pid())
			}
			if err := tr.ResumeAll(); err != nil {
				t.Fatal(err)
			}
			p.stdin.Close()
			select {
			case <-tr.Exited():
			case <-time.After(hangGuard):
				t.Fatalf("exit not seen in %v\n%s", hangGuard, diagnose(tr))
			}
			if ws, ok := tr.ExitStatus(); !ok || ws.ExitStatus() != 7 {
				t.Errorf("ExitStatus = %v, %v; want exit code 7", ws, ok)
			}
			if err := tr.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if _, st := p.finish(t, hangGuard); st.ExitCode() != 7 {
				t.Fatalf("the parent's Wait got %v, want exit code 7", st)
			}
		})
	}
}

// checkExited checks that every call on tr fails with ErrExited.
func checkExited(t *testing.T, tr *Tracer, pid int) {
	t.Helper()
	select {
	case <-tr.Exited():
	default:
		t.Error("Exited() not closed")
	}
	if err := tr.StopAll(context.Background()); !errors.Is(err, ErrExited) {
		t.Errorf("StopAll: %v, want ErrExited", err)
	}
	if err := tr.ResumeAll(); !errors.Is(err, ErrExited) {
		t.Errorf("ResumeAll: %v, want ErrExited", err)
	}
	if _, err := tr.Regs(pid); !errors.Is(err, ErrExited) {
		t.Errorf("Regs: %v, want ErrExited", err)
	}
	if _, err := tr.ReadMemory(0x1000, make([]byte, 8)); !errors.Is(err, ErrExited) {
		t.Errorf("ReadMemory: %v, want ErrExited", err)
	}
	if err := tr.WriteMemory(0x1000, make([]byte, 8)); !errors.Is(err, ErrExited) {
		t.Errorf("WriteMemory: %v, want ErrExited", err)
	}
	if tids := tr.Threads(); len(tids) != 0 {
		t.Errorf("Threads() = %v after the exit", tids)
	}
}

// TestKilled kills the program with SIGKILL while it is stopped, and while
// a StopAll/ResumeAll loop runs: no call may hang, and they must end with
// ErrExited saying SIGKILL.
func TestKilled(t *testing.T) {
	t.Run("while-stopped", func(t *testing.T) {
		p := start(t, "threads")
		p.line(t)
		tr := seize(t, p.pid())
		if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
			t.Fatal(err)
		}
		tids := tr.Threads()
		if err := unix.Kill(p.pid(), unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var err error
		within(t, hangGuard+time.Minute, "calls after SIGKILL", func() {
			deadline := time.Now().Add(hangGuard)
			for time.Now().Before(deadline) {
				for _, tid := range tids {
					if _, err = tr.Regs(tid); errors.Is(err, ErrExited) {
						return
					}
				}
				if err = tr.ResumeAll(); errors.Is(err, ErrExited) {
					return
				}
				if err = tr.StopAll(ctxTimeout(t, hangGuard)); errors.Is(err, ErrExited) {
					return
				}
			}
		})
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "SIGKILL") {
			t.Fatalf("err = %v, want ErrExited by SIGKILL\n%s", err, diagnose(tr))
		}
		within(t, hangGuard, "calls after the exit", func() { checkExited(t, tr, p.pid()) })
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		_, st := p.finish(t, hangGuard)
		if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("the parent's Wait got %v, want killed by SIGKILL", st)
		}
	})
	t.Run("during-loop", func(t *testing.T) {
		p := start(t, "threads")
		p.line(t)
		tr := seize(t, p.pid())
		time.AfterFunc(300*time.Millisecond, func() { unix.Kill(p.pid(), unix.SIGKILL) })
		var err error
		within(t, hangGuard, "StopAll loop", func() {
			for err == nil {
				if err = tr.StopAll(ctxTimeout(t, hangGuard)); err == nil {
					err = tr.ResumeAll()
				}
			}
		})
		if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "SIGKILL") {
			t.Fatalf("err = %v, want ErrExited by SIGKILL\n%s", err, diagnose(tr))
		}
		tr.Close()
		p.finish(t, hangGuard)
	})
}

// TestDetach checks that Detach (stopped or running) leaves the program
// untraced and running: TracerPid 0 everywhere, and it finishes with the
// output of an untraced run. Signals pending at the detach are delivered.
func TestDetach(t *testing.T) {
	want := lastLine(runPlain(t, "threads"))
	for _, stopped := range []bool{true, false} {
		t.Run(fmt.Sprintf("stopped=%v", stopped), func(t *testing.T) {
			p := start(t, "threads")
			hdr := parseFields(t, p.line(t))
			countersAddr := hexField(t, hdr, "counters")
			tr := seize(t, p.pid())
			for i := 0; i < 20; i++ {
				if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
					t.Fatal(err)
				}
				if err := tr.ResumeAll(); err != nil {
					t.Fatal(err)
				}
			}
			if stopped {
				if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
					t.Fatal(err)
				}
			}
			c0 := sum(readCounters(t, tr, countersAddr, 8))
			if err := tr.Detach(); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			for tid, tp := range tracerPids(t, p.pid()) {
				if tp != 0 {
					t.Errorf("thread %d: TracerPid %d after Detach", tid, tp)
				}
			}
			// The Tracer is closed, but memory reads need no tracer.
			deadline := time.Now().Add(hangGuard)
			for sum(readCounters(t, tr, countersAddr, 8)) == c0 {
				if time.Now().After(deadline) {
					t.Fatalf("counters did not move in %v after Detach", hangGuard)
				}
				time.Sleep(time.Millisecond)
			}
			if err := tr.StopAll(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("StopAll after Detach: %v, want ErrClosed", err)
			}
			if err := tr.Close(); err != nil {
				t.Errorf("Close after Detach: %v", err)
			}
			got, st := p.finish(t, hangGuard)
			if !st.Success() || lastLine(got) != want {
				t.Fatalf("after Detach: %v, printed %q, want %q", st, lastLine(got), want)
			}
		})
	}
	t.Run("signals", func(t *testing.T) {
		wantLine := lastLine(runPlain(t, "signals", "1000"))
		p := start(t, "signals", "1000")
		p.line(t)
		tr := seize(t, p.pid())
		for i := 0; i < 50; i++ {
			if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
				t.Fatal(err)
			}
			if err := tr.ResumeAll(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
			t.Fatal(err)
		}
		if err := tr.Detach(); err != nil {
			t.Fatal(err)
		}
		got, st := p.finish(t, hangGuard)
		if !st.Success() || lastLine(got) != wantLine {
			t.Fatalf("after Detach: %v, printed %q, want %q", st, lastLine(got), wantLine)
		}
	})
}

// TestPrewarm: a Seize after Prewarm traces from the spare thread (not the
// main one), which leaves with it; the next Seize makes its own, and a
// Prewarm after that readies another spare.
func TestPrewarm(t *testing.T) {
	for round := 0; round < 2; round++ {
		Prewarm()
		deadline := time.Now().Add(hangGuard)
		for len(spare) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no spare thread %v after Prewarm", round, hangGuard)
			}
			time.Sleep(time.Millisecond)
		}
		want := int(spareTid.Load())
		if want == os.Getpid() || want == 0 {
			t.Fatalf("round %d: spare thread %d (leakpath's pid %d)", round, want, os.Getpid())
		}
		p := start(t, "threads")
		hdr := parseFields(t, p.line(t))
		magicAddr := hexField(t, hdr, "magic")
		tr := seize(t, p.pid())
		if tr.tracerTid != want {
			t.Errorf("round %d: traced from thread %d, want the spare %d", round, tr.tracerTid, want)
		}
		if len(spare) != 0 {
			t.Errorf("round %d: the spare is still there after Seize", round)
		}
		if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
			t.Fatal(err)
		}
		if got := readU64(t, tr, magicAddr); got != leakpathMagic {
			t.Fatalf("round %d: magic = %#x, want %#x", round, got, uint64(leakpathMagic))
		}
		tr.Close()
		// Without a spare, Seize starts a thread of its own.
		p2 := start(t, "threads")
		p2.line(t)
		tr2 := seize(t, p2.pid())
		if tr2.tracerTid == want {
			t.Errorf("round %d: a second Seize reused the spare's thread %d", round, want)
		}
		tr2.Close()
	}
}

// TestThreadCount: one thread in sleep, several in this Go process, an
// error for a process that is not there.
func TestThreadCount(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if n, err := ThreadCount(cmd.Process.Pid); err != nil || n != 1 {
		t.Errorf("ThreadCount(sleep) = %d, %v; want 1", n, err)
	}
	if n, err := ThreadCount(os.Getpid()); err != nil || n < 2 {
		t.Errorf("ThreadCount(self) = %d, %v; want at least 2", n, err)
	}
	if _, err := ThreadCount(1 << 30); err == nil {
		t.Error("ThreadCount of no process: no error")
	}
}
