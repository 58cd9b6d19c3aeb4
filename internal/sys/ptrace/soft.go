package ptrace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Software breakpoints: an int3 (0xcc) written over the first byte of an
// instruction, for machines whose debug registers do not fire. The code
// is shared by every thread of the process, so the first one inserted
// seizes the process's other threads too (from the Stepper's own OS
// thread, without stopping them): one that meets a breakpoint then stops
// in the kernel instead of dying of the SIGTRAP. Whenever the stepped
// thread stands still (before each resume, or interrupted when it runs
// long while another waits), the threads stopped at a breakpoint are
// stepped over it (put back onto the instruction, original byte back,
// one step, int3 again) and let go: the stepped thread cannot pass the
// byte meanwhile. No int3 goes in while a vfork child made before runs in
// the process's memory. A stop that cannot be served so (a vfork, a group-stop)
// is held until Detach has written every original byte back. The
// stepped thread itself is stepped over a breakpoint it stands on
// whenever it resumes. Forks made meanwhile are seized too: a child's
// copy of the code gets its original bytes back before it runs.

// otherOptions are the options the other threads are seized with: their
// new threads and children are traced, so none runs into an int3 untraced.
const otherOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK

// siKernel is the si_code of the SIGTRAP an int3 raises.
const siKernel = 0x80

// stepWait is how long a step of another thread over a breakpoint may
// take before it is interrupted (its instruction may block in a system
// call); tests set it to 0 to make the interrupt race the step's trap.
var stepWait = 100 * time.Millisecond

// errVfork ends stepping: a child made with vfork shares the code, so
// the breakpoints had to go.
var errVfork = errors.New("the thread made a vfork child: breakpoints removed")

// Insert writes a software breakpoint at addr (idempotent).
func (l *LockedStepper) Insert(addr uint64) error { return l.s.insert(addr) }

// Remove writes addr's original byte back.
func (l *LockedStepper) Remove(addr uint64) error { return l.s.remove(addr) }

// Original overwrites the bytes of b, read from addr, that are
// breakpoints with the code's own bytes.
func (l *LockedStepper) Original(addr uint64, b []byte) { l.s.original(addr, b) }

// Insert is LockedStepper.Insert.
func (s *Stepper) Insert(addr uint64) error { return s.do(func() error { return s.insert(addr) }) }

// Remove is LockedStepper.Remove.
func (s *Stepper) Remove(addr uint64) error { return s.do(func() error { return s.remove(addr) }) }

// Original is LockedStepper.Original.
func (s *Stepper) Original(addr uint64, b []byte) {
	s.do(func() error {
		s.original(addr, b)
		return nil
	})
}

// Rewound returns how many times another thread that trapped on a
// software breakpoint was put back onto its instruction and let go.
func (s *Stepper) Rewound() int { return int(s.rewound.Load()) }

// Breakpoints returns how many software breakpoints are in the code now.
func (s *Stepper) Breakpoints() (n int) {
	s.do(func() error {
		n = len(s.soft)
		return nil
	})
	return n
}

func (s *Stepper) insert(addr uint64) error {
	if _, ok := s.soft[addr]; ok {
		return nil
	}
	if s.gone {
		return s.err("insert breakpoint", ErrThreadGone)
	}
	if s.soft == nil {
		if err := s.seizeOthers(); err != nil {
			return err
		}
		s.soft = map[uint64]byte{}
	}
	var b [1]byte
	if _, err := s.memAt(false, addr, b[:]); err != nil {
		return s.err("insert breakpoint", err)
	}
	if b[0] == 0xcc {
		// The program's own int3: a breakpoint there would be taken
		// for it.
		return s.err("insert breakpoint", fmt.Errorf("an int3 is already at %#x", addr))
	}
	if _, err := s.memAt(true, addr, []byte{0xcc}); err != nil {
		return s.err("insert breakpoint", err)
	}
	s.soft[addr] = b[0]
	s.orig[addr] = b[0]
	return nil
}

func (s *Stepper) remove(addr uint64) error {
	orig, ok := s.soft[addr]
	if !ok {
		return nil
	}
	delete(s.soft, addr)
	if _, err := s.memAt(true, addr, []byte{orig}); err != nil {
		return s.err("remove breakpoint", err)
	}
	return nil
}

func (s *Stepper) original(addr uint64, b []byte) {
	for a, orig := range s.soft {
		if a >= addr && a-addr < uint64(len(b)) {
			b[a-addr] = orig
		}
	}
}

