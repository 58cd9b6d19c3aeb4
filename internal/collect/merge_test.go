package collect

import (
	"maps"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// batchMerger is a merger whose batches hold at most size events (and at
// least minRoom); what it sends is appended to *got, and each batch
// sent is checked against its capacity.
func batchMerger(t testing.TB, size int, got *[]event.Event) *merger {
	m := &merger{fresh: func() []event.Event { return make([]event.Event, 0, size) }}
	m.send = func(evs []event.Event, plain bool) {
		for _, ev := range evs {
			if plain && (ev.X != nil || ev.Kind == event.Fork) {
				t.Fatalf("a batch sent as plain holds %v", ev.Kind)
			}
		}
		if len(evs) == 0 || len(evs) > max(size, minRoom) {
			t.Fatalf("sent a batch of %d events, batches of %d", len(evs), size)
		}
		*got = append(*got, evs...)
	}
	return m
}

// takeAll sends m's pending events and returns all it sent.
func takeAll(m *merger, got *[]event.Event) []event.Event {
	if out := m.takeAll(); len(out) > 0 {
		m.send(out, false)
	}
	return *got
}

// TestMergerOrders feeds rings of increasing times in random drains and
// checks that take yields all events once, in time order, and never one
// at or after the watermark.
func TestMergerOrders(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var got []event.Event
	m := batchMerger(t, 600, &got)
	const rings = 5
	var next [rings]uint64
	var all []uint64
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
		m.take(upto, false)
		m.sendOut()
		for _, ev := range got[before:] {
			if ev.Time >= upto {
				t.Fatalf("round %d: took event at %d, watermark %d", round, ev.Time, upto)
			}
		}
	}
	got = takeAll(m, &got)
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
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 10}, {Kind: event.Alloc, Time: 30}, {Kind: event.Alloc, Time: 20},
		{Kind: event.StackDef}, {Kind: event.Alloc, Time: 40}})
	got = takeAll(m, &got)
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
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 10}, {Kind: event.StackDef}, {Kind: event.Alloc, Time: 30}})
	m.add(1, []event.Event{{Kind: event.Free, Time: 1 << 62}})
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 20}})
	if m.latest != 1<<62 {
		t.Errorf("latest %d, want %d", m.latest, uint64(1<<62))
	}
	m.take(100, false)
	m.sendOut()
	if len(got) != 4 {
		t.Errorf("took %d events before 100, want 4", len(got))
	}
}

// TestTakeSomeStops: takeSome stops once it sent its budget, saying so,
// and the takes after go on where it stopped: every event due goes once,
// in order.
func TestTakeSomeStops(t *testing.T) {
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	const n = 10 * minRoom
	for i := range n {
		m.add(0, []event.Event{{Kind: event.Alloc, Time: uint64(10 + i)}})
	}
	rounds := 0
	for m.takeSome(10+n-5, false, 2*minRoom) {
		if rounds++; len(got) < rounds*2*minRoom || len(got) > rounds*3*minRoom {
			t.Fatalf("round %d: %d events sent, budget %d a round", rounds, len(got), 2*minRoom)
		}
	}
	if rounds < 3 {
		t.Errorf("%d rounds for %d events, budget %d", rounds, n, 2*minRoom)
	}
	m.sendOut()
	if len(got) != n-5 {
		t.Fatalf("sent %d events of %d due", len(got), n-5)
	}
	for i, ev := range got {
		if ev.Time != uint64(10+i) {
			t.Fatalf("event %d at %d, want %d", i, ev.Time, 10+i)
		}
	}
}

// TestDrainNamesAgent: a module load of the agent's link in the session
// directory (gone after the run) names its real file once drained,
// whether its chunk goes whole or is copied among another ring's events;
// other modules keep their paths.
func TestDrainNamesAgent(t *testing.T) {
	link := agentLink{"/tmp/session/libleakpath.so", "/opt/leakpath/libleakpath.so"}
	loads := func() []event.Event {
		return []event.Event{
			{Kind: event.ModuleLoad, Time: 5, X: &event.Extra{Module: &event.Module{Path: link[0]}}},
			{Kind: event.ModuleLoad, Time: 7, X: &event.Extra{Module: &event.Module{Path: "/usr/lib/libc.so.6"}}},
		}
	}
	for _, other := range []bool{false, true} {
		var got []event.Event
		m := batchMerger(t, minRoom, &got)
		m.agent = &link
		m.add(0, loads())
		if other {
			m.add(1, []event.Event{{Kind: event.Alloc, Time: 6}})
		}
		got = takeAll(m, &got)
		var mods []event.Event
		for _, ev := range got {
			if ev.Kind == event.ModuleLoad {
				mods = append(mods, ev)
			}
		}
		if len(mods) != 2 {
			t.Fatalf("other ring %v: %d module loads, want 2", other, len(mods))
		}
		if p := mods[0].ModuleInfo().Path; p != link[1] {
			t.Errorf("other ring %v: agent named %q, want %q", other, p, link[1])
		}
		if p := mods[1].ModuleInfo().Path; p != "/usr/lib/libc.so.6" {
			t.Errorf("other ring %v: libc renamed to %q", other, p)
		}
	}
}

