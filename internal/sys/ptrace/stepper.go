package ptrace

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stepper controls one thread of a process, stepping it while the other
// threads run untraced (root-cause tracing): it stops the thread, runs it
// an instruction at a time or up to a hardware breakpoint (x86-64 debug
// registers are per thread, so no other thread ever meets them), and lets
// it go. All its ptrace requests run on one goroutine locked to its OS
// thread; its methods hand them over and wait, one at a time.
//
// A wait of another thread of this process for the process's leader (the
// collector reaping its child) can consume the leader's stops; the
// Stepper polls rather than blocks, and takes such stops back through
// Stolen.
type Stepper struct {
	pid, tid int
	reqs     chan func()
	quit     chan struct{} // closed by Detach
	done     chan struct{} // closed when the goroutine has returned
	// Owned by the locked goroutine.
	sig int    // a signal to deliver on the next resume
	dr7 uint64 // the debug control register as set
	// stepping: the last resume was a single step.
	stepping bool
	gone     bool
	// Software breakpoints (soft.go): soft, those in the code, by
	// address, with the byte each replaced; orig, every one ever
	// inserted; others, the process's other threads, traced while any
	// is in; mem, /proc/TID/mem.
	soft   map[uint64]byte
	orig   map[uint64]byte
	others map[int]*other
	mem    *os.File
	// selfInt: an interrupt of ours is on its way (othersWaiting);
	// detaching: Detach has begun (no more of them).
	selfInt, detaching bool
	once               sync.Once
	// interrupt asks a waiting Cont to stop the thread (Interrupt).
	interrupt atomic.Bool
	rewound   atomic.Int32 // see Rewound
}

// Stop is why a stepped thread stopped.
type Stop struct {
	Regs unix.PtraceRegs
	// Step: a single step completed; Breakpoint: debug register slot
	// Slot was hit (at Regs.Rip), or with Slot -1 a software breakpoint
	// (Regs.Rip is its address: the thread stands on it).
	Step, Breakpoint bool
	Slot             int
	// Signal: the thread stopped for a signal of its own (delivered on
	// the next resume).
	Signal int
	// Interrupted: Interrupt stopped it.
	Interrupted bool
	// event: a PTRACE_EVENT_* stop (a clone or fork, handled within).
	event int
}

// ErrThreadGone means the stepped thread (or its process) ended.
var ErrThreadGone = errors.New("thread ended")

// Debug registers in struct user (x86-64 <sys/user.h>): u_debugreg[8]
// starts at byte 848.
const (
	offDebugReg = 848
	dr6Hits     = 0xf // B0-B3: which breakpoint fired
	trapBrkpt   = 1   // si_code TRAP_BRKPT
	trapTrace   = 2   // si_code of a single step (TRAP_TRACE)
	trapHWBkpt  = 4   // si_code of a hardware breakpoint (TRAP_HWBKPT)
	flagRF      = 1 << 16
)

// SeizeThread attaches to thread tid of process pid and stops it. The
// other threads of the process are not touched.
func SeizeThread(pid, tid int) (*Stepper, error) {
	s := &Stepper{pid: pid, tid: tid, reqs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	registerStepper(tid, true)
	started := make(chan error, 1)
	go s.run(started)
	if err := <-started; err != nil {
		<-s.done
		registerStepper(tid, false)
		return nil, err
	}
	return s, nil
}

func (s *Stepper) run(started chan<- error) {
	defer close(s.done)
	runtime.LockOSThread()
	// Never unlocked: a thread that was a tracer is not handed back to
	// the Go scheduler (it exits with the goroutine).
	if err := ptraceReq(unix.PTRACE_SEIZE, s.tid, 0, 0); err != nil {
		started <- s.err("seize", err)
		return
	}
	if err := ptraceInterrupt(s.tid); err != nil {
		ptraceDetach(s.tid, 0)
		started <- s.err("interrupt", err)
		return
	}
	if _, err := s.wait(); err != nil {
		started <- err
		return
	}
	started <- nil
	for {
		select {
		case f := <-s.reqs:
			f()
		case <-s.quit:
			return
		}
	}
}

func (s *Stepper) err(op string, err error) error {
	if errors.Is(err, unix.ESRCH) {
		err = ErrThreadGone
	}
	return &Error{Op: op, Pid: s.pid, Tid: s.tid, Err: err}
}

// do runs f on the locked goroutine.
func (s *Stepper) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case s.reqs <- func() { errc <- f() }:
		return <-errc
	case <-s.done:
		return s.err("request", ErrClosed)
	}
}

