package collect

import "github.com/leakpath/leakpath/internal/model/event"

// merger orders the events of one process image's rings by time. Each ring
// is already in time order, except for records written by a signal handler
// inside a hook, which can land just after a record with a later time;
// Filled repairs that locally.
//
// A ring's events are decoded straight into chunks that are batches for
// the sink (fresh gives them): while one ring only has events to take (a
// program with one busy thread), its chunks go to the sink whole, never
// copied; events of several rings are copied into batches in time order.
// No batch grows past its capacity.
type merger struct {
	rings  []ringQueue
	n      int    // events pending in all rings
	latest uint64 // the latest time of an event taken in
	agent  *agentLink
	// fresh returns an empty batch to fill, send hands a full one on;
	// plain says it holds heap events only (none that points somewhere,
	// nor a fork: see chunk.refs).
	fresh func() []event.Event
	send  func(evs []event.Event, plain bool)
	out   []event.Event // the batch being filled by copying
	// outPlain: out holds heap events only.
	outPlain bool
	// free takes back a chunk emptied by copying, cleared of what its
	// events pointed to (nil: dropped): the sink's list of batches to
	// reuse, the latest handed out first.
	free func(evs []event.Event)
	// age is how much older than the watermark the earliest pending
	// event must be for take to copy events (0: any).
	age uint64
	// polls queues the events the image's pollers made (addPolled):
	// queue -1.
	polls ringQueue
}

// chunk is a batch that a ring's events are decoded into.
type chunk struct {
	evs []event.Event
	// max is the latest time in evs; refs bounds the events that may
	// point somewhere (Event.X) or be a fork: none at refs or after.
	// Most chunks hold heap events only: they need no clearing before
	// reuse, and the sink need not look through them (batch.plain).
	max  uint64
	refs int
}

type ringQueue struct {
	chunks []chunk // oldest first; events are appended to the last
	head   int     // chunks[0].evs[:head] were taken
	last   uint64  // time of the ring's latest event, for stack definitions
}

// minRoom is the least room a ring's buffer has: what a gone thread leaves
// (region.Leftovers) fits.
const minRoom = 512

// Buffer is the chunk a ring's drained events are appended to.
func (m *merger) Buffer(ring int) *[]event.Event {
	q := m.queue(ring)
	if k := len(q.chunks); k == 0 || cap(q.chunks[k-1].evs)-len(q.chunks[k-1].evs) < minRoom {
		q.chunks = append(q.chunks, chunk{evs: m.chunk()})
	}
	return &q.chunks[len(q.chunks)-1].evs
}

// queue is ring i's queue; -1 is the pollers'.
func (m *merger) queue(i int) *ringQueue {
	if i < 0 {
		return &m.polls
	}
	for i >= len(m.rings) {
		m.rings = append(m.rings, ringQueue{})
	}
	return &m.rings[i]
}

// chunk returns an empty chunk.
func (m *merger) chunk() []event.Event {
	evs := m.fresh()
	if cap(evs) < minRoom {
		evs = make([]event.Event, 0, minRoom)
	}
	return evs
}

// Filled takes in the events appended to a ring's chunk from index from:
// definitions get the time of the event before them, and a record written
// out of order by a signal handler moves back to its place.
func (m *merger) Filled(ring int, from int) {
	q := m.queue(ring)
	c := &q.chunks[len(q.chunks)-1]
	// Every queued event is at most last: only one older than that is
	// out of place.
	last := q.last
	for j := from; j < len(c.evs); j++ {
		ev := &c.evs[j]
		if ev.X != nil || ev.Kind == event.Fork {
			c.refs = max(c.refs, j+1)
			if ev.Kind == event.ModuleLoad {
				m.agent.rename(ev)
			}
		}
		if ev.Kind == event.StackDef || ev.Time == 0 {
			// Definitions carry no time: keep them just before their use.
			ev.Time = last
			continue
		}
		if ev.Time >= last {
			last = ev.Time
			continue
		}
		q.moveBack(j)
	}
	q.last = last
	c.max = max(c.max, last)
	m.latest = max(m.latest, last)
	m.n += len(c.evs) - from
	if len(c.evs) == 0 {
		// Nothing came (padding, a thread that left nothing): take
		// finds every queued chunk with events.
		m.keep(c.evs)
		*c = chunk{}
		q.chunks = q.chunks[:len(q.chunks)-1]
	}
}

// keep hands an emptied chunk back for reuse.
func (m *merger) keep(evs []event.Event) {
	if m.free != nil {
		m.free(evs[:0])
	}
}

// moveBack moves the event at index j of the last chunk back past the
// later ones before it, never above a stack definition it may use, nor
// into what was taken.
func (q *ringQueue) moveBack(j int) {
	ci := len(q.chunks) - 1
	for {
		pi, pj := ci, j-1
		if pj < 0 {
			if pi--; pi < 0 {
				return
			}
			pj = len(q.chunks[pi].evs) - 1
		}
		if pi == 0 && pj < q.head {
			return
		}
		prev, cur := &q.chunks[pi].evs[pj], &q.chunks[ci].evs[j]
		if prev.Time <= cur.Time || prev.Kind == event.StackDef {
			return
		}
		*prev, *cur = *cur, *prev
		// Either may point somewhere.
		q.chunks[pi].refs = max(q.chunks[pi].refs, pj+1)
		q.chunks[ci].refs = max(q.chunks[ci].refs, j+1)
		ci, j = pi, pj
	}
}

// addPolled queues events a poller made (a stale epoch, dated when it
// read the pages) to go out in time order with the rings' events: sent
// at once, it went ahead of allocations made before the reading and
// still waiting in the merger, and the model saw those blocks born after
// it.
func (m *merger) addPolled(evs []event.Event) { m.add(-1, evs) }