// TestMergerDropsTakenPointers: the chunks a merger keeps for its rings
// once their events were copied out point nowhere, so that a long run
// does not keep stacks and modules alive through them; and all events
// still come out once, in order, in batches no larger than their
// capacity.
func TestMergerDropsTakenPointers(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	var tm, upto, last uint64
	fed, round := 0, 0
	m.free = func(c []event.Event) {
		for i, ev := range c[:cap(c)] {
			if ev.X != nil {
				t.Fatalf("round %d: event %d of a chunk handed back for reuse still points", round, i)
			}
		}
	}
	for ; round < 300; round++ {
		for ring := range 2 {
			var evs []event.Event
			for k := rng.Intn(200); k > 0; k-- {
				tm += 2
				ev := event.Event{Kind: event.Alloc, Time: tm}
				if rng.Intn(8) == 0 {
					ev.Kind, ev.Time, ev.X = event.StackDef, 0, &event.Extra{Frames: []uint64{tm}}
				}
				evs = append(evs, ev)
			}
			fed += len(evs)
			m.add(ring, evs)
		}
		upto = tm - uint64(rng.Intn(60))
		before := len(got)
		m.take(upto, false)
		m.sendOut()
		// (A ring's definitions take the time of its event before.)
		for i := before; i < len(got); i++ {
			if got[i].Kind != event.StackDef {
				if got[i].Time < last {
					t.Fatalf("round %d: out of order", round)
				}
				last = got[i].Time
			}
		}
	}
	if took := len(takeAll(m, &got)); took != fed {
		t.Fatalf("took %d events, fed %d", took, fed)
	}
}

// TestMergerSendsChunksWhole: the chunks of a ring whose events need no
// merging go to the sink as they are, not copied, once older than the
// watermark; other events wait for age more before they are copied.
func TestMergerSendsChunksWhole(t *testing.T) {
	var sent [][]event.Event
	var plain []bool
	m := &merger{fresh: func() []event.Event { return make([]event.Event, 0, minRoom) },
		send: func(evs []event.Event, p bool) { sent, plain = append(sent, evs), append(plain, p) }, age: 1000}
	var evs []event.Event
	for i := range 3 * minRoom / 2 {
		evs = append(evs, event.Event{Kind: event.Alloc, Time: uint64(10 + i)})
	}
	m.add(0, evs)
	chunks := map[*event.Event]bool{}
	for _, c := range m.rings[0].chunks {
		chunks[&c.evs[0]] = true
	}
	if len(chunks) != 2 {
		t.Fatalf("%d events in %d chunks, want 2", len(evs), len(chunks))
	}
	// The first chunk is older than the watermark; the second not all of
	// it, and its oldest event not by age more: it waits.
	second := evs[minRoom].Time
	m.take(evs[len(evs)-1].Time, false)
	m.sendOut()
	if len(sent) != 1 || len(sent[0]) != minRoom || !chunks[&sent[0][0]] || !plain[0] {
		t.Fatalf("sent %d batches, want one whole chunk of %d plain events", len(sent), minRoom)
	}
	// Another ring's event amid the second chunk's, a fork: they are
	// copied, and the batch is not plain.
	m.add(1, []event.Event{{Kind: event.Fork, Time: second + 10}})
	m.take(second+1001, false)
	m.sendOut()
	if len(sent) != 2 || len(sent[1]) != minRoom/2+1 || chunks[&sent[1][0]] || sent[1][11].Kind != event.Fork || plain[1] {
		t.Fatalf("sent %d batches (%d events last), want a second one of %d copied events", len(sent), len(sent[len(sent)-1]), minRoom/2+1)
	}
	if out := m.takeAll(); len(out) != 0 || m.n != 0 {
		t.Fatalf("%d events left", m.n)
	}
}

