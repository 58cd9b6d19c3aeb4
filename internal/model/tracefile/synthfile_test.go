package tracefile

import (
	"container/heap"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
)

// TestWriteSyntheticTrace writes a synthetic trace of
// $LEAKPATH_SYNTH_RECORDS records (default 10 million) to
// $LEAKPATH_SYNTH_TRACE, generated as it is written (never all in
// memory): one image, four threads, 2000 allocation stacks of Zipf
// popularity, short, medium and long lifetimes and 1% leaks. It is the
// big trace `leakpath ui` and `leakpath report` are measured on:
//
//	LEAKPATH_SYNTH_TRACE=/tmp/10M.lpt go test -run TestWriteSyntheticTrace ./internal/model/tracefile/
func TestWriteSyntheticTrace(t *testing.T) {
	path := os.Getenv("LEAKPATH_SYNTH_TRACE")
	if path == "" {
		t.Skip("writes a big trace only when LEAKPATH_SYNTH_TRACE names where")
	}
	n := 10_000_000
	if s := os.Getenv("LEAKPATH_SYNTH_RECORDS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 100 {
			t.Fatalf("LEAKPATH_SYNTH_RECORDS=%q: want a number of at least 100", s)
		}
	}
	w, err := Create(path, Meta{Command: []string{"/usr/bin/synthprog"}, Created: time.Now().UTC(), Tool: "leakpath synthetic"})
	if err != nil {
		t.Fatal(err)
	}
	allocs, frees := writeSynth(t, w, n)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events, size := w.Stats()
	t.Logf("%s: %d records (%d allocations, %d frees), %.1f MB", path, events, allocs, frees, float64(size)/1e6)
	if events != int64(n) {
		t.Errorf("%d records written, want %d", events, n)
	}
}

// writeSynth writes n events of a synthetic program to w.
func writeSynth(t *testing.T, w *Writer, n int) (allocs, frees int) {
	r := rand.New(rand.NewPCG(7, 11))
	const nStacks, nFuncs = 2000, 3000
	const bias = 0x555555554000
	zipf := rand.NewZipf(r, 1.1, 8, nStacks-1)
	type stack struct {
		fn       event.Fn
		size     uint64
		lifetime float64 // mean, in events; 0: leaked
		frames   []uint64
		defined  bool
	}
	stacks := make([]stack, nStacks)
	for i := range stacks {
		s := &stacks[i]
		s.fn = []event.Fn{event.Malloc, event.Malloc, event.New, event.Calloc}[r.IntN(4)]
		s.size = uint64(8<<r.IntN(9)) + uint64(r.IntN(64))
		switch x := r.IntN(100); {
		case x < 55:
			s.lifetime = 6
		case x < 85:
			s.lifetime = 400
		case x < 99:
			s.lifetime = 40000
		}
		// Paths in a call tree: callers are shared.
		depth := 6 + r.IntN(12)
		s.frames = make([]uint64, depth)
		node := 0
		for d := depth - 1; d >= 0; d-- {
			node = (node*7 + 1 + r.IntN(3+d*2)) % nFuncs
			s.frames[d] = bias + 0x2000 + uint64(node)*0x40 + uint64(d)
		}
	}
	tids := []int32{5001, 5002, 5003, 5004}
	t0 := uint64(1_000_000_000)
	now := t0
	var buf []event.Event
	written := 0
	emit := func(ev event.Event) {
		now += 500 + uint64(r.IntN(1500))
		ev.Time = now
		if ev.Thread == 0 {
			ev.Thread = tids[0]
		}
		buf = append(buf, ev)
		written++
		if len(buf) == 4096 {
			if err := w.Write(buf); err != nil {
				t.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	info := event.ProcessInfo{PID: 5001, PPID: 1, ParentProc: -1, ExecOf: -1, Argv: []string{"/usr/bin/synthprog"}, Exe: "/usr/bin/synthprog"}
	emit(event.Event{Kind: event.ProcessStart, X: &event.Extra{Process: &info}})
	emit(event.Event{Kind: event.Clock, X: &event.Extra{Clock: &event.ClockInfo{Ticks: now, Mono: 123456789, Real: 1700000000e9, TicksPerSec: 2.9e9}}})
	emit(event.Event{Kind: event.ModuleLoad, X: &event.Extra{Module: &event.Module{ID: 1, Path: "/usr/bin/synthprog", Bias: bias,
		Segments: []event.Segment{{Vaddr: 0, Memsz: 0x2000, Flags: 4}, {Vaddr: 0x2000, Memsz: 0x80000, Flags: 5, Offset: 0x2000}}}}})
	for _, tid := range tids {
		emit(event.Event{Kind: event.ThreadStart, Thread: tid, Addr: 0x7ffff7d8a740 + uint64(tid)<<20})
	}
	var due dueHeap
	next := uint64(0x5555555a0000)
	// One event is kept for the end of the process.
	for step := 0; written < n-1; step++ {
		if len(due) > 0 && due[0].at <= step {
			d := heap.Pop(&due).(dueFree)
			emit(event.Event{Kind: event.Free, Fn: d.fn, Addr: d.addr, Thread: tids[d.arena]})
			frees++
			continue
		}
		id := int(zipf.Uint64())
		s := &stacks[id]
		if !s.defined {
			s.defined = true
			emit(event.Event{Kind: event.StackDef, Stack: uint32(id + 1), X: &event.Extra{Frames: s.frames}})
			if written >= n-1 {
				break
			}
		}
		th := r.IntN(len(tids))
		addr := next + 16
		next += (s.size + 8 + 15) &^ 15
		emit(event.Event{Kind: event.Alloc, Fn: s.fn, Stack: uint32(id + 1), Addr: addr, Size: s.size, Thread: tids[th]})
		allocs++
		if s.lifetime > 0 {
			heap.Push(&due, dueFree{at: step + int(r.ExpFloat64()*s.lifetime) + 1, addr: addr, arena: th, fn: freeFnFor(s.fn)})
		}
	}
	info.Exited = true
	emit(event.Event{Kind: event.ProcessEnd, X: &event.Extra{Process: &info}})
	if len(buf) > 0 {
		if err := w.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	return allocs, frees
}
