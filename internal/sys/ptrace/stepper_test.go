package ptrace

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// peekU64 reads a word of process pid without tracing it.
func peekU64(t *testing.T, pid int, addr uint64) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := vmRead(pid, []unix.Iovec{iovec(b[:])}, []unix.RemoteIovec{{Base: uintptr(addr), Len: 8}}); err != nil {
		t.Fatalf("read %#x: %v", addr, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestStepper stops one thread of three, runs it to a hardware
// breakpoint and steps it, while another thread keeps running; the
// program then ends as it would untraced.
func TestStepper(t *testing.T) {
	if ok, why := HardwareBreakpoints(); !ok {
		t.Skip("hardware breakpoints do not fire here: " + why)
	}
	p := start(t, "stepme")
	f := parseFields(t, p.line(t))
	tid, err := strconv.Atoi(f["tid"])
	if err != nil {
		t.Fatal(err)
	}
	target, spins, calls := hexField(t, f, "target"), hexField(t, f, "spins"), hexField(t, f, "calls")
	s, err := SeizeThread(p.pid(), tid)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Detach()
	pid := p.pid()
	if err := s.SetBreakpoint(1, target); err != nil {
		t.Fatal(err)
	}
	// A breakpoint that never fires must not hang the test.
	watchdog := time.AfterFunc(hangGuard, s.Interrupt)
	defer watchdog.Stop()
	for i := 0; i < 100; i++ {
		st, err := s.Cont()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Breakpoint || st.Slot != 1 || st.Regs.Rip != target {
			t.Fatalf("Cont %d: %+v at %#x, want breakpoint 1 at target %#x", i, st, st.Regs.Rip, target)
		}
	}
	// The worker is stopped: its count stands still while the spinner's
	// runs on (waited for: a busy machine may not run it for a while).
	c0, s0 := peekU64(t, pid, calls), peekU64(t, pid, spins)
	for deadline := time.Now().Add(hangGuard); peekU64(t, pid, spins) == s0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the spinner did not run in %v", hangGuard)
		}
	}
	if c1 := peekU64(t, pid, calls); c1 != c0 {
		t.Errorf("while stepped: calls %d -> %d, want no change", c0, c1)
	}
	// Steps move through target and out of it.
	rip := target
	left := false
	for i := 0; i < 50 && !left; i++ {
		st, err := s.Step()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Step {
			t.Fatalf("Step %d: %+v, want a step", i, st)
		}
		if st.Regs.Rip == rip {
			t.Fatalf("Step %d did not move from %#x", i, rip)
		}
		rip = st.Regs.Rip
		left = rip < target || rip > target+64
	}
	if !left {
		t.Errorf("50 steps did not leave target")
	}
	if err := s.SetBreakpoint(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	c0 = peekU64(t, pid, calls)
	deadline := time.Now().Add(hangGuard)
	for peekU64(t, pid, calls) == c0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker did not run on after Detach")
		}
		time.Sleep(time.Millisecond)
	}
	out, st := p.finish(t, hangGuard)
	if !st.Success() || lastLine(out) != "done" {
		t.Fatalf("program ended %v, printed %q", st, out)
	}
}

// TestStepperInterrupt: Interrupt ends a Cont that would never stop.
func TestStepperInterrupt(t *testing.T) {
	p := start(t, "stepme")
	f := parseFields(t, p.line(t))
	tid, _ := strconv.Atoi(f["tid"])
	s, err := SeizeThread(p.pid(), tid)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, s.Interrupt)
	st, err := s.Cont()
	if err != nil || !st.Interrupted {
		t.Fatalf("Cont: %+v, %v; want interrupted", st, err)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	out, ps := p.finish(t, hangGuard)
	if !ps.Success() || lastLine(out) != "done" {
		t.Fatalf("program ended %v, printed %q", ps, out)
	}
}

