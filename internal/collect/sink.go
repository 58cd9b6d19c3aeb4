package collect

import (
	"sync"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// agentLink is the agent's link in the session directory, and its real
// path. The loader knows the agent by the link, which is gone after the
// run: its module loads name the real file instead, as their rings are
// drained (merger.Filled), while they are in the cache, rather than in a
// pass of the sink's over every event.
type agentLink [2]string

func (a *agentLink) rename(ev *event.Event) {
	if m := ev.ModuleInfo(); m != nil && a != nil && m.Path == a[0] {
		m.Path = a[1]
	}
}

// batch is a run of merged events of one image.
type batch struct {
	proc uint32
	evs  []event.Event
	// plain: evs are heap events only, none that points somewhere
	// (Event.X: no process start, no stack definition) and no fork. The
	// sink applies them at once, and reuses them without clearing.
	plain bool
	// after, if not nil, runs on the sink's goroutine once evs are fed;
	// the events it returns are applied too. If the image is held at a
	// fork (its events wait for the child, at most forkWait), after sees
	// the model without them: a scan at exit then misses that moment.
	after func(*heap.Session) []event.Event
}

type forkKey struct {
	parent uint32
	id     uint64
}

// held is an image whose events wait: a parent paused at a fork until its
// child's first event, or a child waiting for its parent's fork.
type held struct {
	evs   []event.Event
	since time.Time
	fork  forkKey // for a paused parent: the fork it waits at
}

// forkWait bounds how long a parent waits for its fork child to register
// (a child that dies before, or is not recorded).
const forkWait = 2 * time.Second

// sink applies events to the model and the trace, one batch at a time, so
// that both see the same order. A fork child must start from its parent's
// heap as it was at the fork: the sink pauses the parent at its Fork event
// until the child's ProcessStart is applied (or holds the child until the
// parent reaches the fork).
//
// A pipeline applies its rings' batches itself when no one else applies
// (sendDirect): the events are applied on the core that decoded them,
// while they are in its cache, without waking another goroutine; the
// batches queued before its own go first. Batches that carry a function
// to run, and the pipelines' batches while someone applies, queue for the
// sink's goroutine, which also does what the clock asks (tick). Whoever
// applies holds the role (busy): one at a time.
type sink struct {
	model *heap.Session
	trace TraceWriter
	done  chan struct{}

	mu      sync.Mutex
	idle    *sync.Cond // on mu: busy turned false
	busy    bool       // someone applies (holds the role)
	wanted  bool       // the sink's goroutine waits for the role
	queue   []batch    // for the sink's goroutine, in order
	afters  int        // batches in the queue with a function to run
	closing bool
	wake    chan struct{} // the sink's goroutine has work: queue, closing

	// The rest is the role's (busy).
	err     error
	flushed time.Time // when the trace was last flushed
	events  int64

	// free are batches applied, for reuse, the latest last: the next
	// one taken is the likeliest to be in the cache still.
	freeMu   sync.Mutex
	free     [][]event.Event
	room     *room // bounds the events queued and not yet applied
	warm     func(*event.Module)
	agentAs  agentLink
	warmed   map[*heap.Module]bool
	paused   map[uint32]*held  // parents stopped at a fork
	children map[forkKey]*held // children waiting for their parent's fork
	childOf  map[uint32]forkKey
	forked   map[forkKey]bool // forks applied whose child has not come yet
	// budget, when set, checks the collector's memory every tick.
	budget func()
	// waiting are the functions of sendAfter for a proc whose events are
	// held: they run once its events are applied (the scan of a fork child
	// that exits before its parent's fork reached the sink found no
	// process in the model, and its exit went unscanned).
	waiting map[uint32][]func(*heap.Session) []event.Event
	// tickers look at the model now and then (Ticker).
	tickers []*ticker
}

// ticker is a Ticker with when it last looked.
type ticker struct {
	Ticker
	every time.Duration
	last  time.Time
}

func newSink(model *heap.Session, trace TraceWriter) *sink {
	s := &sink{
		model: model, trace: trace,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		room:    newRoom(inFlight),
		flushed: time.Now(),
		paused:  map[uint32]*held{}, children: map[forkKey]*held{},
		childOf: map[uint32]forkKey{}, forked: map[forkKey]bool{},
		waiting: map[uint32][]func(*heap.Session) []event.Event{},
	}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// buffer returns an empty batch to fill, reusing one the sink is done with.
func (s *sink) buffer() []event.Event {
	s.freeMu.Lock()
	defer s.freeMu.Unlock()
	if k := len(s.free); k > 0 {
		b := s.free[k-1]
		s.free = s.free[:k-1]
		return b[:0]
	}
	return make([]event.Event, 0, batchEvents)
}

// recycle returns an applied batch for reuse, unless the sink kept parts
// of it; plain, it points nowhere. Only batches of the usual size are
// kept: the small ones of a process start or an analysis would be handed
// out next, for rings to decode into.
func (s *sink) recycle(evs []event.Event, plain bool) {
	if cap(evs) != batchEvents {
		return
	}
	if !plain {
		clear(evs) // drop what the events point to
	}
	s.freeMu.Lock()
	if len(s.free) < spareBatches {
		s.free = append(s.free, evs)
	}
	s.freeMu.Unlock()
}

// send hands a batch to the sink's goroutine; evs belongs to the sink
// afterwards. It waits while the events queued fill the sink's room.
func (s *sink) send(proc uint32, evs []event.Event) {
	s.sendBatch(batch{proc: proc, evs: evs})
}

// sendAfter hands a batch to the sink's goroutine with a function to run
// once the batch is applied.
func (s *sink) sendAfter(proc uint32, evs []event.Event, after func(*heap.Session) []event.Event) {
	s.sendBatch(batch{proc: proc, evs: evs, after: after})
}

// sendBatch queues b for the sink's goroutine. Called while applying (an
// analysis's function), it only queues: the role is not taken twice.
func (s *sink) sendBatch(b batch) {
	s.room.take(cap(b.evs))
	s.mu.Lock()
	s.queue = append(s.queue, b)
	if b.after != nil {
		s.afters++
	}
	s.mu.Unlock()
	s.poke()
}

// take empties the queue and returns what it held; s.mu is held.
func (s *sink) take() []batch {
	q := s.queue
	s.queue, s.afters = nil, 0
	return q
}

// handleAll applies batches taken from the queue; the caller holds the
// role. fns: see handle.
func (s *sink) handleAll(q []batch, fns bool) {
	for _, b := range q {
		n := cap(b.evs)
		s.handle(b, fns)
		s.room.give(n)
	}
}

// sendDirect applies a pipeline's batch b on the calling goroutine, after
// those queued, when no one applies, else queues it. Not when a queued
// batch carries a function to run, nor for b with one: the function's
// sender, not a pipeline, knows what it may wait for.
func (s *sink) sendDirect(b batch) {
	s.mu.Lock()
	if s.busy || s.wanted || s.afters > 0 || s.closing {
		s.mu.Unlock()
		s.sendBatch(b)
		return
	}
	s.busy = true
	q := s.take()
	s.mu.Unlock()
	s.handleAll(q, false)
	s.handle(b, false)
	ready := s.waitingReady()
	s.mu.Lock()
	s.release()
	s.mu.Unlock()
	if ready {
		s.poke()
	}
}

// waitingReady says whether functions of sendAfter wait for images no
// longer held, for the sink's goroutine to run (runWaiting); the caller
// holds the role. (While a fork holds an image, its functions wait: a
// poke for them at every batch would have the pipelines queue.)
func (s *sink) waitingReady() bool {
	for proc := range s.waiting {
		if !s.waits(proc) {
			return true
		}
	}
	return false
}

// poke wakes the sink's goroutine, unless it is woken already.
func (s *sink) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// acquire waits until no one applies and takes the role, for the sink's
// goroutine; s.mu is held. Meanwhile the pipelines queue their batches:
// one that applies batch after batch would otherwise take the role back
// each time before this goroutine woke, and the ticks would wait.
func (s *sink) acquire() {
	for s.busy {
		s.wanted = true
		s.idle.Wait()
	}
	s.wanted = false
	s.busy = true
}

// release gives the role up, to the sink's goroutine if a batch waits
// for it; s.mu is held.
func (s *sink) release() {
	s.busy = false
	s.idle.Broadcast()
	if len(s.queue) > 0 {
		s.poke()
	}
}

// handle applies a batch; the caller holds the role. fns: the caller is
// the sink's goroutine, which runs the functions whose images' events are
// applied; a pipeline leaves them to it, as it leaves it the batches
// that carry one.
func (s *sink) handle(b batch, fns bool) {
	if s.feed(b.proc, b.evs, b.plain) {
		s.recycle(b.evs, b.plain)
	}
	if b.after != nil {
		s.waiting[b.proc] = append(s.waiting[b.proc], b.after)
	}
	if fns && len(s.waiting) > 0 {
		s.runWaiting()
	}
}

// close waits for everything sent to be applied. Nothing is sent after.
func (s *sink) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.poke()
	<-s.done
}

// inFlight is how many events (by the capacity of their batches: 1 MiB
// of them) may wait in the sink's queue. When the sink is the slower side,
// the backlog waits in the agent's rings, and the program for ring space,
// instead of in the collector's memory, which a larger bound let grow by
// tens of MB (and the GC's work with it). spareBatches is how many
// applied batches are kept for reuse: the pipelines decode their rings
// into them too and keep those a few milliseconds (merger), so it is
// about as many as the bound lets through and the rings hold; fewer had
// batches made anew all run long, each a few hundred fresh pages to fault
// in. A batch is small (64 KiB) so that a pipeline that applies what it
// just decoded finds it in the core's cache, beside the model's tables
// (docs/bench.md).
const (
	inFlight     = 1 << 14
	spareBatches = 64
	batchEvents  = 1024 // a batch's capacity
)

// run is the sink's goroutine: it applies the queue, and every tick
// checks the collector's budget, the held forks, the trace's flush and
// the tickers.
func (s *sink) run() {
	defer close(s.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ticked := false
		select {
		case <-s.wake:
		case <-tick.C:
			ticked = true
		}
		s.mu.Lock()
		s.acquire()
		for len(s.queue) > 0 {
			q := s.take()
			s.mu.Unlock()
			s.handleAll(q, true)
			s.mu.Lock()
		}
		closing := s.closing
		s.mu.Unlock()
		if len(s.waiting) > 0 {
			s.runWaiting() // those a pipeline's batches released
		}
		if ticked {
			s.tick()
		}
		if closing {
			s.releaseAll()
			s.runWaiting()
			s.flush()
		}
		s.mu.Lock()
		s.release()
		s.mu.Unlock()
		if closing {
			return
		}
	}
}

// tick is the sink's work every tick; the caller holds the role.
func (s *sink) tick() {
	if s.budget != nil {
		s.budget()
	}
	s.expire()
	s.runWaiting()
	if time.Since(s.flushed) >= traceFlushEvery {
		s.flush()
	}
	for _, t := range s.tickers {
		if time.Since(t.last) >= t.every {
			t.last = time.Now()
			t.Tick(s.model)
		}
	}
}

// traceFlushEvery is how often the trace is written out while the program
// runs: what a killed collector can lose. Each flush ends a chunk, and a
// chunk's coding tables start empty: every 100 ms made python3's trace 4 %
// larger.
const traceFlushEvery = time.Second

func (s *sink) flush() {
	s.flushed = time.Now()
	if s.trace != nil && s.err == nil {
		s.err = s.trace.Flush()
	}
}

// feed applies a proc's events, holding them where ordering demands. It
// reports whether evs may be reused afterwards. Plain ones (batch.plain)
// hold no fork nor process start to look for, and define no stack.
func (s *sink) feed(proc uint32, evs []event.Event, plain bool) (reusable bool) {
	if h := s.paused[proc]; h != nil {
		h.evs = append(h.evs, evs...)
		s.checkForkFailed(proc, h)
		return true
	}
	if k, ok := s.childOf[proc]; ok {
		if h := s.children[k]; h != nil {
			h.evs = append(h.evs, evs...)
			return true
		}
	}
	if plain {
		s.applyPlain(evs)
		return true
	}
	for i := 0; i < len(evs); i++ {
		ev := &evs[i]
		switch ev.Kind {
		case event.ProcessStart:
			if ev.ProcessInfo() != nil && ev.ProcessInfo().ForkID != 0 && ev.ProcessInfo().ParentProc >= 0 {
				k := forkKey{uint32(ev.ProcessInfo().ParentProc), ev.ProcessInfo().ForkID}
				if !s.forked[k] {
					// The parent has not reached its fork yet.
					s.apply(evs[:i])
					s.childOf[proc] = k
					s.children[k] = &held{evs: append([]event.Event(nil), evs[i:]...), since: time.Now()}
					return true
				}
				delete(s.forked, k)
				s.apply(evs[:i+1])
				evs = evs[i+1:]
				i = -1
				if ph := s.paused[k.parent]; ph != nil && ph.fork == k {
					delete(s.paused, k.parent)
					defer s.feed(k.parent, ph.evs, false)
				}
				continue
			}
		case event.Fork:
			k := forkKey{proc, ev.ForkID()}
			s.apply(evs[:i+1])
			rest := evs[i+1:]
			if ch := s.children[k]; ch != nil {
				// The child is waiting: start it now, from this state.
				delete(s.children, k)
				s.forked[k] = true
				for p, ck := range s.childOf {
					if ck == k {
						delete(s.childOf, p)
						s.feed(p, ch.evs, false)
					}
				}
				evs = rest
				i = -1
				continue
			}
			s.forked[k] = true
			h := &held{evs: append([]event.Event(nil), rest...), since: time.Now(), fork: k}
			s.paused[proc] = h
			s.checkForkFailed(proc, h)
			return true
		}
	}
	s.apply(evs)
	return true
}

// waits reports whether proc's events wait (a paused parent, a child
// waiting for its parent's fork).
func (s *sink) waits(proc uint32) bool {
	if s.paused[proc] != nil {
		return true
	}
	_, ok := s.childOf[proc]
	return ok
}

// runWaiting runs the functions of sendAfter whose procs' events are no
// longer held, in the order they came.
func (s *sink) runWaiting() {
	for proc, fs := range s.waiting {
		if s.waits(proc) {
			continue
		}
		delete(s.waiting, proc)
		for _, f := range fs {
			s.apply(f(s.model))
		}
	}
}

// checkForkFailed resumes a paused parent whose fork failed.
func (s *sink) checkForkFailed(proc uint32, h *held) {
	for _, ev := range h.evs {
		if ev.Kind == event.ForkDone && ev.ForkID() == h.fork.id && ev.ForkResult() <= 0 ||
			ev.Kind == event.ProcessEnd {
			s.resume(proc)
			return
		}
	}
}

func (s *sink) resume(proc uint32) {
	h := s.paused[proc]
	if h == nil {
		return
	}
	delete(s.paused, proc)
	delete(s.forked, h.fork)
	s.feed(proc, h.evs, false)
}

// warmStacks tells Warm of the modules that new stacks go through.
func (s *sink) warmStacks(evs []event.Event) {
	for i := range evs {
		ev := &evs[i]
		if ev.Kind != event.StackDef {
			continue
		}
		p := s.model.Process(ev.Proc)
		if p == nil {
			continue
		}
		for _, mi := range p.Stacks.Modules(p.StackOf(ev.Stack)) {
			if mi < 0 || int(mi) >= len(p.Modules) {
				continue
			}
			m := p.Modules[mi]
			if s.warmed == nil {
				s.warmed = map[*heap.Module]bool{}
			}
			if !s.warmed[m] {
				s.warmed[m] = true
				s.warm(&m.Module)
			}
		}
	}
}

// expire gives up waiting after forkWait.
func (s *sink) expire() {
	for proc, h := range s.paused {
		if time.Since(h.since) > forkWait {
			s.resume(proc)
		}
	}
	for k, h := range s.children {
		if time.Since(h.since) > forkWait {
			s.startOrphan(k, h)
		}
	}
}

// startOrphan starts a child whose parent never reached the fork: it
// inherits nothing.
func (s *sink) startOrphan(k forkKey, h *held) {
	delete(s.children, k)
	for p, ck := range s.childOf {
		if ck == k {
			delete(s.childOf, p)
		}
	}
	if len(h.evs) > 0 && h.evs[0].ProcessInfo() != nil {
		info := *h.evs[0].ProcessInfo()
		info.ForkID = 0
		h.evs[0].Ext().Process = &info
	}
	s.apply(h.evs)
}

func (s *sink) releaseAll() {
	for len(s.paused) > 0 || len(s.children) > 0 {
		for proc := range s.paused {
			s.resume(proc)
		}
		for k, h := range s.children {
			s.startOrphan(k, h)
		}
	}
}

func (s *sink) apply(evs []event.Event) {
	if len(evs) == 0 {
		return
	}
	s.applyPlain(evs)
	if s.warm != nil {
		s.warmStacks(evs)
	}
}

// applyPlain applies events to the model and the trace, and tells Warm
// of nothing: for events that define no stack.
func (s *sink) applyPlain(evs []event.Event) {
	s.model.Apply(evs)
	s.events += int64(len(evs))
	if s.trace != nil && s.err == nil {
		s.err = s.trace.Write(evs)
	}
}
