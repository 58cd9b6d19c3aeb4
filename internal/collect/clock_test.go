package collect

import (
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/target/region"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// TestTickClock: a region added to the collector's clock gets the time in
// its header and keeps getting it renewed, in the session clock's ticks
// (the agent dates pending allocations by it): a time between the session
// clock's readings before the region was added and after it was set; once
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
	// waitFor polls until ok, for at most the hang guard.
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(hangGuard); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s after %v", what, hangGuard)
			}
		}
	}

	before := c.src.Now()
	c.mu.Lock()
	c.clock(r, true)
	c.mu.Unlock()
	waitFor("clock in the header", func() bool { return now() != 0 })
	first := now()
	if after := c.src.Now(); first < before || first > after {
		t.Errorf("header clock %d, session clock %d before it was added and %d after: not the session's ticks", first, before, after)
	}
	waitFor("renewed clock", func() bool { return now() > first })

	c.mu.Lock()
	c.clock(r, false)
	stopped := c.clockStop == nil
	c.mu.Unlock()
	if !stopped {
		t.Fatal("the clock still ticks with no region")
	}
	// A tick sets the clocks under c.mu: none sets r's after its removal.
	last := now()
	time.Sleep(20 * time.Millisecond)
	if v := now(); v != last {
		t.Errorf("the clock moved from %d to %d after its last region was removed", last, v)
	}
}
