package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw system calls the rest of the package builds on. Every ptrace request
// here must be made on the Tracer's locked OS thread; the wait and memory
// calls may be made from any thread.

// seizeOptions are the options every thread is seized with: new threads are
// traced automatically, and exits and execve stop the thread so the tracer
// sees them while the thread's state is still there.
const seizeOptions = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_TRACEEXEC

// si_code values of a SIGCHLD siginfo (not in x/sys/unix).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
	cldStopped = 5
)

// childInfo is the SIGCHLD-shaped siginfo that waitid and PTRACE_GETSIGINFO
// fill in (the 128-byte kernel siginfo_t on x86-64).
type childInfo struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	Uid    uint32
	Status int32
	_      [100]byte
}

func ptraceReq(req, tid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func ptraceSeize(tid int) error { return ptraceReq(unix.PTRACE_SEIZE, tid, 0, seizeOptions) }

func ptraceInterrupt(tid int) error { return ptraceReq(unix.PTRACE_INTERRUPT, tid, 0, 0) }

func ptraceListen(tid int) error { return ptraceReq(unix.PTRACE_LISTEN, tid, 0, 0) }

func ptraceCont(tid, sig int) error { return ptraceReq(unix.PTRACE_CONT, tid, 0, uintptr(sig)) }

func ptraceDetach(tid, sig int) error { return ptraceReq(unix.PTRACE_DETACH, tid, 0, uintptr(sig)) }

func ptraceGetSiginfo(tid int) (childInfo, error) {
	var si childInfo
	err := ptraceReq(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si)))
	return si, err
}

// waitid waits (never blocking: callers pass WNOHANG) for a state change of
// the one task tid. It returns Pid 0 when there is none.
func waitid(tid int, options int) (childInfo, error) {
	var si childInfo
	for {
		_, _, e := unix.Syscall6(unix.SYS_WAITID, unix.P_PID, uintptr(tid),
			uintptr(unsafe.Pointer(&si)), uintptr(options), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return si, e
		}
		return si, nil
	}
}

// waitStatus turns a SIGCHLD siginfo into the wait4-style status word.
func waitStatus(si childInfo) unix.WaitStatus {
	switch si.Code {
	case cldExited:
		return unix.WaitStatus((si.Status & 0xff) << 8)
	case cldKilled:
		return unix.WaitStatus(si.Status & 0x7f)
	case cldDumped:
		return unix.WaitStatus(si.Status&0x7f | 0x80)
	case cldTrapped, cldStopped:
		return unix.WaitStatus(si.Status<<8 | 0x7f)
	}
	return 0
}

// vmRead reads remote memory with process_vm_readv: local and remote
// iovecs pair up one to one.
func vmRead(pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	for {
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}
