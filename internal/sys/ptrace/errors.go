package ptrace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Error reports an operation (Op, such as "seize" or "regs") that failed on
// process Pid. Tid is the thread concerned, 0 when the operation concerns
// the whole process; Addr is the remote address of a memory operation, 0
// otherwise. Err says why; errors.Is matches it against the sentinel errors
// of this package (ErrExited, ErrNotStopped, ...) and against the
// unix.Errno the kernel returned, if any.
type Error struct {
	Op   string
	Pid  int
	Tid  int
	Addr uint64
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("ptrace: ")
	b.WriteString(e.Op)
	fmt.Fprintf(&b, " pid %d", e.Pid)
	if e.Tid != 0 && e.Tid != e.Pid {
		fmt.Fprintf(&b, " thread %d", e.Tid)
	}
	if e.Addr != 0 {
		fmt.Fprintf(&b, " at %#x", e.Addr)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrNoProcess means that the pid names no process.
	ErrNoProcess = errors.New("no such process")
	// ErrZombie means that the process has exited and waits to be reaped
	// by its parent: there is nothing left to trace.
	ErrZombie = errors.New("process is a zombie")
	// ErrTraced means that another tracer (a debugger, strace, another
	// Tracer) already traces the process.
	ErrTraced = errors.New("already traced")
	// ErrExited means that the traced process has exited (or was killed)
	// while it was seized. The wrapping error says how it ended.
	ErrExited = errors.New("process exited")
	// ErrNoThread means that the thread is not (or no longer) one of the
	// traced threads: it exited, or the tid is wrong.
	ErrNoThread = errors.New("no such traced thread")
	// ErrNotStopped means that the request needs the thread stopped: call
	// StopAll first.
	ErrNotStopped = errors.New("thread is running (call StopAll first)")
	// ErrClosed means that the Tracer was detached or closed.
	ErrClosed = errors.New("tracer closed")
)

// ProcStatus returns the "Key:\tvalue" fields of /proc/PID/task/TID/status
// (or /proc/PID/status when tid is 0).
func ProcStatus(pid, tid int) (map[string]string, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	if tid != 0 {
		path = fmt.Sprintf("/proc/%d/task/%d/status", pid, tid)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m, nil
}

// statusInt returns the first number of a status field, -1 if absent.
func statusInt(m map[string]string, key string) int {
	f := strings.Fields(m[key])
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return n
}

// taskState returns the one-letter state of a thread from
// /proc/PID/task/TID/stat ('R', 'S', 't', 'Z', ...), 0 if unreadable.
func taskState(pid, tid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may contain anything.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

func comm(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(data))
}

// tracerName describes the tracer task tracerTid for an error message.
func tracerName(tracerTid int) string {
	if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tracerTid)); err == nil {
		return fmt.Sprintf("this process (thread %d, another Tracer)", tracerTid)
	}
	// TracerPid is the tracer thread's id; name its process.
	if st, err := ProcStatus(tracerTid, 0); err == nil {
		tgid := statusInt(st, "Tgid")
		if tgid > 0 && tgid != tracerTid {
			return fmt.Sprintf("%s (pid %d, thread %d)", comm(tgid), tgid, tracerTid)
		}
	}
	return fmt.Sprintf("%s (pid %d)", comm(tracerTid), tracerTid)
}

// diagnoseEPERM explains why PTRACE_SEIZE of thread tid of process pid was
// refused with EPERM.
// PermissionError says why this process may not trace (or read the
// memory maps of) process pid: ptrace_scope, another user, a tracer
// already there... It wraps unix.EPERM (or ErrTraced, ErrZombie).
func PermissionError(pid int) error {
	return &Error{Op: "attach", Pid: pid, Err: diagnoseEPERM(pid, 0)}
}

func diagnoseEPERM(pid, tid int) error {
	st, err := ProcStatus(pid, tid)
	if err != nil {
		return unix.EPERM
	}
	if s := st["State"]; strings.HasPrefix(s, "Z") || strings.HasPrefix(s, "X") {
		return fmt.Errorf("%w (exited; parent pid %d has not reaped it)", ErrZombie, statusInt(st, "PPid"))
	}
	if tp := statusInt(st, "TracerPid"); tp > 0 {
		return fmt.Errorf("%w by %s: %w", ErrTraced, tracerName(tp), unix.EPERM)
	}
	if st["Kthread"] == "1" || statusInt(st, "PPid") == 2 || pid == 2 {
		return fmt.Errorf("%w: pid %d is a kernel thread", unix.EPERM, pid)
	}
	if data, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		switch v := strings.TrimSpace(string(data)); v {
		case "1":
			if os.Geteuid() != 0 {
				return fmt.Errorf("%w: kernel.yama.ptrace_scope=1 allows tracing only descendants: run as root, or set it to 0", unix.EPERM)
			}
		case "2":
			return fmt.Errorf("%w: kernel.yama.ptrace_scope=2 allows tracing only with CAP_SYS_PTRACE: run as root, or lower it", unix.EPERM)
		case "3":
			return fmt.Errorf("%w: kernel.yama.ptrace_scope=3 forbids attaching to processes until reboot", unix.EPERM)
		}
	}
	if euid := os.Geteuid(); euid != 0 {
		uids := strings.Fields(st["Uid"])
		if len(uids) == 4 {
			for _, u := range uids[:3] {
				if u != strconv.Itoa(euid) {
					return fmt.Errorf("%w: the process runs as uid %s and this one as uid %d: run as root (CAP_SYS_PTRACE) or as the same user", unix.EPERM, uids[1], euid)
				}
			}
		}
		return fmt.Errorf("%w: not root; the process may be non-dumpable (setuid, or prctl PR_SET_DUMPABLE 0): run as root", unix.EPERM)
	}
	return fmt.Errorf("%w (a security module or a container policy refused it)", unix.EPERM)
}

// exitReason describes how the process ended, for ErrExited errors.
func exitReason(ws unix.WaitStatus, known bool) string {
	switch {
	case !known:
		return "its exit status was collected by another waiter"
	case ws.Exited():
		return fmt.Sprintf("exit code %d", ws.ExitStatus())
	case ws.Signaled():
		s := "killed by " + unix.SignalName(ws.Signal())
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("status %#x", uint32(ws))
}