// memAt reads or writes the process's memory through /proc/TID/mem,
// which writes read-only code too.
func (s *Stepper) memAt(write bool, addr uint64, b []byte) (int, error) {
	if s.mem == nil {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/task/%d/mem", s.pid, s.tid), os.O_RDWR, 0)
		if err != nil {
			return 0, err
		}
		s.mem = f
	}
	if int64(addr) < 0 {
		return 0, unix.EIO
	}
	if write {
		return s.mem.WriteAt(b, int64(addr))
	}
	return s.mem.ReadAt(b, int64(addr))
}

// seizeOthers traces the process's other threads, without stopping
// them, until a listing of its threads shows none new; the stepped
// thread's own new threads and children are traced from now on too.
func (s *Stepper) seizeOthers() error {
	if err := ptraceReq(unix.PTRACE_SETOPTIONS, s.tid, 0, otherOptions); err != nil {
		return s.err("seize the other threads", err)
	}
	if s.others == nil {
		s.others, s.orig = map[int]*other{}, map[uint64]byte{}
	}
	for round := 0; ; round++ {
		if round == 100 {
			return s.err("seize the other threads", errors.New("the thread list never settled"))
		}
		tids, err := listTasks(s.pid)
		if err != nil {
			return s.err("seize the other threads", err)
		}
		added := 0
		for _, tid := range tids {
			if tid == s.tid || s.others[tid] != nil {
				continue
			}
			switch err := ptraceReq(unix.PTRACE_SEIZE, tid, 0, otherOptions); {
			case err == nil:
				s.adopt(tid)
				added++
			case errors.Is(err, unix.ESRCH):
				// Gone since the listing.
			case errors.Is(err, unix.EPERM) && s.tracedHere(tid):
				// Made by a thread seized meanwhile: traced already.
				s.adopt(tid)
				added++
			default:
				// Another tracer, or a thread on its way out: no int3
				// may be written while a thread runs untraced.
				return s.err("seize the other threads", fmt.Errorf("thread %d: %w", tid, err))
			}
		}
		if added == 0 {
			return s.noVforkChild(tids)
		}
	}
}

// noVforkChild checks that no thread of tids (and the stepped one) has a
// child sharing the process's memory: a vfork child made before the
// threads were seized runs untraced in the very code an int3 would be
// written into, until it execs or exits. One made since is traced, but
// refused too: it shares the code all the same.
func (s *Stepper) noVforkChild(tids []int) error {
	for _, tid := range append(tids, s.tid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", s.pid, tid))
		if errors.Is(err, os.ErrNotExist) && taskState(s.pid, tid) == 0 {
			continue // the thread is gone
		}
		if err != nil {
			return s.err("look for vfork children", err)
		}
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				return s.err("look for vfork children", fmt.Errorf("thread %d's children %q", tid, b))
			}
			switch r, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(s.pid), uintptr(child), kcmpVM, 0, 0, 0); {
			case e == unix.ESRCH:
				// Gone since the listing.
			case e != 0:
				return s.err("look for vfork children", fmt.Errorf("kcmp: %w", e))
			case r == 0:
				return s.err("insert breakpoint", fmt.Errorf("%w (pid %d)", ErrVforkChild, child))
			}
		}
	}
	return nil
}

// kcmpVM is kcmp(2)'s KCMP_VM: do two processes share their memory?
const kcmpVM = 1

// ErrVforkChild refuses software breakpoints while a vfork child runs in
// the process's memory.
var ErrVforkChild = errors.New("a vfork child shares the program's code")

// other is a thread of the process traced while breakpoints are in.
type other struct {
	tid int
	// held: a stop of it consumed and not served, for releaseOthers.
	held *childInfo
	// stepped: a step of ours may have left its trap queued behind
	// another stop (an interrupt's), to come when it runs next.
	stepped bool
}

func (s *Stepper) adopt(tid int) {
	s.others[tid] = &other{tid: tid}
	registerStepper(tid, true)
}

// onEvent handles a PTRACE_EVENT_CLONE, _FORK or _VFORK stop of the
// stepped thread: a new thread is held like the others; a forked child
// gets its original bytes back and goes; a vfork child shares the code,
// so every breakpoint goes (errVfork).
func (s *Stepper) onEvent(event int) error {
	msg, err := unix.PtraceGetEventMsg(s.tid)
	if err != nil {
		return s.err("event", err)
	}
	id := int(msg)
	switch event {
	case unix.PTRACE_EVENT_CLONE:
		s.adopt(id)
		return nil
	case unix.PTRACE_EVENT_FORK:
		s.releaseChild(id, false)
		return nil
	}
	s.removeAll()
	s.releaseChild(id, true)
	return s.err("event", errVfork)
}