// Tid returns the stepped thread.
func (s *Stepper) Tid() int { return s.tid }

// Regs returns the stopped thread's registers.
func (s *Stepper) Regs() (r unix.PtraceRegs, err error) {
	err = s.do(func() error {
		r, err = s.regs()
		return err
	})
	return r, err
}

func (s *Stepper) regs() (r unix.PtraceRegs, err error) {
	if e := unix.PtraceGetRegs(s.tid, &r); e != nil {
		return r, s.err("regs", e)
	}
	return r, nil
}

// Locked runs f on the Stepper's own OS thread with a view of it whose
// methods make their requests directly: a stepping loop then pays no
// hand-over between threads per stop. f must not use the Stepper itself.
func (s *Stepper) Locked(f func(t *LockedStepper)) error {
	return s.do(func() error {
		f(&LockedStepper{s})
		return nil
	})
}

// LockedStepper is a Stepper seen from its own OS thread (Locked).
type LockedStepper struct{ s *Stepper }

// Regs is Stepper.Regs.
func (l *LockedStepper) Regs() (unix.PtraceRegs, error) { return l.s.regs() }

// SetRegs is Stepper.SetRegs.
func (l *LockedStepper) SetRegs(r unix.PtraceRegs) error { return l.s.setRegs(r) }

// SetBreakpoint is Stepper.SetBreakpoint.
func (l *LockedStepper) SetBreakpoint(slot int, addr uint64) error {
	return l.s.setBreakpoint(slot, addr)
}

// Step is Stepper.Step.
func (l *LockedStepper) Step() (Stop, error) { return l.s.resumeLocked(unix.PTRACE_SINGLESTEP) }

// Cont is Stepper.Cont.
func (l *LockedStepper) Cont() (Stop, error) { return l.s.resumeLocked(unix.PTRACE_CONT) }

// Deliver is Cont from a signal stop, without the resume flag: the
// pending signal's handler runs, and a breakpoint on the instruction the
// signal interrupted fires when the handler returns to it.
func (l *LockedStepper) Deliver() (Stop, error) { return l.s.resume1(unix.PTRACE_CONT, false) }

// SetBreakpoint arms hardware breakpoint slot (0-3) on execution of addr;
// addr 0 disarms it.
func (s *Stepper) SetBreakpoint(slot int, addr uint64) error {
	if slot < 0 || slot > 3 {
		return fmt.Errorf("ptrace: breakpoint slot %d: want 0 to 3", slot)
	}
	return s.do(func() error { return s.setBreakpoint(slot, addr) })
}

func (s *Stepper) setBreakpoint(slot int, addr uint64) error {
	if slot < 0 || slot > 3 {
		return fmt.Errorf("ptrace: breakpoint slot %d: want 0 to 3", slot)
	}
	{
		enable := uint64(1) << (2 * slot) // L<slot>; R/W and LEN 0: execution
		dr7 := s.dr7 &^ (enable | 0xf<<(16+4*slot))
		if addr != 0 {
			if err := ptraceReq(unix.PTRACE_POKEUSR, s.tid, offDebugReg+8*uintptr(slot), uintptr(addr)); err != nil {
				return s.err("set breakpoint", err)
			}
			dr7 |= enable
		}
		if dr7 != s.dr7 {
			if err := ptraceReq(unix.PTRACE_POKEUSR, s.tid, offDebugReg+8*7, uintptr(dr7)); err != nil {
				return s.err("set breakpoint", err)
			}
			s.dr7 = dr7
		}
		return nil
	}
}