// TestStepperInterruptedStep: an interrupt that overtakes a step leaves
// the step's trap queued; Detach must take it back, or the program dies
// of SIGTRAP once let go. Many rounds of steps, each ended by an
// interrupt at a random moment, then a detach: the program lives on and
// ends as it would untraced.
func TestStepperInterruptedStep(t *testing.T) {
	p := start(t, "stepme")
	f := parseFields(t, p.line(t))
	tid, _ := strconv.Atoi(f["tid"])
	rng := rand.New(rand.NewPCG(5, 6))
	interrupted := 0
	for round := 0; round < 150; round++ {
		s, err := SeizeThread(p.pid(), tid)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		timer := time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, s.Interrupt)
		s.Locked(func(l *LockedStepper) {
			for i := 0; i < 100000; i++ {
				st, err := l.Step()
				if err != nil {
					t.Fatalf("round %d step %d: %v", round, i, err)
				}
				if st.Interrupted {
					interrupted++
					return
				}
			}
		})
		timer.Stop()
		if err := s.Detach(); err != nil {
			t.Fatalf("round %d: detach: %v", round, err)
		}
	}
	out, st := p.finish(t, hangGuard)
	if !st.Success() || lastLine(out) != "done" {
		t.Fatalf("after %d interrupted rounds the program ended %v, printed %q", interrupted, st, out)
	}
	t.Logf("%d of 150 rounds ended by an interrupt", interrupted)
}

