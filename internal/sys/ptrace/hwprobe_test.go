package ptrace

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestHardwareBreakpointsProbe: the probe answers, the same twice, and
// says why when they do not fire.
func TestHardwareBreakpointsProbe(t *testing.T) {
	ok, why := HardwareBreakpoints()
	ok2, why2 := HardwareBreakpoints()
	if ok != ok2 || why != why2 {
		t.Errorf("probe changed its mind: %v %q, then %v %q", ok, why, ok2, why2)
	}
	if !ok && why == "" {
		t.Error("no reason given for breakpoints that do not fire")
	}
	t.Logf("hardware breakpoints fire: %v %s", ok, why)
}

// TestCaught: this test process catches SIGURG (Go's preemption signal)
// and not SIGWINCH; a process that is gone catches, as far as can be told.
func TestCaught(t *testing.T) {
	signal.Ignore(syscall.SIGWINCH)
	if !Caught(os.Getpid(), int(syscall.SIGURG)) {
		t.Error("SIGURG not caught by a Go program")
	}
	if Caught(os.Getpid(), int(syscall.SIGWINCH)) {
		t.Error("an ignored SIGWINCH reported caught")
	}
	if !Caught(1<<30, int(syscall.SIGWINCH)) {
		t.Error("no process: not reported caught")
	}
}
