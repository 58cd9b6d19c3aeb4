package collect

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// TestSinkKeepsOrder: pipelines that apply their batches themselves
// (sendDirect) and batches queued for the sink's goroutine (send,
// sendAfter) are applied in the order each image sent them, whoever
// applies them; a function queued from inside an applied one does not
// wait for the role it runs under; close applies all that was sent.
func TestSinkKeepsOrder(t *testing.T) {
	s := newSink(heap.NewSession(), nil)
	go s.run()
	const procs, batches, per = 3, 200, 50
	var wg sync.WaitGroup
	errs := make(chan error, procs*batches)
	var nested atomic.Int64
	for proc := uint32(0); proc < procs; proc++ {
		s.send(proc, []event.Event{{Kind: event.ProcessStart, Proc: proc,
			X: &event.Extra{Process: &event.ProcessInfo{Index: proc, ParentProc: -1, ExecOf: -1}}}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr := uint64(1 << 20)
			for k := 0; k < batches; k++ {
				evs := make([]event.Event, 0, per)
				for range per {
					addr += 16
					evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: proc, Addr: addr, Size: 16})
				}
				s.sendDirect(batch{proc: proc, evs: evs, plain: true})
				if k%10 != 9 {
					continue
				}
				want := uint64((k + 1) * per)
				s.sendAfter(proc, nil, func(m *heap.Session) []event.Event {
					if got := m.Process(proc).Totals.LiveBlocks; got != want {
						errs <- fmt.Errorf("image %d: a function sent after %d blocks saw %d", proc, want, got)
					}
					s.sendAfter(proc, nil, func(*heap.Session) []event.Event {
						nested.Add(1)
						return nil
					})
					return nil
				})
			}
		}()
	}
	wg.Wait()
	s.close()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for proc := uint32(0); proc < procs; proc++ {
		if got := s.model.Process(proc).Totals.LiveBlocks; got != batches*per {
			t.Errorf("image %d: %d blocks live after close, want %d", proc, got, batches*per)
		}
	}
	if got := nested.Load(); got != procs*batches/10 {
		t.Errorf("%d functions sent from applied ones ran, want %d", got, procs*batches/10)
	}
}

// TestSinkRunsFunctionsItself: a function sent for an image held at a
// fork runs once the child's start releases it, on the sink's goroutine,
// not on the pipeline whose batch released it (that pipeline's rings
// would wait for an analysis of another image, and the function's sender
// knows what it may wait for, not the pipeline).
func TestSinkRunsFunctionsItself(t *testing.T) {
	s := newSink(heap.NewSession(), nil)
	go s.run()
	start := func(proc uint32, parent int32, fork uint64) []event.Event {
		return []event.Event{{Kind: event.ProcessStart, Proc: proc,
			X: &event.Extra{Process: &event.ProcessInfo{Index: proc, ParentProc: parent, ExecOf: -1, ForkID: fork}}}}
	}
	s.sendDirect(batch{proc: 0, evs: start(0, -1, 0)})
	s.sendDirect(batch{proc: 0, evs: []event.Event{{Kind: event.Fork, Proc: 0, Aux: 9}}})
	ran := make(chan bool, 1)
	s.sendAfter(0, nil, func(*heap.Session) []event.Event {
		buf := make([]byte, 1<<16)
		ran <- strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*sink).run(")
		return nil
	})
	s.sendDirect(batch{proc: 0, evs: []event.Event{{Kind: event.Alloc, Fn: event.Malloc, Proc: 0, Addr: 64, Size: 8}}, plain: true})
	// Once the sink's goroutine took the queue and let the role go, the
	// function waits with the paused parent, and the child's pipeline
	// applies its start itself.
	s.mu.Lock()
	for s.busy || len(s.queue) > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
	s.sendDirect(batch{proc: 1, evs: start(1, 0, 9)})
	if onSink := <-ran; !onSink {
		t.Error("the function of a held image ran on the pipeline that released it, not on the sink's goroutine")
	}
	s.close()
	if got := s.model.Process(0).Totals.LiveBlocks; got != 1 {
		t.Errorf("the parent has %d blocks live, want the 1 allocated after its fork", got)
	}
}