// TestStepperSoftBreakpoints: with an int3 at target, the stepped worker
// stops there at each Cont; the checker thread, which calls target too,
// stops at the int3 and is stepped over it whenever the worker stands
// still (rewound onto target's first instruction): none of its results
// is wrong, the code is as it was after, and the program ends as
// untraced.
func TestStepperSoftBreakpoints(t *testing.T) {
	p := start(t, "stepme")
	f := parseFields(t, p.line(t))
	tid, checker := tidField(t, f, "tid"), tidField(t, f, "tid2")
	target, pid := hexField(t, f, "target"), p.pid()
	before := peekU64(t, pid, target)
	s, err := SeizeThread(pid, tid)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Detach()
	watchdog := time.AfterFunc(hangGuard, s.Interrupt)
	defer watchdog.Stop()
	if err := s.Insert(target); err != nil {
		t.Fatal(err)
	}
	if got := peekU64(t, pid, target); got&0xff != 0xcc || got>>8 != before>>8 {
		t.Fatalf("code at target %#x with the breakpoint in, want %#x with an int3 first", got, before)
	}
	var code [8]byte
	binary.LittleEndian.PutUint64(code[:], peekU64(t, pid, target))
	if s.Original(target, code[:]); binary.LittleEndian.Uint64(code[:]) != before {
		t.Errorf("Original gave %x, want the code's own bytes %#x", code, before)
	}
	// Until the checker is held at the int3 (a ptrace-stop: 't').
	for i := 0; i < 100 || taskState(pid, checker) != 't'; i++ {
		st, err := s.Cont()
		if err != nil {
			t.Fatal(err)
		}
		if !st.Breakpoint || st.Slot != -1 || st.Regs.Rip != target {
			t.Fatalf("Cont %d: %+v at %#x, want the software breakpoint at target %#x", i, st, st.Regs.Rip, target)
		}
	}
	// A step from the breakpoint runs target's own first instruction.
	st, err := s.Step()
	if err != nil || !st.Step || st.Regs.Rip <= target+1 || st.Regs.Rip > target+15 {
		t.Fatalf("step from the breakpoint: %+v at %#x, %v; want past target's first instruction", st, st.Regs.Rip, err)
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	if s.Rewound() < 1 {
		t.Errorf("the checker was held at the breakpoint but never rewound")
	}
	t.Logf("the checker was stepped over the breakpoint %d times", s.Rewound())
	if after := peekU64(t, pid, target); after != before {
		t.Errorf("code at target %#x after Detach, want %#x", after, before)
	}
	out, ps := p.finish(t, hangGuard)
	if !ps.Success() || lastLine(out) != "done" || !strings.Contains(out, "wrong 0\n") {
		t.Fatalf("program ended %v, printed %q; want wrong 0 and done", ps, out)
	}
}

// TestStepperSoftBreakpointsFork: a thread that forks while an int3 is
// in the code stops at its fork, and its child, whose copy of the code
// has the int3 too, gets the original bytes back before it runs: no
// child dies of a SIGTRAP or computes a wrong result.
func TestStepperSoftBreakpointsFork(t *testing.T) {
	for _, how := range []string{"fork", "vfork"} {
		t.Run(how, func(t *testing.T) { softBreakpointsFork(t, how) })
	}
}

// softBreakpointsFork is TestStepperSoftBreakpointsFork with children
// made by how: a vfork child runs in its parent's memory, int3s and all,
// so every breakpoint goes before it may run.
func softBreakpointsFork(t *testing.T, how string) {
	p := start(t, "stepme", how)
	f := parseFields(t, p.line(t))
	tid, forker := tidField(t, f, "tid"), tidField(t, f, "tid3")
	target, pid := hexField(t, f, "target"), p.pid()
	for round, done := 0, 0; done < 5; round++ {
		s, err := SeizeThread(pid, tid)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Detach() // on a failure: a tracer left would keep the program from being reaped
		watchdog := time.AfterFunc(hangGuard, s.Interrupt)
		if err := s.Insert(target); errors.Is(err, ErrVforkChild) && round < 1000 {
			// Refused while a child runs in the program's memory:
			// the next round tries again.
			s.Detach()
			watchdog.Stop()
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		done++
		// Until the forker is stopped at a fork (a ptrace-stop: 't').
		for i := 0; taskState(pid, forker) != 't'; i++ {
			st, err := s.Cont()
			if err == nil && st.Signal != 0 {
				continue // a child's SIGCHLD, which the next Cont delivers
			}
			if err != nil || !st.Breakpoint || st.Regs.Rip != target {
				t.Fatalf("round %d, Cont %d: %+v, %v; want the breakpoint at target", round, i, st, err)
			}
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
		watchdog.Stop()
	}
	out, ps := p.finish(t, hangGuard)
	if !ps.Success() || lastLine(out) != "done" || !strings.Contains(out, "bad 0\n") || !strings.Contains(out, "wrong 0\n") {
		t.Fatalf("program ended %v, printed %q; want wrong 0, bad 0 and done", ps, out)
	}
}

// tidField returns the thread id a fixture printed as key.
func tidField(t *testing.T, m map[string]string, key string) int {
	t.Helper()
	tid, err := strconv.Atoi(m[key])
	if err != nil || tid <= 0 {
		t.Fatalf("field %q: %v (%v)", key, err, m)
	}
	return tid
}

// TestStepperSoftBreakpointsRace: each step of the checker over the
// int3 is interrupted at once (stepWait 0), so the interrupt's stop
// often overtakes the step's trap, which stays queued. That trap is
// ours: taken for the program's own SIGTRAP it would kill the program.
// Many served traps, a detach, and the program ends as untraced.
func TestStepperSoftBreakpointsRace(t *testing.T) {
	saved := stepWait
	stepWait = 0
	defer func() { stepWait = saved }()
	p := start(t, "stepme")
	f := parseFields(t, p.line(t))
	tid, pid := tidField(t, f, "tid"), p.pid()
	target := hexField(t, f, "target")
	for round := 0; round < 20; round++ {
		s, err := SeizeThread(pid, tid)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		watchdog := time.AfterFunc(hangGuard, s.Interrupt)
		err = s.Insert(target)
		for err == nil && s.Rewound() < 50 {
			_, err = s.Cont()
		}
		// Detached even on an error: a tracer left keeps the program
		// from being reaped.
		if derr := s.Detach(); err == nil {
			err = derr
		}
		watchdog.Stop()
		if err != nil {
			t.Errorf("round %d: %v", round, err)
			break // the program died, most likely: finish says of what
		}
	}
	out, ps := p.finish(t, hangGuard)
	if !ps.Success() || lastLine(out) != "done" || !strings.Contains(out, "wrong 0\n") {
		t.Fatalf("program ended %v, printed %q; want wrong 0 and done", ps, out)
	}
}
