package steptrace

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// fixture is the paths program running, its stdin, and what it printed.
type fixture struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	exe    string
	tid    int
	addr   map[string]uint64
	boring func(uint64) bool
}

func startPaths(t *testing.T) *fixture {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc): cannot build the fixture")
	}
	exe := filepath.Join(t.TempDir(), "paths")
	src, _ := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "steptrace", "paths.c"))
	if err := testfixture.Compile("cc", exe, "-O0", "-g", src); err != nil {
		t.Fatal(err)
	}
	f := &fixture{cmd: exec.Command(exe), exe: exe, addr: map[string]uint64{}}
	f.stdin, _ = f.cmd.StdinPipe()
	stdout, _ := f.cmd.StdoutPipe()
	f.out = bufio.NewReader(stdout)
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cmd.Process.Kill(); f.cmd.Wait() })
	line, err := f.out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	fs := strings.Fields(line)
	for i := 0; i+1 < len(fs); i += 2 {
		base := 16
		if fs[i] == "tid" {
			base = 10
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(fs[i+1], "0x"), base, 64)
		if err != nil {
			t.Fatalf("fixture said %q", line)
		}
		f.addr[fs[i]] = v
	}
	f.tid = int(f.addr["tid"])
	// Boring: every mapping but the executable's.
	maps, err := procmaps.Read(f.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ lo, hi uint64 }
	var own []span
	for _, m := range procmaps.Parse(maps) {
		if m.Path == exe {
			own = append(own, span{m.Lo, m.Hi})
		}
	}
	f.boring = func(a uint64) bool {
		for _, s := range own {
			if a >= s.lo && a < s.hi {
				return false
			}
		}
		return true
	}
	return f
}

// seize attaches to the fixture's main thread, detached at the test's
// end; a step that never stops is interrupted after testfixture's hang
// guard (no step of the fixture takes seconds, even on a loaded machine).
func (f *fixture) seize(t *testing.T) *ptrace.Stepper {
	t.Helper()
	s, err := ptrace.SeizeThread(f.cmd.Process.Pid, f.tid)
	if err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(testfixture.HangGuard, s.Interrupt)
	t.Cleanup(func() {
		watchdog.Stop()
		s.Detach()
	})
	return s
}

func (f *fixture) read(addr uint64, b []byte) (int, error) {
	return unix.ProcessVMReadv(f.cmd.Process.Pid, []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}, 0)
}

// name names an event's function by the fixture's addresses.
func (f *fixture) name(e Event) string {
	best, at := "", uint64(0)
	for n, a := range f.addr {
		if n != "tid" && a <= e.Addr && a > at && e.Addr-a < 0x80 {
			best, at = n, a
		}
	}
	if best == "" {
		if f.boring(e.Addr) {
			best = "lib"
		} else {
			best = "plt"
		}
	}
	switch e.Kind {
	case Enter:
		return "+" + best
	case Exit:
		return "-" + best
	}
	if e.Taken {
		return best + ":T"
	}
	return best + ":N"
}

// TestRecordPaths steps begin(7) and begin(3) from their entry to their
// return: the calls, the runs through the C library, and begin's first
// branch, which goes one way for 7 and the other for 3.
func TestRecordPaths(t *testing.T) { recordPaths(t, false) }

// TestRecordPathsSoft is TestRecordPaths on software breakpoints: the
// same calls and branches, and every int3 gone from the code after.
func TestRecordPathsSoft(t *testing.T) { recordPaths(t, true) }

// modeOptions are the options of a test's paths: on software
// breakpoints, or as this machine's debug registers allow.
func modeOptions(t *testing.T, f *fixture, soft bool) Options {
	if soft {
		return Options{Read: f.read, Boring: f.boring, Soft: true}
	}
	return Options{Read: f.read, Boring: f.boring, StepOnly: stepOnly(t)}
}

