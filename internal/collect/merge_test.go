package collect

import (
	"math/rand"
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
	fed := 0
	for round := 0; round < 300; round++ {
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
		for k, c := range m.spare {
			for i, ev := range c[:cap(c)] {
				if ev.X != nil {
					t.Fatalf("round %d: event %d of spare chunk %d still points", round, i, k)
				}
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

// refTakeSome is takeSome as it was before runs of two rings alternated
// without a look at the others: each run begins with a look at every
// ring. TestMergerRunsAsReference holds takeSome to its order.
func (m *merger) refTakeSome(upto uint64, all bool, budget int) (stopped bool) {
	copying := all
	sent := 0
	for m.n > 0 {
		if budget > 0 && sent >= budget {
			return true
		}
		best, next := noQueue, ^uint64(0)
		var bt uint64
		for i := -1; i < len(m.rings); i++ {
			q := m.queue(i)
			if len(q.chunks) == 0 || q.head == len(q.chunks[0].evs) {
				continue
			}
			t := q.chunks[0].evs[q.head].Time
			switch {
			case best == noQueue:
				best, bt = i, t
			case t < bt:
				next = min(next, bt)
				best, bt = i, t
			default:
				next = min(next, t)
			}
		}
		if best == noQueue || (!all && bt >= upto) {
			break
		}
		q := m.queue(best)
		c := &q.chunks[0]
		if q.head == 0 && c.max <= next && (all || c.max < upto) &&
			(len(m.out) == 0 || 2*len(c.evs) >= cap(c.evs)) {
			sent += len(m.out) + len(c.evs)
			m.sendOut()
			m.n -= len(c.evs)
			m.send(c.evs, c.refs == 0)
			q.drop()
			continue
		}
		if !copying {
			if upto-bt <= m.age {
				break
			}
			copying = true
		}
		if m.out == nil {
			m.out, m.outPlain = m.chunk(), true
		}
		start := q.head
		for q.head < len(c.evs) && len(m.out)+q.head-start < cap(m.out) {
			t := c.evs[q.head].Time
			if q.head > start && t > next || !all && t >= upto {
				break
			}
			q.head++
		}
		m.out = append(m.out, c.evs[start:q.head]...)
		m.outPlain = m.outPlain && c.refs <= start
		m.n -= q.head - start
		if q.head == len(c.evs) {
			clear(c.evs[:c.refs])
			m.keep(c.evs)
			q.drop()
		}
		if len(m.out) == cap(m.out) {
			sent += len(m.out)
			m.sendOut()
		}
	}
	return false
}

// TestMergerRunsAsReference feeds two mergers the same events of rings
// that interleave as threads running at once do: two at a time a few
// events each, now and then a third ring's, a poller's, events at the
// same time in different rings, stack definitions, records out of place
// (a signal handler's), events that point somewhere. One takes with
// takeSome, the other with refTakeSome, under the same watermarks and
// budgets: they must send the same batches, in the same order, each
// event once, in time order, none at or after the watermark.
func TestMergerRunsAsReference(t *testing.T) {
	for seed := range int64(12) {
		rng := rand.New(rand.NewSource(seed))
		var got, want []event.Event
		var gotPlain, wantPlain []bool
		size := minRoom + rng.Intn(minRoom)
		m, ref := batchMerger(t, size, &got), batchMerger(t, size, &want)
		age := uint64(rng.Intn(3)) * 40
		for _, x := range []struct {
			m     *merger
			plain *[]bool
		}{{m, &gotPlain}, {ref, &wantPlain}} {
			send := x.m.send
			x.m.send = func(evs []event.Event, plain bool) {
				*x.plain = append(*x.plain, plain)
				send(evs, plain)
			}
			x.m.age = age
		}
		const rings = 4
		var clock, upto uint64
		a, b := 0, 1 // the rings that run
		fed, id := 0, uint64(0)
		for round := 0; round < 60; round++ {
			var evs [rings + 1][]event.Event // the last: the poller's
			// Some rounds a third ring is as busy, and more events
			// come at the same time.
			third, step := rng.Intn(4) == 0, 2+rng.Intn(3)
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
				clock += uint64(rng.Intn(step)) // (0: at the same time)
				id++
				ev := event.Event{Kind: event.Alloc, Time: clock, Addr: id, Size: uint64(r)}
				switch p := rng.Intn(100); {
				case p < 3 && r < rings:
					ev.Kind, ev.Time, ev.X = event.StackDef, 0, &event.Extra{Frames: []uint64{id}}
				case p < 6 && r < rings && clock > upto+8:
					// Written late, out of place: back in place unless
					// a stack definition comes between (Aux marks it).
					ev.Time -= uint64(rng.Intn(8))
					ev.Aux = 1
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
			upto = max(upto, clock-min(clock, uint64(rng.Intn(300))))
			budget := 0
			if rng.Intn(2) == 0 {
				budget = 1 + rng.Intn(2*size)
			}
			before := len(got)
			for {
				s1, s2 := m.takeSome(upto, false, budget), ref.refTakeSome(upto, false, budget)
				if s1 != s2 {
					t.Fatalf("seed %d round %d: takeSome stopped %v, the reference %v", seed, round, s1, s2)
				}
				if !s1 || rng.Intn(3) == 0 {
					break
				}
			}
			m.sendOut()
			ref.sendOut()
			for _, ev := range got[before:] {
				if ev.Time >= upto {
					t.Fatalf("seed %d round %d: took an event at %d, watermark %d", seed, round, ev.Time, upto)
				}
			}
		}
		got, want = takeAll(m, &got), takeAll(ref, &want)
		if len(got) != fed || len(want) != fed {
			t.Fatalf("seed %d: took %d events, the reference %d, fed %d", seed, len(got), len(want), fed)
		}
		seen := map[uint64]bool{}
		var last uint64
		for i, ev := range got {
			if ev.Addr != want[i].Addr {
				t.Fatalf("seed %d: event %d is #%d (ring %d, at %d), the reference's #%d (ring %d, at %d)",
					seed, i, ev.Addr, ev.Size, ev.Time, want[i].Addr, want[i].Size, want[i].Time)
			}
			if seen[ev.Addr] {
				t.Fatalf("seed %d: event #%d twice", seed, ev.Addr)
			}
			seen[ev.Addr] = true
			if ev.Kind != event.StackDef && ev.Aux == 0 {
				if ev.Time < last {
					t.Fatalf("seed %d: event %d at %d after one at %d", seed, i, ev.Time, last)
				}
				last = ev.Time
			}
		}
		if len(gotPlain) != len(wantPlain) {
			t.Fatalf("seed %d: %d batches, the reference %d", seed, len(gotPlain), len(wantPlain))
		}
		for i := range gotPlain {
			if gotPlain[i] != wantPlain[i] {
				t.Fatalf("seed %d: batch %d plain %v, the reference's %v", seed, i, gotPlain[i], wantPlain[i])
			}
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
