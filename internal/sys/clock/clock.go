// Package clock is the time base shared with the agent: TSC ticks when the
// machine's TSC is a reliable clock (the kernel itself uses it), else
// CLOCK_MONOTONIC nanoseconds. It also measures the TSC's rate, so that
// ticks in a trace become seconds in a report.
package clock

import (
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// UseTSC reports whether agent timestamps should be TSC ticks: only when
// the kernel's clocksource is the TSC (it checked the TSC is invariant and
// synchronised across CPUs).
func UseTSC() bool {
	if !haveTSC {
		return false
	}
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

// Mono is CLOCK_MONOTONIC in nanoseconds.
func Mono() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// Real is CLOCK_REALTIME in nanoseconds.
func Real() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// Source reads the agent's clock and measures its rate against
// CLOCK_MONOTONIC over the life of the Source.
type Source struct {
	tsc bool

	mu          sync.Mutex
	ticks0, ns0 uint64
}

// NewSource starts a clock; tsc selects TSC ticks (see UseTSC).
func NewSource(tsc bool) *Source {
	s := &Source{tsc: tsc && haveTSC}
	s.ticks0, s.ns0 = s.pair()
	return s
}

// TSC reports whether ticks are TSC ticks.
func (s *Source) TSC() bool { return s.tsc }

// Now reads the current time in agent ticks.
func (s *Source) Now() uint64 {
	if s.tsc {
		return rdtsc()
	}
	return Mono()
}

// pair reads ticks and CLOCK_MONOTONIC as close together as it can: the
// tightest of a few tries.
func (s *Source) pair() (ticks, ns uint64) {
	if !s.tsc {
		n := Mono()
		return n, n
	}
	best := ^uint64(0)
	for i := 0; i < 5; i++ {
		a := rdtsc()
		n := Mono()
		b := rdtsc()
		if b-a < best {
			best, ticks, ns = b-a, a+(b-a)/2, n
		}
	}
	return ticks, ns
}

// TicksPerSecond is the measured rate of the clock: exactly 1e9 for
// nanoseconds; for the TSC, ticks over nanoseconds since NewSource (the
// longer the Source lives, the more exact).
func (s *Source) TicksPerSecond() float64 {
	if !s.tsc {
		return 1e9
	}
	t, n := s.pair()
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= s.ns0 || t <= s.ticks0 {
		return 0
	}
	return float64(t-s.ticks0) / float64(n-s.ns0) * 1e9
}

// CoarseTick is the resolution of CLOCK_MONOTONIC_COARSE, which the agent
// dates pending allocations with unless told to be exact (0 if unknown).
func CoarseTick() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_MONOTONIC_COARSE, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// ExactPending says whether the agent must date pending allocations
// exactly: when times are kept finer than the coarse clock's tick (a
// resolution of 0 is exact), or the tick is unknown.
func ExactPending(res time.Duration) bool {
	tick := CoarseTick()
	return tick <= 0 || res < tick
}

// ShiftAfter returns a function that gives the largest shift s such that
// 2^s ticks of the clock UseTSC selects last at most res: the
// tracefile.Options.TimeShift that keeps times to res. res <= 0 is 0
// (exact). The TSC's rate is measured over ~2 ms, from the call on while
// the caller goes on (a run's trace is made after its program started:
// waiting first was most of leakpath's start); the function waits for
// what is left of the 2 ms. A power of two needs no more.
func ShiftAfter(res time.Duration, tsc bool) func() uint {
	if res <= 0 {
		return func() uint { return 0 }
	}
	var s *Source
	start := time.Now()
	if tsc && haveTSC {
		s = NewSource(true)
	}
	return sync.OnceValue(func() uint {
		perNS := 1.0
		if s != nil {
			time.Sleep(2*time.Millisecond - time.Since(start))
			if r := s.TicksPerSecond(); r > 0 {
				perNS = r / 1e9
			}
		}
		ticks := float64(res.Nanoseconds()) * perNS
		var shift uint
		for shift < 32 && float64(uint64(1)<<(shift+1)) <= ticks {
			shift++
		}
		return shift
	})
}