// TestMergerAfterFailedDrain: a drain that fails leaves the chunk it asked
// for empty (Buffer without Filled); taking skips it, and the ring's next
// drain fills it.
func TestMergerAfterFailedDrain(t *testing.T) {
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	m.Buffer(0)
	m.add(1, []event.Event{{Kind: event.Alloc, Time: 5}})
	m.take(10, false)
	m.sendOut()
	if len(got) != 1 {
		t.Fatalf("took %d events, want 1", len(got))
	}
	m.add(0, []event.Event{{Kind: event.Free, Time: 7}})
	if got = takeAll(m, &got); len(got) != 2 || len(m.rings[0].chunks) != 0 {
		t.Fatalf("took %d events, want 2; ring 0 keeps %d chunks", len(got), len(m.rings[0].chunks))
	}
}

// TestMergerOrdersPolled: a poller's event (a stale epoch, dated when it
// read the pages) goes out after the rings' events made before it, even
// those drained after it was queued, and before the later ones.
func TestMergerOrdersPolled(t *testing.T) {
	var got []event.Event
	m := batchMerger(t, minRoom, &got)
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 10}})
	m.addPolled([]event.Event{{Kind: event.StaleEpoch, Time: 20, X: &event.Extra{}}})
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 15}, {Kind: event.Free, Time: 25}})
	m.add(1, []event.Event{{Kind: event.Alloc, Time: 19}})
	m.take(30, false)
	got = takeAll(m, &got)
	var times []uint64
	for _, ev := range got {
		times = append(times, ev.Time)
	}
	if len(got) != 5 || got[3].Kind != event.StaleEpoch || !sort.SliceIsSorted(times, func(i, j int) bool { return times[i] < times[j] }) {
		t.Fatalf("took %v (times %v), want the epoch fourth, all in time order", got, times)
	}
}

// refMerge is the order a merger must give, event by event: a ring's
// events as they came, but for a record written out of place, moved back
// past the later ones before it, never above a stack definition nor into
// what was taken, and definitions dated by their ring's event before;
// and of the rings' next events, the earliest first. (With events at the
// same time in different rings, the order would depend on the merger's
// runs.)
type refMerge struct {
	rings map[int][]event.Event
	last  map[int]uint64
}

func (r *refMerge) add(ring int, evs []event.Event) {
	q := r.rings[ring]
	for _, ev := range evs {
		switch {
		case ev.Kind == event.StackDef || ev.Time == 0:
			ev.Time = r.last[ring]
		case ev.Time >= r.last[ring]:
			r.last[ring] = ev.Time
		default:
			j := len(q)
			for j > 0 && q[j-1].Time > ev.Time && q[j-1].Kind != event.StackDef {
				j--
			}
			q = slices.Insert(q, j, ev)
			continue
		}
		q = append(q, ev)
	}
	r.rings[ring] = q
}

// next removes and returns the event that goes next, if earlier than
// upto.
func (r *refMerge) next(upto uint64) (event.Event, bool) {
	best, ok := 0, false
	// The lowest ring first, as the merger looks: of events at the same
	// time (definitions dated 0 before their ring's first event), its
	// goes first.
	for _, ring := range slices.Sorted(maps.Keys(r.rings)) {
		if q := r.rings[ring]; len(q) > 0 && q[0].Time < upto && (!ok || q[0].Time < r.rings[best][0].Time) {
			best, ok = ring, true
		}
	}
	if !ok {
		return event.Event{}, false
	}
	ev := r.rings[best][0]
	r.rings[best] = r.rings[best][1:]
	return ev, true
}

