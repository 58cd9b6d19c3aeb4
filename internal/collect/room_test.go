package collect

import (
	"testing"
	"time"
)

// TestRoomBounds checks that a sender waits while the room is full, goes
// on once the sink gives back, and that a batch larger than the whole room
// still goes when nothing else is in it.
func TestRoomBounds(t *testing.T) {
	r := room{limit: 10}
	r.take(8)
	went := make(chan struct{})
	go func() {
		r.take(5)
		close(went)
	}()
	select {
	case <-went:
		t.Fatal("took 5 more with 8 of 10 taken")
	case <-time.After(50 * time.Millisecond):
	}
	r.give(8)
	select {
	case <-went:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the room was given back")
	}
	r.give(5)
	done := make(chan struct{})
	go func() {
		r.take(25)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a batch larger than the room waits in an empty room")
	}
	if r.used != 25 {
		t.Fatalf("used %d, want 25", r.used)
	}
}