// SetRegs sets the stopped thread's registers.
func (s *Stepper) SetRegs(r unix.PtraceRegs) error {
	return s.do(func() error { return s.setRegs(r) })
}

func (s *Stepper) setRegs(r unix.PtraceRegs) error {
	if err := unix.PtraceSetRegs(s.tid, &r); err != nil {
		return s.err("setregs", err)
	}
	return nil
}

// Step runs one instruction.
func (s *Stepper) Step() (Stop, error) { return s.resume(unix.PTRACE_SINGLESTEP) }

// Cont runs the thread until a breakpoint, a signal or its end.
func (s *Stepper) Cont() (Stop, error) { return s.resume(unix.PTRACE_CONT) }

// Deliver is LockedStepper.Deliver.
func (s *Stepper) Deliver() (st Stop, err error) {
	err = s.do(func() error {
		st, err = s.resume1(unix.PTRACE_CONT, false)
		return err
	})
	return st, err
}

func (s *Stepper) resume(req int) (st Stop, err error) {
	err = s.do(func() error {
		st, err = s.resumeLocked(req)
		return err
	})
	return st, err
}

func (s *Stepper) resumeLocked(req int) (st Stop, err error) { return s.resume1(req, true) }

// resume1 resumes the thread; with rf, an armed breakpoint on the
// instruction it stands on does not fire at once.
func (s *Stepper) resume1(req int, rf bool) (st Stop, err error) {
	err = func() error {
		if s.gone {
			return s.err("resume", ErrThreadGone)
		}
		var r unix.PtraceRegs
		if e := unix.PtraceGetRegs(s.tid, &r); e != nil {
			return s.err("resume", e)
		}
		// Resume flag: the instruction at Rip does not trip a breakpoint
		// on it again. Without it (Deliver), it is cleared: it would go
		// into a signal's frame and skip the breakpoint on the return.
		if want := rf && s.dr7 != 0; (r.Eflags&flagRF != 0) != want {
			r.Eflags &^= flagRF
			if want {
				r.Eflags |= flagRF
			}
			if e := unix.PtraceSetRegs(s.tid, &r); e != nil {
				return s.err("resume", e)
			}
		}
		if s.interrupt.Swap(false) {
			st.Interrupted = true
			st.Regs = r
			return nil
		}
		sig := s.sig
		s.sig = 0
		s.serveOthers()
		if _, on := s.soft[r.Rip]; on && sig == 0 {
			// Standing on a software breakpoint: run its instruction
			// first (with a signal to deliver, the handler runs first
			// and comes back to it).
			st, err = s.stepOver(r.Rip)
			if err != nil || req == unix.PTRACE_SINGLESTEP || !st.Step {
				return err
			}
		}
		st, err = s.issue(req, sig)
		return err
	}()
	return st, err
}

// issue resumes the thread with req and waits for its next stop; the
// stops of its clones and forks are handled on the way.
func (s *Stepper) issue(req, sig int) (st Stop, err error) {
	for {
		s.stepping = req == unix.PTRACE_SINGLESTEP
		if e := ptraceReq(req, s.tid, 0, uintptr(sig)); e != nil {
			return st, s.err("resume", e)
		}
		st, err = s.wait()
		if st.Interrupted {
			s.interrupt.Store(false)
		}
		if err == nil && st.Interrupted && s.selfInt && !s.interrupt.Load() {
			// Our own interrupt (othersWaiting): the held threads go
			// on while this one stands still, then it resumes.
			s.selfInt = false
			s.serveOthers()
			sig = 0
			continue
		}
		if st.Interrupted {
			s.selfInt = false
		}
		if err != nil || st.event == 0 {
			return st, err
		}
		if err := s.onEvent(st.event); err != nil {
			return st, err
		}
		sig = 0
	}
}

