package ptrace

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Software breakpoints: an int3 (0xcc) written over the first byte of an
// instruction, for machines whose debug registers do not fire. The code
// is shared by every thread of the process, so the first one inserted
// seizes the process's other threads too (from the Stepper's own OS
// thread, without stopping them): one that meets a breakpoint then stops
// in the kernel instead of dying of the SIGTRAP, and is held there until
// Detach has written every original byte back; it is then rewound onto
// the instruction it trapped on and let go, as if nothing had happened.
// The stepped thread itself is stepped over a breakpoint it stands on
// (original byte back, one step, int3 again) whenever it resumes. Forks
// made meanwhile are seized too: a child's copy of the code gets its
// original bytes back before it runs.

// otherOptions are the options the other threads are seized with: their
// new threads and children are traced, so none runs into an int3 untraced.
const otherOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK

// siKernel is the si_code of the SIGTRAP an int3 raises.
const siKernel = 0x80

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
			return nil
		}
	}
}

// other is a thread of the process traced while breakpoints are in.
type other struct {
	tid int
	// child: a process forked meanwhile (its own copy of the code);
	// vfork: made by vfork (it shares the code).
	child, vfork bool
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
		if !ok && si.Pid == 0 {
			// Running: stop it. ESRCH: it is dying.
			if ptraceInterrupt(tid) == nil {
				si, ok = s.waitOther(tid, 2*time.Second)
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
	switch ev := ws.TrapCause(); {
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
		info, err := ptraceGetSiginfo(o.tid)
		if err != nil || info.Code != siKernel {
			break
		}
		var r unix.PtraceRegs
		if unix.PtraceGetRegs(o.tid, &r) != nil {
			break
		}
		if _, ours := s.orig[r.Rip-1]; ours {
			r.Rip--
			unix.PtraceSetRegs(o.tid, &r)
			s.rewound.Add(1)
			sig = 0
		}
	}
	ptraceDetach(o.tid, sig)
	return more
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
	st, err := procStatus(s.pid, tid)
	return err == nil && statusInt(st, "TracerPid") == unix.Gettid()
}
