package ptrace

import "testing"

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