// wait waits for the thread's next stop and says what it was.
func (s *Stepper) wait() (Stop, error) {
	var st Stop
	si, err := s.waitStop()
	if err != nil {
		return st, err
	}
	ws := waitStatus(si)
	if ws.Exited() || ws.Signaled() {
		s.gone = true
		return st, s.err("wait", ErrThreadGone)
	}
	if e := unix.PtraceGetRegs(s.tid, &st.Regs); e != nil {
		return st, s.err("wait", e)
	}
	sig := int(ws.StopSignal())
	switch ev := ws.TrapCause(); {
	case ev == unix.PTRACE_EVENT_STOP:
		// An interrupt or a group-stop: nothing to deliver.
		st.Interrupted = true
	case ev > 0:
		st.event = ev
	case sig == int(unix.SIGTRAP):
		info, e := ptraceGetSiginfo(s.tid)
		if e != nil {
			return st, s.err("wait", e)
		}
		switch {
		case info.Code == siKernel && s.isSoft(st.Regs.Rip-1):
			// Our int3: the thread is put back on its instruction.
			st.Regs.Rip--
			if e := unix.PtraceSetRegs(s.tid, &st.Regs); e != nil {
				return st, s.err("wait", e)
			}
			st.Breakpoint, st.Slot = true, -1
		case info.Code == trapTrace, info.Code == trapBrkpt && s.stepping:
			// A step out of a system call is reported as a breakpoint
			// (x86's user_single_step_report).
			st.Step = true
		case info.Code == trapHWBkpt:
			dr6, e := s.peekUser(offDebugReg + 8*6)
			if e != nil {
				return st, s.err("wait", e)
			}
			for slot := 0; slot < 4; slot++ {
				if dr6&(1<<slot) != 0 && s.dr7&(1<<(2*slot)) != 0 {
					st.Breakpoint, st.Slot = true, slot
					break
				}
			}
			if !st.Breakpoint {
				st.Step = dr6&(1<<14) != 0 // BS: a single step
			}
			s.pokeUser(offDebugReg+8*6, 0)
		default:
			st.Signal, s.sig = sig, sig // the program's own SIGTRAP
		}
	default:
		st.Signal, s.sig = sig, sig
	}
	return st, nil
}

func (s *Stepper) peekUser(off uintptr) (uint64, error) {
	var v uint64
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, uintptr(s.tid), off, uintptr(unsafe.Pointer(&v)), 0, 0)
	if e != 0 {
		return 0, e
	}
	return v, nil
}

func (s *Stepper) pokeUser(off uintptr, v uint64) error {
	return ptraceReq(unix.PTRACE_POKEUSR, s.tid, off, uintptr(v))
}

// waitStop polls for the thread's next state change: a short spin (most
// steps take microseconds), then sleeps that grow to a millisecond. A stop
// another waiter of this process consumed is taken from Stolen.
func (s *Stepper) waitStop() (childInfo, error) {
	interrupted := false
	for i := 0; ; i++ {
		if !interrupted && s.interrupt.Load() {
			interrupted = true
			if err := ptraceInterrupt(s.tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return childInfo{}, s.err("interrupt", err)
			}
		}
		si, err := waitid(s.tid, unix.WEXITED|unix.WSTOPPED|unix.WNOHANG|unix.WALL)
		if err != nil {
			if errors.Is(err, unix.ECHILD) {
				s.gone = true
				return si, s.err("wait", ErrThreadGone)
			}
			return si, s.err("wait", err)
		}
		if si.Pid != 0 {
			return si, nil
		}
		if ws, ok := takeStolen(s.tid); ok {
			return statusInfo(s.tid, ws), nil
		}
		if i > 300 {
			s.othersWaiting()
			time.Sleep(min(time.Duration(i-300)*10*time.Microsecond, time.Millisecond))
		}
	}
}

// Interrupt stops the thread if a Cont or Step is waiting for it (that
// call returns a Stop with Interrupted set); else the next one returns at
// once, interrupted. It may be called from any goroutine.
func (s *Stepper) Interrupt() { s.interrupt.Store(true) }

