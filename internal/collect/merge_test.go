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

// TestMergerDropsTakenPointers: the events a ring's queue keeps after
// they were taken point nowhere once the queue moves its pending ones to
// the front, so that a long run does not keep stacks and modules alive
// through it; and all events still come out once, in order.
func TestMergerDropsTakenPointers(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var m merger
	var tm, upto uint64
	fed, took := 0, 0
	for round := 0; round < 300; round++ {
		var evs []event.Event
		for k := rng.Intn(40); k > 0; k-- {
			tm += 2
			ev := event.Event{Kind: event.Alloc, Time: tm}
			if rng.Intn(8) == 0 {
				ev.Kind, ev.Time, ev.X = event.StackDef, 0, &event.Extra{Frames: []uint64{tm}}
			}
			evs = append(evs, ev)
		}
		fed += len(evs)
		q := &m.rings
		if len(*q) > 0 {
			r := &(*q)[0]
			before := r.head
			m.Buffer(0)
			if r.head == 0 && before > 0 {
				for i, ev := range r.evs[len(r.evs):cap(r.evs)] {
					if ev.X != nil {
						t.Fatalf("round %d: event %d past the %d pending ones still points", round, i+len(r.evs), len(r.evs))
					}
				}
			}
		}
		m.add(0, evs)
		r := &m.rings[0]
		for i, ev := range r.evs[:cap(r.evs)] {
			if ev.X != nil && i >= r.refs {
				t.Fatalf("round %d: event %d points, bound %d", round, i, r.refs)
			}
		}
		upto = tm - uint64(rng.Intn(60))
		got := m.take(upto, false, nil)
		took += len(got)
		for i := 1; i < len(got); i++ {
			if got[i].Time < got[i-1].Time {
				t.Fatalf("round %d: out of order", round)
			}
		}
	}
	took += len(m.take(0, true, nil))
	if took != fed {
		t.Fatalf("took %d events, fed %d", took, fed)
	}
}
