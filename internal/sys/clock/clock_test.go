package clock

import (
	"testing"
	"time"
)

// TestShiftAfter: 2^shift ticks fit in the resolution asked, 2^(shift+1)
// do not (nanoseconds: exact powers of two; the TSC: its measured rate,
// measured while the caller goes on), and each call gives the same shift.
func TestShiftAfter(t *testing.T) {
	for _, c := range []struct {
		res  time.Duration
		want uint
	}{{0, 0}, {-time.Second, 0}, {time.Nanosecond, 0}, {1023, 9}, {1024, 10}, {time.Millisecond, 19}, {time.Hour, 32}} {
		f := ShiftAfter(c.res, false)
		if got := f(); got != c.want || f() != got {
			t.Errorf("ShiftAfter(%v, ns) gave %d, then %d; want %d", c.res, got, f(), c.want)
		}
	}
	if f := ShiftAfter(0, true); f() != 0 {
		t.Errorf("ShiftAfter(0, tsc) = %d, want 0 (exact)", f())
	}
	if !haveTSC {
		t.Log("no TSC here: the TSC case is not checked")
		return
	}
	s := NewSource(true)
	f := ShiftAfter(time.Millisecond, true)
	time.Sleep(20 * time.Millisecond) // the caller's work
	got, rate := f(), s.TicksPerSecond()
	// 2^got ticks are at most ~1 ms, 2^(got+1) more than ~1 ms (the two
	// measurements of the rate differ a little: 10 % of slack).
	if ms := float64(uint64(1)<<got) / rate * 1e3; ms > 1.1 || 2*ms < 0.9 || f() != got {
		t.Errorf("ShiftAfter(1ms, tsc) gave %d, then %d: 2^%d ticks are %.3f ms at %.0f ticks/s", got, f(), got, ms, rate)
	}
}