// TestMergerOrdersRuns feeds a merger events of rings that interleave as
// threads running at once do: two at a time a few events each, now and
// then a third ring's, a poller's, stack definitions, records out of
// place (a signal handler's), events that point somewhere; and takes
// them under watermarks, budgets and an age. What it sends must be the
// order of refMerge, never an event at or after the watermark, every
// event once.
func TestMergerOrdersRuns(t *testing.T) {
	for seed := range int64(12) {
		rng := rand.New(rand.NewSource(seed))
		var got []event.Event
		size := minRoom + rng.Intn(minRoom)
		m := batchMerger(t, size, &got)
		m.age = uint64(rng.Intn(3)) * 300
		ref := refMerge{rings: map[int][]event.Event{}, last: map[int]uint64{}}
		const rings = 4
		// A ring's times are clock*8+ring: none at the same time as
		// another's.
		var clock, upto uint64
		a, b := 0, 1 // the rings that run
		fed, id, checked := 0, uint64(0), 0
		for round := 0; round < 60; round++ {
			var evs [rings + 1][]event.Event // the last: the poller's
			// Some rounds a third ring is as busy.
			third := rng.Intn(4) == 0
			for k := rng.Intn(1500); k > 0; k-- {
				r := a
				switch p := rng.Intn(100); {
				case third && p < 30:
					r = (b + 1) % rings
				case p < 45:
					r = b
				case p < 52:
					r = rng.Intn(rings)
				case p < 53:
					r = rings
				case p < 54:
					a, b = rng.Intn(rings), rng.Intn(rings)
				}
				clock += uint64(rng.Intn(3))
				id++
				ev := event.Event{Kind: event.Alloc, Time: clock*8 + uint64(r), Addr: id, Size: uint64(r)}
				switch p := rng.Intn(100); {
				case p < 3 && r < rings:
					ev.Kind, ev.Time, ev.X = event.StackDef, 0, &event.Extra{Frames: []uint64{id}}
				case p < 6 && r < rings && clock*8 > upto+64:
					ev.Time -= uint64(1+rng.Intn(7)) * 8 // written late
				case p < 8:
					ev.Kind, ev.X = event.StaleEpoch, &event.Extra{}
				}
				evs[r] = append(evs[r], ev)
			}
			for r := range evs {
				ring := r
				if r == rings {
					ring = -1
				}
				for k := 0; k < len(evs[r]); {
					n := min(len(evs[r])-k, 1+rng.Intn(700))
					m.add(ring, evs[r][k:k+n])
					ref.add(ring, evs[r][k:k+n])
					k += n
				}
				fed += len(evs[r])
			}
			// A ring's next events are never older than the watermark.
			upto = max(upto, clock*8-min(clock*8, uint64(rng.Intn(2000))))
			budget := 0
			if rng.Intn(2) == 0 {
				budget = 1 + rng.Intn(2*size)
			}
			for m.takeSome(upto, false, budget) && rng.Intn(3) != 0 {
			}
			m.sendOut()
			for ; checked < len(got); checked++ {
				want, ok := ref.next(upto)
				if !ok {
					t.Fatalf("seed %d round %d: sent event #%d (ring %d, at %d), watermark %d, none due",
						seed, round, got[checked].Addr, got[checked].Size, got[checked].Time, upto)
				}
				if ev := got[checked]; ev.Addr != want.Addr {
					t.Fatalf("seed %d round %d: event %d is #%d (ring %d, at %d), want #%d (ring %d, at %d)",
						seed, round, checked, ev.Addr, ev.Size, ev.Time, want.Addr, want.Size, want.Time)
				}
			}
		}
		got = takeAll(m, &got)
		for ; checked < len(got); checked++ {
			if want, _ := ref.next(^uint64(0)); got[checked].Addr != want.Addr {
				t.Fatalf("seed %d: event %d is #%d (at %d), want #%d (at %d)", seed, checked, got[checked].Addr, got[checked].Time, want.Addr, want.Time)
			}
		}
		if len(got) != fed {
			t.Fatalf("seed %d: took %d events, fed %d", seed, len(got), fed)
		}
	}
}

// TestMergerSendsChunkWholeAfterRun: a ring whose whole chunk comes
// before the others' next events goes whole even when it is its turn
// after another ring's run.
func TestMergerSendsChunkWholeAfterRun(t *testing.T) {
	var sent [][]event.Event
	m := &merger{fresh: func() []event.Event { return make([]event.Event, 0, minRoom) },
		send: func(evs []event.Event, _ bool) { sent = append(sent, evs) }}
	m.add(0, []event.Event{{Kind: event.Alloc, Time: 50}, {Kind: event.Alloc, Time: 60}, {Kind: event.Alloc, Time: 1000}})
	var evs []event.Event
	for i := range minRoom / 2 {
		evs = append(evs, event.Event{Kind: event.Alloc, Time: uint64(100 + i)})
	}
	m.add(1, evs)
	chunk := &m.rings[1].chunks[0].evs[0]
	m.take(2000, false)
	m.sendOut()
	if len(sent) != 3 || len(sent[0]) != 2 || len(sent[1]) != minRoom/2 || &sent[1][0] != chunk || len(sent[2]) != 1 {
		var lens []int
		for _, b := range sent {
			lens = append(lens, len(b))
		}
		t.Fatalf("sent batches of %v events, want 2, then ring 1's chunk of %d whole, then 1", lens, minRoom/2)
	}
}
