package collect

import (
	"testing"
	"time"
)

// TestRoomBounds checks that a sender waits while the room is full, goes
// on once the sink gives back, and that a batch larger than the whole room
// still goes when nothing else is in it.
func TestRoomBounds(t *testing.T) {
	r := newRoom(10)
	r.take(8)
	went := takeAsync(r, 5)
	select {
	case <-went:
		t.Fatal("took 5 more with 8 of 10 taken")
	case <-time.After(50 * time.Millisecond):
	}
	r.give(8)
	waitFor(t, went, "still waiting after the room was given back")
	r.give(5)
	waitFor(t, takeAsync(r, 25), "a batch larger than the room waits in an empty room")
	if r.used != 25 {
		t.Fatalf("used %d, want 25", r.used)
	}
	// Over the limit now: a send without events still goes.
	waitFor(t, takeAsync(r, 0), "a send of no events waits in a room over its limit")
}

// takeAsync takes n on a goroutine of its own; the channel closes once it
// has.
func takeAsync(r *room, n int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		r.take(n)
		close(done)
	}()
	return done
}

// waitFor fails the test with failure unless done closes within the hang
// guard.
func waitFor(t *testing.T, done <-chan struct{}, failure string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatal(failure)
	}
}
