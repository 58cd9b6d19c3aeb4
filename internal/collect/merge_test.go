package collect

import (
	"math/rand"
	"sort"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// TestMergerOrders feeds rings of increasing times in random drains and
// checks that take yields all events once, in time order, and never one
// at or after the watermark.
func TestMergerOrders(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var m merger
	const rings = 5
	var next [rings]uint64
	var all []uint64
	var got []event.Event
	var upto uint64
	for round := 0; round < 200; round++ {
		for r := 0; r < rings; r++ {
			// A ring's next event is never older than what was taken:
			// that is the watermark's promise.
			next[r] = max(next[r], upto)
			var evs []event.Event
			for k := rng.Intn(20); k > 0; k-- {
				next[r] += uint64(1 + rng.Intn(50))
				evs = append(evs, event.Event{Kind: event.Alloc, Time: next[r], Addr: uint64(r)})
				all = append(all, next[r])
			}
			m.add(r, evs)
		}
		upto = uint64(round * 300)
		before := len(got)
		got = m.take(upto, false, got)
		for _, ev := range got[before:] {
			if ev.Time >= upto {
				t.Fatalf("round %d: took event at %d, watermark %d", round, ev.Time, upto)
			}
		}
	}
	got = m.take(0, true, got)
	if len(got) != len(all) {
		t.Fatalf("took %d events, fed %d", len(got), len(all))
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i := range got {
		if got[i].Time != all[i] {
			t.Fatalf("event %d at %d, want %d", i, got[i].Time, all[i])
		}
	}
}

// TestMergerRepairsLocalDisorder: a record written by a signal handler
// inside a hook lands after a later one in the same ring.
func TestMergerRepairsLocalDisorder(t *testing.T) {
	var m merger
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 10}, {Kind: event.Alloc, Time: 30}, {Kind: event.Alloc, Time: 20},
		{Kind: event.StackDef}, {Kind: event.Alloc, Time: 40}})
	got := m.take(0, true, nil)
	want := []uint64{10, 20, 30, 30, 40}
	for i, ev := range got {
		if ev.Time != want[i] {
			t.Fatalf("event %d (%v) at %d, want %d", i, ev.Kind, ev.Time, want[i])
		}
	}
	if got[3].Kind != event.StackDef {
		t.Errorf("stack definition moved: %v", got[3].Kind)
	}
}

// TestMergerLatest: the merger knows the latest time it took in, so that
// a pipeline can tell events dated far ahead (they would wait in it for
// ever) from a program's records.
func TestMergerLatest(t *testing.T) {
	var m merger
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 10}, {Kind: event.StackDef}, {Kind: event.Alloc, Time: 30}})
	m.add(1, []event.Event{{Kind: event.Free, Time: 1 << 62}})
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 20}})
	if m.latest != 1<<62 {
		t.Errorf("latest %d, want %d", m.latest, uint64(1<<62))
	}
	if got := m.take(100, false, nil); len(got) != 4 {
		t.Errorf("took %d events before 100, want 4", len(got))
	}
}

// TestDrainNamesAgent: a module load of the agent's link in the session
// directory (gone after the run) names its real file once drained, by the
// merger and by a single ring's direct path alike; other modules keep
// their paths.
func TestDrainNamesAgent(t *testing.T) {
	link := agentLink{"/tmp/session/libleakpath.so", "/opt/leakpath/libleakpath.so"}
	loads := func() []event.Event {
		return []event.Event{
			{Kind: event.ModuleLoad, Time: 5, X: &event.Extra{Module: &event.Module{Path: link[0]}}},
			{Kind: event.ModuleLoad, Time: 6, X: &event.Extra{Module: &event.Module{Path: "/usr/lib/libc.so.6"}}},
		}
	}
	m := merger{agent: &link}
	m.add(0, loads())
	merged := m.take(0, true, nil)
	d := directTarget{agent: &link}
	d.out = append(d.out, loads()...)
	d.Filled(0, 0)
	for name, evs := range map[string][]event.Event{"merger": merged, "direct": d.out} {
		if len(evs) != 2 {
			t.Fatalf("%s: %d events, want 2", name, len(evs))
		}
		if p := evs[0].ModuleInfo().Path; p != link[1] {
			t.Errorf("%s: agent named %q, want %q", name, p, link[1])
		}
		if p := evs[1].ModuleInfo().Path; p != "/usr/lib/libc.so.6" {
			t.Errorf("%s: libc renamed to %q", name, p)
		}
	}
}
