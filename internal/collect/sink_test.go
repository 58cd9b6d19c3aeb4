package collect

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestSinkReusesBatches: an applied batch of the usual size is handed out
// again, the latest first, cleared unless plain; a small one (a process
// start's) is not kept for rings to decode into.
func TestSinkReusesBatches(t *testing.T) {
	s := newSink(heap.NewSession(), nil)
	a, b := s.buffer(), s.buffer()
	a = append(a, event.Event{Kind: event.StackDef, X: &event.Extra{Frames: []uint64{1}}})
	b = append(b, event.Event{Kind: event.Alloc, Addr: 7})
	s.recycle(a, false)
	s.recycle(b, true)
	s.recycle([]event.Event{{Kind: event.ProcessStart}}, false)
	got := s.buffer()
	if cap(got) != batchEvents || &got[:1][0] != &b[0] {
		t.Fatalf("reused a batch of %d events, not the latest applied", cap(got))
	}
	if got = s.buffer(); &got[:1][0] != &a[0] || got[:1][0].X != nil {
		t.Fatalf("the batch applied before came back %+v, want it cleared", got[:1][0])
	}
	if got = s.buffer(); cap(got) != batchEvents || len(got) != 0 {
		t.Fatalf("a new batch of %d events (%d in it)", cap(got), len(got))
	}
}