// Detach disarms the breakpoints and lets the thread go, delivering a
// signal it stopped for.
func (s *Stepper) Detach() error {
	err := s.do(func() error {
		// Every int3 out of the code before any thread goes, even if
		// the stepped thread has ended (its mem file still reaches
		// the others' memory); the stepped thread first (the program
		// may be waiting for it), then the others.
		s.detaching = true
		s.removeAll()
		defer func() {
			s.releaseOthers()
			if s.mem != nil {
				s.mem.Close()
				s.mem = nil
			}
		}()
		if s.gone {
			return nil
		}
		if s.dr7 != 0 {
			s.pokeUser(offDebugReg+8*7, 0)
			s.dr7 = 0
		}
		if s.sig == 0 {
			s.dropStrayTraps()
		}
		if e := ptraceDetach(s.tid, s.sig); e != nil && !errors.Is(e, unix.ESRCH) {
			return s.err("detach", e)
		}
		return nil
	})
	s.close()
	return err
}

// dropStrayTraps takes back the trap of a step or breakpoint that an
// interrupt overtook: it waits, queued, for the next resume, and
// delivered after the detach it would kill the program. A signal of the
// program's met on the way is kept for the detach.
func (s *Stepper) dropStrayTraps() {
	sig, _ := s.takeQueuedTraps(s.tid, true, func() (childInfo, bool) {
		si, err := s.waitStop()
		if err != nil {
			return si, false
		}
		if ws := waitStatus(si); ws.Exited() || ws.Signaled() {
			s.gone = true
			return si, false
		}
		return si, true
	})
	s.sig = sig
}

// Caught reports whether process pid has a handler for signal sig (its
// SigCgt mask); when it cannot tell, it has.
func Caught(pid, sig int) bool {
	mask, ok := signalMask(pid, 0, "SigCgt")
	return !ok || sig < 1 || sig > 64 || mask&(1<<(sig-1)) != 0
}

// signalMask reads the signal mask field ("SigPnd", "SigCgt"...) of the
// status of thread tid of pid (of the process when tid is 0; ProcStatus).
func signalMask(pid, tid int, field string) (uint64, bool) {
	st, err := ProcStatus(pid, tid)
	if err != nil {
		return 0, false
	}
	v, ok := st[field]
	if !ok {
		return 0, false
	}
	mask, err := strconv.ParseUint(v, 16, 64)
	return mask, err == nil
}

func (s *Stepper) close() {
	s.once.Do(func() {
		close(s.quit)
		<-s.done
		registerStepper(s.tid, false)
	})
}

// stolen holds the stops that waits for the process (not the Stepper's)
// consumed, for the Steppers of those threads.
var stolen struct {
	sync.Mutex
	active map[int]bool // threads a Stepper has
	stops  map[int][]unix.WaitStatus
}

func registerStepper(tid int, on bool) {
	stolen.Lock()
	defer stolen.Unlock()
	if stolen.active == nil {
		stolen.active, stolen.stops = map[int]bool{}, map[int][]unix.WaitStatus{}
	}
	if on {
		stolen.active[tid] = true
	} else {
		delete(stolen.active, tid)
		delete(stolen.stops, tid)
	}
}

// Stolen hands a stop of thread tid that a wait elsewhere in this process
// consumed to the Stepper of that thread. It reports whether a Stepper
// has the thread (else the stop is not its).
func Stolen(tid int, ws unix.WaitStatus) bool {
	stolen.Lock()
	defer stolen.Unlock()
	if !stolen.active[tid] {
		return false
	}
	stolen.stops[tid] = append(stolen.stops[tid], ws)
	return true
}

func takeStolen(tid int) (unix.WaitStatus, bool) {
	stolen.Lock()
	defer stolen.Unlock()
	q := stolen.stops[tid]
	if len(q) == 0 {
		return 0, false
	}
	stolen.stops[tid] = q[1:]
	return q[0], true
}

// statusInfo is the siginfo a waitid would have given for status ws.
func statusInfo(tid int, ws unix.WaitStatus) childInfo {
	si := childInfo{Pid: int32(tid)}
	switch {
	case ws.Stopped():
		si.Code, si.Status = cldTrapped, int32(ws>>8)
	case ws.Exited():
		si.Code, si.Status = cldExited, int32(ws.ExitStatus())
	case ws.Signaled():
		si.Code, si.Status = cldKilled, int32(ws.Signal())
	}
	return si
}
