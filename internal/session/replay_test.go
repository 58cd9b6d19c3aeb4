package session

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// writeLoopTrace writes a trace of n allocations, each freed 50 later
// (the last 50 not), in small chunks: many batches to read ahead. It
// returns the events it wrote too.
func writeLoopTrace(t *testing.T, n int) (string, []event.Event) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loop.lpt")
	w, err := tracefile.CreateOptions(path, tracefile.Meta{Command: []string{"loop"}}, tracefile.Options{ChunkSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	evs := []event.Event{
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1}}},
		{Kind: event.ThreadStart, Thread: 1, Time: 1},
		{Kind: event.StackDef, Thread: 1, Stack: 1, X: &event.Extra{Frames: []uint64{0x401000, 0x402000}}},
	}
	for i := 0; i < n; i++ {
		tm := uint64(10 + 2*i)
		evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: tm, Addr: 0x10000 + uint64(i)*32, Size: 24, Stack: 1})
		if i >= 50 {
			evs = append(evs, event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: tm + 1, Addr: 0x10000 + uint64(i-50)*32, Stack: 1})
		}
	}
	if err := w.Write(evs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, evs
}

// TestLoadTraceReadsAhead: a trace replayed with its batches read ahead
// gives the model its events give applied one by one, and tells progress
// up to the file's size.
func TestLoadTraceReadsAhead(t *testing.T) {
	const n = 20000
	path, evs := writeLoopTrace(t, n)
	var last, total int64
	lt, err := loadTrace(path, nil, func(done, size int64) { last, total = done, size })
	if err != nil {
		t.Fatal(err)
	}
	seq := heap.NewSession()
	for _, ev := range evs {
		seq.Apply([]event.Event{ev})
	}
	got, want := lt.model.Procs[0].Totals, seq.Procs[0].Totals
	if got != want || got.Allocations != n || got.LiveBlocks != 50 {
		t.Errorf("read ahead: %+v\nevent by event: %+v (want %d allocations, 50 live)", got, want, n)
	}
	if total == 0 || last != total {
		t.Errorf("progress ended at %d of %d", last, total)
	}
}

// TestReadAheadStops: stopping after the first batch ends the reading
// goroutine (the reader can then be closed) instead of leaving it blocked.
func TestReadAheadStops(t *testing.T) {
	path, _ := writeLoopTrace(t, 20000)
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ahead := readAhead(r)
	b, ok := <-ahead.batches
	if !ok || b.err != nil || len(b.evs) == 0 {
		t.Fatalf("first batch: %d events, %v", len(b.evs), b.err)
	}
	done := make(chan struct{})
	go func() { ahead.stop(); ahead.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute): // a hang guard, far above any slowdown
		t.Fatal("stop did not return: the reading goroutine is stuck")
	}
}
