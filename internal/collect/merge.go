package collect

import "github.com/leakpath/leakpath/internal/model/event"

// merger orders the events of one process image's rings by time. Each ring
// is already in time order, except for records written by a signal handler
// inside a hook, which can land just after a record with a later time; add
// repairs that locally.
type merger struct {
	rings  []ringQueue
	n      int    // events pending in all rings
	latest uint64 // the latest time of an event taken in
	agent  *agentLink
}

type ringQueue struct {
	evs  []event.Event
	head int
	last uint64 // time of the ring's latest event, for stack definitions
	// refs bounds the events of evs' array, taken ones included, that
	// may point somewhere (Event.X): none at refs or after. Heap events
	// point nowhere, and most queues need no clearing.
	refs int
}

// Buffer is the queue a ring's drained events are appended to.
func (m *merger) Buffer(ring int) *[]event.Event {
	for ring >= len(m.rings) {
		m.rings = append(m.rings, ringQueue{})
	}
	q := &m.rings[ring]
	if q.head > 0 && q.head >= len(q.evs)/2 {
		// Drop what was taken, so that a queue that always has a few
		// pending events does not grow with the run.
		n := copy(q.evs, q.evs[q.head:])
		if q.refs > n {
			clear(q.evs[n:q.refs]) // within the array: refs <= cap
		}
		q.refs = min(max(q.refs-q.head, 0), n)
		q.evs, q.head = q.evs[:n], 0
	}
	return &q.evs
}

// Filled takes in the events appended to a ring's queue from index from:
// definitions get the time of the event before them, and a record written
// out of order by a signal handler moves back to its place.
func (m *merger) Filled(ring int, from int) {
	q := &m.rings[ring]
	// Every queued event is at most last: only one older than that is
	// out of place.
	last, refs := q.last, q.refs
	for j := from; j < len(q.evs); j++ {
		ev := &q.evs[j]
		if ev.X != nil {
			refs = max(refs, j+1)
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
		// Never move an event above a stack definition it may use.
		for i := j; i > q.head && q.evs[i-1].Time > q.evs[i].Time &&
			q.evs[i-1].Kind != event.StackDef; i-- {
			q.evs[i-1], q.evs[i] = q.evs[i], q.evs[i-1]
		}
		refs = max(refs, j+1) // an event that points may have moved up
	}
	q.last = last
	q.refs = refs
	m.latest = max(m.latest, last)
	m.n += len(q.evs) - from
}

// add queues a ring's events (for tests).
func (m *merger) add(ring int, evs []event.Event) {
	q := m.Buffer(ring)
	from := len(*q)
	*q = append(*q, evs...)
	m.Filled(ring, from)
}

// take appends to out, in time order, every pending event older than upto
// (all of them when all is set).
func (m *merger) take(upto uint64, all bool, out []event.Event) []event.Event {
	for m.n > 0 {
		// The ring whose next event is earliest, and the earliest next
		// event of the others: the best ring runs until it passes that.
		best, next := -1, ^uint64(0)
		var bt uint64
		for i := range m.rings {
			q := &m.rings[i]
			if q.head == len(q.evs) {
				continue
			}
			t := q.evs[q.head].Time
			switch {
			case best < 0:
				best, bt = i, t
			case t < bt:
				next = min(next, bt)
				best, bt = i, t
			default:
				next = min(next, t)
			}
		}
		if best < 0 || (!all && bt >= upto) {
			break
		}
		q := &m.rings[best]
		start := q.head
		for q.head < len(q.evs) {
			t := q.evs[q.head].Time
			if q.head > start && t > next || !all && t >= upto {
				break
			}
			q.head++
		}
		out = append(out, q.evs[start:q.head]...)
		m.n -= q.head - start
		if q.head == len(q.evs) {
			q.evs, q.head = q.evs[:0], 0
		}
	}
	return out
}
