package collect

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/region"
	"github.com/leakpath/leakpath/internal/wire"
)

// TestTickClock: a region added to the collector's clock gets the time in
// its header within milliseconds and keeps getting it renewed, in the
// session clock's ticks (the agent dates pending allocations by it); once
// the last region is removed the ticking stops.
func TestTickClock(t *testing.T) {
	c := newCollector(Options{})
	r, err := region.Prepare(region.Options{Slots: 2, RingSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	mem, err := unix.Mmap(r.FD(), 0, wire.HeaderSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	now := func() uint64 { return binary.LittleEndian.Uint64(mem[wire.OffNowTS:]) }
	if v := now(); v != 0 {
		t.Fatalf("a new region's clock is %d, want 0 (the agent's coarse clock until the collector sets it)", v)
	}
	// waitFor polls until ok, for at most a second.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s after a second", what)
			}
		}
	}

	c.mu.Lock()
	c.clock(r, true)
	c.mu.Unlock()
	waitFor("clock in the header", func() bool { return now() != 0 })
	first := now()
	if src := c.src.Now(); first > src || float64(src-first) > 0.5*c.src.TicksPerSecond() {
		t.Errorf("header clock %d, session clock %d: not the session's ticks of now", first, src)
	}
	waitFor("renewed clock", func() bool { return now() > first })

	c.mu.Lock()
	c.clock(r, false)
	stopped := c.clockStop == nil
	c.mu.Unlock()
	if !stopped {
		t.Fatal("the clock still ticks with no region")
	}
	time.Sleep(5 * time.Millisecond) // a tick under way ends
	last := now()
	time.Sleep(20 * time.Millisecond)
	if v := now(); v != last {
		t.Errorf("the clock moved from %d to %d after its last region was removed", last, v)
	}
}