// add queues a ring's events.
func (m *merger) add(ring int, evs []event.Event) {
	for len(evs) > 0 {
		q := m.Buffer(ring)
		from := len(*q)
		k := min(len(evs), cap(*q)-from)
		*q = append(*q, evs[:k]...)
		m.Filled(ring, from)
		evs = evs[k:]
	}
}

// take hands on, in time order, every pending event older than upto (all
// of them when all is set): full batches are sent, the last one stays in
// m.out. Events are copied only when all is set or the earliest pending
// one is older than upto by m.age more: meanwhile a chunk of a single
// ring's events goes whole once it is old enough, and the sink is sent
// fewer small batches.
func (m *merger) take(upto uint64, all bool) { m.takeSome(upto, all, 0) }

// takeSome is take that returns once it sent budget events or more
// (0: no bound), reporting whether it stopped so: its caller can drain
// the rings in between, and their threads write on meanwhile.
func (m *merger) takeSome(upto uint64, all bool, budget int) (stopped bool) {
	copying := all
	sent := 0
	for m.n > 0 {
		if budget > 0 && sent >= budget {
			return true
		}
		// The ring whose next event is earliest runs until it passes
		// the earliest next event of the others (in second's queue).
		best, bt, second, next, third := m.earliest()
		if best == noQueue || (!all && bt >= upto) {
			break
		}
		q := m.queue(best)
		c := &q.chunks[0]
		if q.head == 0 && c.max <= next && (all || c.max < upto) &&
			(len(m.out) == 0 || 2*len(c.evs) >= cap(c.evs)) {
			// Every event of the chunk goes next: it is the batch
			// (unless small, and after a batch begun).
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
		// Threads that run at once on different cores interleave their
		// events a few at a time: while only two rings have events
		// before the others' (third), runs of the two alternate without
		// a look at the others.
		for {
			lim := next
			if !all {
				lim = min(lim, upto-1) // (bt < upto)
			}
			t, ok := m.copyRun(q, lim)
			if !ok {
				break // the chunk or the batch is full: look again
			}
			// Its next event t is after next, the earliest of the
			// others, which is second's: second runs next, until t,
			// unless a third ring's comes at t or before (then, or
			// at next, the others must be looked at).
			if t >= third || !all && next >= upto {
				break
			}
			best, second, next = second, best, t
			if q = m.queue(best); q.head == 0 {
				break // its chunk may go whole
			}
		}
		if len(m.out) == cap(m.out) {
			sent += len(m.out)
			m.sendOut()
		}
	}
	return false
}

// noQueue is no queue: see earliest.
const noQueue = -2

// earliest returns the queue whose next event is earliest (best, or
// noQueue if none has one) and that event's time, the queue with the
// earliest next event of the others (second) and its time, and the
// earliest next event of the rest (third); a time is ^0 for none. Of
// next events at the same time, the lower queue's is best (a run then
// takes its ring's events up to and at the other's time).
func (m *merger) earliest() (best int, bt uint64, second int, next, third uint64) {
	best, second = noQueue, noQueue
	bt, next, third = ^uint64(0), ^uint64(0), ^uint64(0)
	for i := -1; i < len(m.rings); i++ {
		q := &m.polls
		if i >= 0 {
			q = &m.rings[i]
		}
		if len(q.chunks) == 0 || q.head == len(q.chunks[0].evs) {
			continue // (a chunk a failed drain left empty)
		}
		t := q.chunks[0].evs[q.head].Time
		switch {
		case best == noQueue || t < bt:
			third = next
			second, next = best, bt
			best, bt = i, t
		case second == noQueue || t < next:
			third = next
			second, next = i, t
		default:
			third = min(third, t)
		}
	}
	return best, bt, second, next, third
}

// shortRun is the most events copyRun copies one by one.
const shortRun = 8

// copyRun copies the next events of q, at most lim each, to m.out; the
// first is, whatever its time. It returns the time of q's next event
// and true, or false if it stopped at the end of q's chunk (dropped
// then) or of m.out's room.
func (m *merger) copyRun(q *ringQueue, lim uint64) (next uint64, ok bool) {
	c := &q.chunks[0]
	start := q.head
	end := min(len(c.evs), start+cap(m.out)-len(m.out))
	h := start + 1
	for h < end && c.evs[h].Time <= lim {
		h++
	}
	if h-start <= shortRun {
		// (A call to copy them costs more than a few events.)
		n := len(m.out)
		out := m.out[:n+h-start]
		for i := start; i < h; i++ {
			out[n] = c.evs[i]
			n++
		}
		m.out = out
	} else {
		m.out = append(m.out, c.evs[start:h]...)
	}
	m.outPlain = m.outPlain && c.refs <= start
	m.n -= h - start
	q.head = h
	if h == len(c.evs) {
		clear(c.evs[:c.refs])
		m.keep(c.evs)
		q.drop()
		return 0, false
	}
	if h == end {
		return 0, false
	}
	return c.evs[h].Time, true
}

// drop forgets the ring's first chunk, taken.
func (q *ringQueue) drop() {
	n := copy(q.chunks, q.chunks[1:])
	q.chunks[n] = chunk{}
	q.chunks, q.head = q.chunks[:n], 0
}

// sendOut sends the batch being filled by copying, if it has events.
func (m *merger) sendOut() {
	if len(m.out) > 0 {
		m.send(m.out, m.outPlain)
		m.out = nil
	}
}

// takeAll takes every pending event and returns the last batch, not sent
// (nil if none), for its sender to add to.
func (m *merger) takeAll() []event.Event {
	m.take(0, true)
	out := m.out
	m.out = nil
	return out
}