// releaseChild waits for the first stop of a child forked while
// breakpoints were in, writes the original bytes into its copy of the
// code (unless it shares the parent's: vfork) and lets it go.
func (s *Stepper) releaseChild(pid int, shared bool) {
	if _, ok := s.waitOther(pid, 2*time.Second); !ok {
		return // gone, or the kernel detaches it when this thread ends
	}
	if !shared {
		if f, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_RDWR, 0); err == nil {
			for addr, orig := range s.orig {
				var b [1]byte
				if _, err := f.ReadAt(b[:], int64(addr)); err == nil && b[0] == 0xcc {
					f.WriteAt([]byte{orig}, int64(addr))
				}
			}
			f.Close()
		}
	}
	ptraceDetach(pid, 0)
}

// waitOther waits up to limit for a stop of a thread other than the
// stepped one; ok false: it exited, or did not stop in time.
func (s *Stepper) waitOther(tid int, limit time.Duration) (childInfo, bool) {
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		si, err := waitid(tid, unix.WEXITED|unix.WSTOPPED|unix.WNOHANG|unix.WALL)
		if err != nil {
			return si, false
		}
		if si.Pid == 0 {
			if ws, ok := takeStolen(tid); ok {
				si = statusInfo(tid, ws)
			}
		}
		if si.Pid != 0 {
			ws := waitStatus(si)
			return si, !ws.Exited() && !ws.Signaled()
		}
		if time.Now().After(deadline) {
			return si, false
		}
		if i > 100 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// removeAll writes every original byte back (orig keeps them: a thread
// that trapped on one is rewound onto it later).
func (s *Stepper) removeAll() {
	for addr := range s.soft {
		s.remove(addr)
	}
}

// releaseOthers runs before the stepped thread is detached: with every
// breakpoint gone, it stops each other thread (one that trapped on a
// breakpoint is stopped already), rewinds one that trapped onto the
// instruction it trapped on, and detaches it with the signal it stopped
// for, if it was its own. New threads and children found on the way go
// the same way.
func (s *Stepper) releaseOthers() {
	if s.others == nil {
		return
	}
	s.removeAll()
	queue := make([]int, 0, len(s.others))
	for tid := range s.others {
		queue = append(queue, tid)
	}
	for len(queue) > 0 {
		tid := queue[0]
		queue = queue[1:]
		o := s.others[tid]
		si, ok := s.waitOther(tid, 0)
		if o.held != nil {
			si, ok = *o.held, true
		}
		if !ok && si.Pid == 0 {
			// Running: stop it. ESRCH: it is dying. Waited for long: a
			// thread left traced dies of a trap of ours still queued.
			if ptraceInterrupt(tid) == nil {
				si, ok = s.waitOther(tid, releaseWait)
			}
		}
		if ok {
			queue = append(queue, s.releaseOne(o, si)...)
		}
		registerStepper(tid, false)
		delete(s.others, tid)
	}
	s.others = nil
}

// releaseOne lets a stopped other thread go and returns the threads its
// stop made that are to go too.
func (s *Stepper) releaseOne(o *other, si childInfo) []int {
	ws := waitStatus(si)
	sig := int(ws.StopSignal())
	var more []int
	switch ev := eventOf(ws); {
	case ev == unix.PTRACE_EVENT_CLONE:
		if msg, err := unix.PtraceGetEventMsg(o.tid); err == nil {
			s.adopt(int(msg))
			more = append(more, int(msg))
		}
		sig = 0
	case ev == unix.PTRACE_EVENT_FORK || ev == unix.PTRACE_EVENT_VFORK:
		if msg, err := unix.PtraceGetEventMsg(o.tid); err == nil {
			s.releaseChild(int(msg), ev == unix.PTRACE_EVENT_VFORK)
		}
		sig = 0
	case ev != 0:
		sig = 0 // an interrupt, a group-stop, a new thread's first stop
	case sig == int(unix.SIGTRAP):
		if s.oursTrap(o.tid, o.stepped) {
			sig = 0
		}
	}
	if sig == 0 {
		var gone bool
		if sig, gone = s.takeQueuedTraps(o.tid, o.stepped, func() (childInfo, bool) { return s.waitOther(o.tid, releaseWait) }); gone {
			return more
		}
	}
	ptraceDetach(o.tid, sig)
	return more
}

// releaseWait bounds the wait for a stop of a thread being let go.
const releaseWait = 10 * time.Second

// oursTrap reports whether thread tid, stopped for a SIGTRAP, stopped for
// a trap of ours: an int3 we wrote (the thread is then put back onto its
// instruction) or, when we stepped it, a step's or breakpoint's trap. Any
// other SIGTRAP is the program's own, to be delivered.
func (s *Stepper) oursTrap(tid int, stepped bool) bool {
	info, err := ptraceGetSiginfo(tid)
	switch {
	case err != nil:
		return false
	case info.Code == siKernel:
		if s.rewind(tid) {
			s.rewound.Add(1)
			return true
		}
		return false
	}
	return stepped && isStepTrap(info.Code)
}

// isStepTrap reports the si_code of a trap the kernel makes for a tracer:
// a single step (a step out of a system call is reported as a breakpoint,
// x86's user_single_step_report) or a hardware breakpoint.
func isStepTrap(code int32) bool {
	return code == trapTrace || code == trapBrkpt || code == trapHWBkpt
}

// takeQueuedTraps lets thread tid, stopped for something else, take the
// SIGTRAPs of ours queued for it (an interrupt's stop overtook them):
// delivered after a detach they would kill the program. Each stops the
// thread as soon as it runs and is dropped (wait waits for its next
// stop); a signal of the program's met on the way is returned, for the
// detach to deliver. gone: the thread ended or did not stop.
func (s *Stepper) takeQueuedTraps(tid int, stepped bool, wait func() (childInfo, bool)) (sig int, gone bool) {
	for i := 0; i < 4; i++ {
		if mask, ok := signalMask(s.pid, tid, "SigPnd"); !ok || mask&(1<<(unix.SIGTRAP-1)) == 0 {
			return 0, false
		}
		if ptraceCont(tid, 0) != nil {
			return 0, true
		}
		si, ok := wait()
		if !ok {
			return 0, true
		}
		ws := waitStatus(si)
		sig := int(ws.StopSignal())
		if eventOf(ws) != 0 || sig == 0 || sig == int(unix.SIGTRAP) && s.oursTrap(tid, stepped) {
			continue
		}
		return sig, false
	}
	return 0, false
}

// stepOver steps the stepped thread over the breakpoint at addr it
// stands on: the original byte back, one step, the int3 again.
func (s *Stepper) stepOver(addr uint64) (Stop, error) {
	if _, err := s.memAt(true, addr, []byte{s.soft[addr]}); err != nil {
		return Stop{}, s.err("step over breakpoint", err)
	}
	st, err := s.issue(unix.PTRACE_SINGLESTEP, 0)
	if _, still := s.soft[addr]; still && !s.gone {
		if _, werr := s.memAt(true, addr, []byte{0xcc}); werr != nil && err == nil {
			err = s.err("step over breakpoint", werr)
		}
	}
	return st, err
}

// isSoft reports a software breakpoint in the code at addr.
func (s *Stepper) isSoft(addr uint64) bool {
	_, ok := s.soft[addr]
	return ok
}

// tracedHere reports whether thread tid is traced by this OS thread.
func (s *Stepper) tracedHere(tid int) bool {
	st, err := ProcStatus(s.pid, tid)
	return err == nil && statusInt(st, "TracerPid") == unix.Gettid()
}

// othersWaiting interrupts the stepped thread, running, when another is
// stopped (peeked at, not consumed): the stepped one may be waiting for
// it (a lock it holds), and it can be served only while the stepped one
// stands still. Not while stepping: a step ends by itself.
func (s *Stepper) othersWaiting() {
	if len(s.others) == 0 || s.selfInt || s.stepping || s.detaching {
		return
	}
	for tid, o := range s.others {
		if o.held != nil {
			continue
		}
		si, err := waitid(tid, unix.WSTOPPED|unix.WNOHANG|unix.WNOWAIT|unix.WALL)
		if err == nil && si.Pid != 0 {
			if ptraceInterrupt(s.tid) == nil {
				s.selfInt = true
			}
			return
		}
	}
}

// serveOthers, with the stepped thread stopped, lets the other threads
// stopped meanwhile go on: one at a breakpoint is stepped over it, one
// stopped for a signal gets it, one that made a thread or a child goes on
// once it is seen to. Other stops are held until releaseOthers.
func (s *Stepper) serveOthers() {
	for tid, o := range s.others {
		if o.held != nil {
			continue
		}
		si, ok := s.waitOther(tid, 0)
		switch {
		case si.Pid == 0:
			continue // running
		case !ok:
			registerStepper(tid, false)
			delete(s.others, tid)
			continue
		}
		if !s.serveOne(o, si) {
			held := si
			o.held = &held
		}
	}
}

// serveOne lets other thread o, stopped with si, go on if it can: false
// if it is to be held.
func (s *Stepper) serveOne(o *other, si childInfo) bool {
	ws := waitStatus(si)
	sig := int(ws.StopSignal())
	switch ev := eventOf(ws); {
	case ev == unix.PTRACE_EVENT_CLONE:
		msg, err := unix.PtraceGetEventMsg(o.tid)
		if err != nil {
			return false
		}
		s.adopt(int(msg))
		return ptraceCont(o.tid, 0) == nil
	case ev == unix.PTRACE_EVENT_FORK:
		msg, err := unix.PtraceGetEventMsg(o.tid)
		if err != nil {
			return false
		}
		s.releaseChild(int(msg), false)
		return ptraceCont(o.tid, 0) == nil
	case ev == unix.PTRACE_EVENT_STOP:
		if isStopSignal(sig) {
			return false // a group-stop: it stays stopped until the end
		}
		return ptraceCont(o.tid, 0) == nil // a new thread's first stop
	case ev != 0:
		return false // a vfork: the child shares the code
	case sig != int(unix.SIGTRAP):
		return ptraceCont(o.tid, sig) == nil
	}
	info, err := ptraceGetSiginfo(o.tid)
	var r unix.PtraceRegs
	if err != nil || unix.PtraceGetRegs(o.tid, &r) != nil {
		return false
	}
	if o.stepped && isStepTrap(info.Code) {
		o.stepped = false
		return ptraceCont(o.tid, 0) == nil // a step's trap an interrupt overtook
	}
	if _, ours := s.orig[r.Rip-1]; info.Code != siKernel || !ours {
		return ptraceCont(o.tid, sig) == nil // the program's own SIGTRAP
	}
	r.Rip--
	if unix.PtraceSetRegs(o.tid, &r) != nil {
		return false
	}
	s.rewound.Add(1)
	orig, in := s.soft[r.Rip]
	if !in {
		return ptraceCont(o.tid, 0) == nil // its byte is back already
	}
	if _, err := s.memAt(true, r.Rip, []byte{orig}); err != nil {
		return false
	}
	stepped := ptraceReq(unix.PTRACE_SINGLESTEP, o.tid, 0, 0) == nil
	var after childInfo
	ok := false
	if stepped {
		// A step ends at once, unless its instruction blocks in the
		// kernel (a system call): then it is interrupted, and goes
		// on from there.
		after, ok = s.waitOther(o.tid, stepWait)
		if !ok && after.Pid == 0 && ptraceInterrupt(o.tid) == nil {
			after, ok = s.waitOther(o.tid, 2*time.Second)
		}
	}
	s.memAt(true, r.Rip, []byte{0xcc})
	// Until the step's trap is seen, it may come after any other stop.
	o.stepped = true
	if !ok {
		// Exited, or not stopped yet: its stops are served as they come.
		return true
	}
	// The step's own trap is let go; any other stop is served as such.
	return s.serveOne(o, after)
}

// eventOf returns the PTRACE_EVENT_* of a ptrace-stop's status, 0 for a
// signal-delivery-stop (TrapCause sees events of SIGTRAP stops only; a
// group-stop's PTRACE_EVENT_STOP comes with the stopping signal).
func eventOf(ws unix.WaitStatus) int { return int(ws>>16) & 0xff }

// rewind puts thread tid, stopped by the SIGTRAP of an int3, back onto
// the instruction the int3 was written over, if it was one of ours.
func (s *Stepper) rewind(tid int) bool {
	var r unix.PtraceRegs
	if unix.PtraceGetRegs(tid, &r) != nil {
		return false
	}
	if _, ours := s.orig[r.Rip-1]; !ours {
		return false
	}
	r.Rip--
	return unix.PtraceSetRegs(tid, &r) == nil
}
