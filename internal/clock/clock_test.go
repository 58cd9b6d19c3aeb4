package clock

import (
	"testing"
	"time"
)

// TestShiftFor: 2^shift ticks fit in the resolution asked, 2^(shift+1) do
// not (nanoseconds: exact powers of two; the TSC: its measured rate).
func TestShiftFor(t *testing.T) {
	for _, c := range []struct {
		res  time.Duration
		want uint
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 0}, {1023, 9}, {1024, 10}, {time.Millisecond, 19}, {time.Hour, 32}} {
		if got := ShiftFor(c.res, false); got != c.want {
			t.Errorf("ShiftFor(%v, ns) = %d, want %d", c.res, got, c.want)
		}
	}
	if !haveTSC {
		t.Log("no TSC here: the TSC case is not checked")
		return
	}
	s := NewSource(true)
	time.Sleep(20 * time.Millisecond)
	rate := s.TicksPerSecond()
	got := ShiftFor(time.Millisecond, true)
	// 2^got ticks are at most ~1 ms, 2^(got+1) more than ~1 ms (the two
	// measurements of the rate differ a little: 10 % of slack).
	if ms := float64(uint64(1)<<got) / rate * 1e3; ms > 1.1 || 2*ms < 0.9 {
		t.Errorf("ShiftFor(1ms, tsc) = %d: 2^%d ticks are %.3f ms at %.0f ticks/s", got, got, ms, rate)
	}
}

// TestShiftAfter: the shift measured while the caller goes on is ShiftFor's
// (the TSC's: 2^shift ticks about the resolution asked, like ShiftFor's),
// and the same each time it is asked.
func TestShiftAfter(t *testing.T) {
	f := ShiftAfter(1024, false)
	if got := f(); got != 10 || f() != got {
		t.Errorf("ShiftAfter(1024, ns) gave %d, then %d; want 10", got, f())
	}
	if f := ShiftAfter(0, true); f() != 0 {
		t.Errorf("ShiftAfter(0) = %d, want 0 (exact)", f())
	}
	if !haveTSC {
		t.Log("no TSC here: the TSC case is not checked")
		return
	}
	s := NewSource(true)
	f = ShiftAfter(time.Millisecond, true)
	time.Sleep(20 * time.Millisecond) // the caller's work
	got, rate := f(), s.TicksPerSecond()
	if ms := float64(uint64(1)<<got) / rate * 1e3; ms > 1.1 || 2*ms < 0.9 || f() != got {
		t.Errorf("ShiftAfter(1ms, tsc) gave %d, then %d: 2^%d ticks are %.3f ms at %.0f ticks/s", got, f(), got, ms, rate)
	}
}