func recordPaths(t *testing.T, soft bool) {
	f := startPaths(t)
	s := f.seize(t)
	var code [64]byte
	if _, err := f.read(f.addr["begin"], code[:]); err != nil {
		t.Fatal(err)
	}
	var branch [2]bool
	for i, x := range []int{7, 3} {
		fmt.Fprintf(f.stdin, "%d\n", x)
		opts := modeOptions(t, f, soft)
		st, err := RunTo(s, f.addr["begin"], 0, opts)
		if err != nil || st.Regs.Rip != f.addr["begin"] {
			t.Fatalf("run to begin: %+v, %v", st, err)
		}
		p := Record(s, opts)
		if p.Err != nil || p.Outcome != EndReached {
			t.Fatalf("begin(%d): outcome %v, %v", x, p.Outcome, p.Err)
		}
		for _, e := range p.Events {
			if n := f.name(e); n == "begin:T" || n == "begin:N" {
				branch[i] = e.Taken
				break
			}
		}
		ab := "a"
		if x <= 5 {
			ab = "b"
		}
		// drop's tail call into the C library is run through as a
		// call (its stub, or on software breakpoints the library's
		// free the stub leads to) and is drop's return.
		want := fmt.Sprintf("[+%s -%s +c -c +plt -plt +plt -plt +plt -plt +drop +plt -plt -drop -begin]", ab, ab)
		if got := f.calls(p.Events); got != want {
			t.Errorf("begin(%d): calls %s, want %s (events %v)", x, got, want, p.Events)
		}
		t.Logf("begin(%d): %d events in %d stops", x, len(p.Events), p.Stops)
	}
	if branch[0] == branch[1] {
		t.Errorf("begin's first branch went the same way for 7 and 3 (taken %v)", branch[0])
	}
	if soft && s.Breakpoints() == 0 {
		t.Error("no software breakpoint was used")
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	var after [64]byte
	if _, err := f.read(f.addr["begin"], after[:]); err != nil || after != code {
		t.Errorf("begin's code after the detach: %x (%v), want %x", after, err, code)
	}
	f.stdin.Close()
	rest, _ := io.ReadAll(f.out)
	if string(rest) != "sum 9\n" { // a 1 + c(3) 3, then b 2 + c(3) 3
		t.Errorf("the program printed %q after the tracing, want %q", rest, "sum 9\n")
	}
}

// TestRecordFreed: a path ends as soon as Freed says so; a budget ends it
// too.
func TestRecordFreed(t *testing.T) {
	f := startPaths(t)
	s := f.seize(t)
	for _, c := range []struct {
		opts Options
		want Outcome
	}{
		{Options{Freed: func() bool { return true }}, Freed},
		{Options{MaxStops: 3}, Budget},
	} {
		fmt.Fprintf(f.stdin, "1\n")
		c.opts.Read, c.opts.Boring, c.opts.StepOnly = f.read, f.boring, stepOnly(t)
		if st, err := RunTo(s, f.addr["begin"], 0, Options{StepOnly: c.opts.StepOnly}); err != nil || st.Regs.Rip != f.addr["begin"] {
			t.Fatalf("run to begin: %+v, %v", st, err)
		}
		if p := Record(s, c.opts); p.Outcome != c.want || p.Err != nil {
			t.Errorf("outcome %v (%v), want %v", p.Outcome, p.Err, c.want)
		}
	}
}

// stepOnly says whether hardware breakpoints fail here: then paths are
// recorded a step at a time, and the test says so.
func stepOnly(t *testing.T) bool {
	ok, why := ptrace.HardwareBreakpoints()
	if !ok {
		t.Logf("stepping every instruction: %s", why)
	}
	return !ok
}

// TestStepOutOfSyscall: a step of a thread stopped in a system call (here
// read, waiting for input) is a step: the kernel reports it as a
// breakpoint trap, which must not be handed to the program as its own
// SIGTRAP (that killed it). The program then ends as it would untraced.
func TestStepOutOfSyscall(t *testing.T) {
	f := startPaths(t)
	s := f.seize(t)
	fmt.Fprintf(f.stdin, "3\n")
	for i := 0; i < 20; i++ {
		st, err := s.Step()
		if err != nil || !st.Step || st.Signal != 0 {
			t.Fatalf("step %d: %+v, %v; want a step", i, st, err)
		}
	}
	if err := s.Detach(); err != nil {
		t.Fatal(err)
	}
	f.stdin.Close()
	line, err := f.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "sum ") {
		t.Errorf("after the steps the program said %q (%v), want its sum", line, err)
	}
	if err := f.cmd.Wait(); err != nil {
		t.Errorf("the program ended with %v", err)
	}
}

// TestRecordStopAt: a path that starts after begin's allocation and would
// end only far up the stack ends instead when the thread is back at that
// allocation, in the loop's next iteration (Next), having entered begin
// again.
func TestRecordStopAt(t *testing.T) { recordStopAt(t, false) }

