package collect

import "sync"

// room is a counting bound shared by the senders and the sink.
type room struct {
	mu    sync.Mutex
	freed *sync.Cond // on mu
	used  int
	limit int
	// waiting counts the senders waiting for room.
	waiting int
}

func newRoom(limit int) *room {
	r := &room{limit: limit}
	r.freed = sync.NewCond(&r.mu)
	return r
}

// take waits until n more fit, or nothing is taken (a batch larger than
// the limit still goes, alone), then takes n. Nothing (a function sent
// without events, maybe by one run while applying) never waits.
func (r *room) take(n int) {
	r.mu.Lock()
	for n > 0 && r.used > 0 && r.used+n > r.limit {
		r.waiting++
		r.freed.Wait()
		r.waiting--
	}
	r.used += n
	r.mu.Unlock()
}

// give returns n taken before. Senders that wait are woken once half the
// room is free: each then sends more than one batch in a row, instead of
// waking for each batch the sink applies.
func (r *room) give(n int) {
	r.mu.Lock()
	r.used -= n
	if r.waiting > 0 && r.used <= r.limit/2 {
		r.freed.Broadcast()
	}
	r.mu.Unlock()
}
