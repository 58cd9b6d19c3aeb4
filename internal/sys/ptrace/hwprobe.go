package ptrace

import (
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

var hwProbe = struct {
	once sync.Once
	ok   bool
	why  string
}{}

// HardwareBreakpoints reports whether hardware breakpoints fire on this
// machine, and if not, why it thinks so: some hypervisors accept the
// debug registers and never trap on them. It is probed once, by running
// /bin/true to its entry point on a breakpoint. When it cannot tell, it
// says they fire.
//
// LEAKPATH_HW_BREAKPOINTS=off makes it say they do not fire, to see
// here what such machines do.
func HardwareBreakpoints() (bool, string) {
	hwProbe.once.Do(func() {
		if os.Getenv("LEAKPATH_HW_BREAKPOINTS") == "off" {
			hwProbe.ok, hwProbe.why = false, "turned off by LEAKPATH_HW_BREAKPOINTS=off"
			return
		}
		hwProbe.ok, hwProbe.why = probeHardware()
	})
	return hwProbe.ok, hwProbe.why
}

// SoftBreakpoints reports whether paths may be recorded on software
// breakpoints (int3 written into the code) where hardware ones do not
// fire; LEAKPATH_SOFT_BREAKPOINTS=off says no, and every instruction is
// stepped instead.
func SoftBreakpoints() bool { return os.Getenv("LEAKPATH_SOFT_BREAKPOINTS") != "off" }

func probeHardware() (bool, string) {
	// The tracer is the thread that starts the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return true, ""
	}
	defer null.Close()
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{
		Files: []*os.File{null, null, null},
		Sys:   &syscall.SysProcAttr{Ptrace: true, Setpgid: true},
	})
	if err != nil {
		return true, ""
	}
	pid := p.Pid
	defer func() {
		unix.Kill(pid, unix.SIGKILL)
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, 0, nil)
	}()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		return true, ""
	}
	entry, ok := auxEntry(pid)
	if !ok {
		return true, ""
	}
	if _, err := unix.PtracePokeUser(pid, offDebugReg, le(entry)); err != nil {
		return false, "the debug registers cannot be set"
	}
	if _, err := unix.PtracePokeUser(pid, offDebugReg+8*7, le(1)); err != nil {
		return false, "the debug registers cannot be set"
	}
	if err := unix.PtraceCont(pid, 0); err != nil {
		return true, ""
	}
	if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
		return true, ""
	}
	if ws.Stopped() && ws.StopSignal() == unix.SIGTRAP {
		var r unix.PtraceRegs
		if unix.PtraceGetRegs(pid, &r) == nil && r.Rip == entry {
			return true, ""
		}
	}
	return false, "a hardware breakpoint on /bin/true's entry point did not fire (a hypervisor that does not virtualize the debug registers)"
}

// auxEntry returns the program's entry point (AT_ENTRY) from its
// auxiliary vector.
func auxEntry(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/auxv")
	if err != nil {
		return 0, false
	}
	for i := 0; i+16 <= len(b); i += 16 {
		if binary.LittleEndian.Uint64(b[i:]) == atEntry {
			return binary.LittleEndian.Uint64(b[i+8:]), true
		}
	}
	return 0, false
}

const atEntry = 9 // AT_ENTRY, <elf.h>

func le(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