// TestRecordStopAtSoft is TestRecordStopAt on software breakpoints.
func TestRecordStopAtSoft(t *testing.T) { recordStopAt(t, true) }

func recordStopAt(t *testing.T, soft bool) {
	f := startPaths(t)
	// The return address of begin's call to malloc, its fourth call.
	var code [256]byte
	if n, err := f.read(f.addr["begin"], code[:]); err != nil || n < len(code) {
		t.Fatalf("read begin's code: %d, %v", n, err)
	}
	var ret uint64
	for off, calls := 0, 0; off < len(code) && ret == 0; {
		inst, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			t.Fatalf("decode begin+%#x: %v", off, err)
		}
		off += inst.Len
		if inst.Op == x86asm.CALL {
			if calls++; calls == 4 {
				ret = f.addr["begin"] + uint64(off)
			}
		}
	}
	if ret == 0 {
		t.Fatal("no fourth call in begin")
	}
	s := f.seize(t)
	fmt.Fprintf(f.stdin, "7\n3\n")
	opts := modeOptions(t, f, soft)
	opts.EndDepth, opts.StopAt = 5, ret
	if st, err := RunTo(s, ret, 0, opts); err != nil || st.Regs.Rip != ret {
		t.Fatalf("run to begin's allocation: %+v, %v", st, err)
	}
	p := Record(s, opts)
	if p.Err != nil || p.Outcome != Next {
		t.Fatalf("outcome %v (%v), want next; events %v", p.Outcome, p.Err, p.Events)
	}
	want := "[+plt -plt +plt -plt +drop +plt -plt -drop -begin +plt -plt +begin +b -b +c -c +plt -plt]"
	if got := f.calls(p.Events); got != want {
		t.Errorf("calls %s, want %s", got, want)
	}
}

// calls names the calls and returns of a path, in order. A run through
// the C library shows as plt: on software breakpoints the decoding follows
// a stub's jump, and the call is the library's function.
func (f *fixture) calls(evs []Event) string {
	var calls []string
	for _, e := range evs {
		if e.Kind != Branch {
			calls = append(calls, f.name(e))
		}
	}
	return strings.NewReplacer("+lib", "+plt", "-lib", "-plt").Replace(fmt.Sprint(calls))
}

// TestCondTaken: the conditions of the jumps decided from the flags, on
// flags from compares whose outcome is known (cmp a, b sets them as a-b).
func TestCondTaken(t *testing.T) {
	const cf, zf, sf, of = 1, 1 << 6, 1 << 7, 1 << 11
	for _, c := range []struct {
		what  string
		flags uint64
		taken []x86asm.Op
	}{
		{"1 cmp 1", zf, []x86asm.Op{x86asm.JE, x86asm.JBE, x86asm.JGE, x86asm.JLE, x86asm.JAE, x86asm.JNS, x86asm.JNO}},
		{"1 cmp 2", cf | sf, []x86asm.Op{x86asm.JNE, x86asm.JB, x86asm.JBE, x86asm.JL, x86asm.JLE, x86asm.JS, x86asm.JNO}},
		{"2 cmp 1", 0, []x86asm.Op{x86asm.JNE, x86asm.JA, x86asm.JAE, x86asm.JG, x86asm.JGE, x86asm.JNS, x86asm.JNO}},
		{"-1 cmp 1", sf, []x86asm.Op{x86asm.JNE, x86asm.JA, x86asm.JAE, x86asm.JL, x86asm.JLE, x86asm.JS, x86asm.JNO}},
		{"min cmp 1", of, []x86asm.Op{x86asm.JNE, x86asm.JA, x86asm.JAE, x86asm.JL, x86asm.JLE, x86asm.JNS, x86asm.JO}},
	} {
		for _, op := range []x86asm.Op{x86asm.JE, x86asm.JNE, x86asm.JB, x86asm.JAE, x86asm.JBE, x86asm.JA,
			x86asm.JL, x86asm.JGE, x86asm.JLE, x86asm.JG, x86asm.JS, x86asm.JNS, x86asm.JO, x86asm.JNO} {
			got, ok := condTaken(op, c.flags)
			if want := slices.Contains(c.taken, op); !ok || got != want {
				t.Errorf("%s: %v taken %v (%v), want %v", c.what, op, got, ok, want)
			}
		}
	}
	if _, ok := condTaken(x86asm.JRCXZ, 0); ok {
		t.Error("jrcxz decided from the flags: it tests rcx")
	}
}
