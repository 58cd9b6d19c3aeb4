package collect

import (
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// traceEvents returns the events of the trace named by $LPT_FILE and its
// time shift, or skips.
func traceEvents(b *testing.B) ([]event.Event, uint) {
	batches, shift := testfixture.TraceBatches(b, batchEvents)
	var evs []event.Event
	for _, batch := range batches {
		evs = append(evs, batch...)
	}
	return evs, shift
}

// BenchmarkSinkStages is what the sink does per event of a real trace
// (LPT_FILE=x.lpt go test -bench SinkStages): the model update, the trace
// encoding (on the sink's goroutine, or aside: on one of its own) and the
// trace with its compression (on the writer's), in CPU time per event. The events come in batches
// of batchEvents copied in first, as the pipelines hand them over.
func BenchmarkSinkStages(b *testing.B) {
	evs, shift := traceEvents(b)
	stages := []struct {
		name         string
		model, trace bool
		compression  tracefile.Compression
		encode       tracefile.EncodeOn
	}{
		{"model", true, false, 0, 0},
		{"trace-fastest", false, true, tracefile.CompressFastest, tracefile.EncodeInWrite},
		{"trace-fastest-aside", false, true, tracefile.CompressFastest, tracefile.EncodeAside},
		{"trace-default", false, true, tracefile.CompressDefault, tracefile.EncodeInWrite},
		{"both", true, true, tracefile.CompressFastest, tracefile.EncodeInWrite},
		{"both-aside", true, true, tracefile.CompressFastest, tracefile.EncodeAside},
	}
	for _, st := range stages {
		b.Run(st.name, func(b *testing.B) {
			batch := make([]event.Event, batchEvents)
			runtime.GC()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t0, p0 := testfixture.ThreadCPU()
			for b.Loop() {
				m := heap.NewSession()
				var w *tracefile.Writer
				if st.trace {
					var err error
					w, err = tracefile.NewWriterOptions(io.Discard, tracefile.Meta{}, tracefile.Options{Compression: st.compression, TimeShift: shift, Encode: st.encode})
					if err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; i < len(evs); i += len(batch) {
					n := copy(batch, evs[i:])
					if st.model {
						m.Apply(batch[:n])
					}
					if w != nil {
						if err := w.Write(batch[:n]); err != nil {
							b.Fatal(err)
						}
					}
				}
				if w != nil {
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
				}
			}
			t1, p1 := testfixture.ThreadCPU()
			n := float64(len(evs)) * float64(b.N)
			b.ReportMetric(float64(t1-t0)/n, "sink-cpu-ns/event")
			b.ReportMetric(float64(p1-p0)/n, "cpu-ns/event")
		})
	}
}

// reuse returns a batch of free, or a new one if there is none.
func reuse(free *[][]event.Event) []event.Event {
	if k := len(*free); k > 0 {
		out := (*free)[k-1]
		*free = (*free)[:k-1]
		return out
	}
	return make([]event.Event, 0, batchEvents)
}

// BenchmarkMerge is the pipeline's merge of a ring's events (a thread
// that records nearly everything, another nothing) in drains of 1,024,
// taken in order 8,192 events behind (the 2 ms of lateness at the
// long-lived loop's rate; copies wait as long again, as the pipeline's
// do), into batches of batchEvents that are reused.
func BenchmarkMerge(b *testing.B) {
	const drain, behind = 1024, 8192
	evs := make([]event.Event, 64*drain)
	for i := range evs {
		evs[i] = event.Event{Kind: event.Alloc, Time: uint64(10 + 3*i), Addr: uint64(i)}
	}
	var free [][]event.Event
	m := merger{fresh: func() []event.Event { return reuse(&free) }, send: func(out []event.Event, _ bool) { free = append(free, out[:0]) }, age: 3 * behind}
	for b.Loop() {
		// Times start over: so does the merger, whose rings never go
		// back in time.
		m.rings, m.latest = m.rings[:0], 0
		for i := 0; i < len(evs); i += drain {
			q := m.Buffer(0)
			from := len(*q)
			*q = append(*q, evs[i:i+drain]...)
			m.Filled(0, from)
			m.take(evs[max(i-behind, 0)].Time, false)
			m.sendOut()
		}
		if out := m.takeAll(); len(out) > 0 {
			m.send(out, false)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
}

// BenchmarkMergeFile is the merge of a real trace's events
// (LPT_FILE=x.lpt), each thread's into a ring of its own, drained in
// turns of 1,024 events and taken 8,192 events behind, copies waiting as
// long again: with several threads at once (bench/workloads/longlived.c
// with 4), the events of two rings alternate a few at a time.
func BenchmarkMergeFile(b *testing.B) {
	const drain, behind = 1024, 8192
	evs, _ := traceEvents(b)
	if len(evs) < 2*behind {
		b.Skip("a trace of fewer than", 2*behind, "events")
	}
	// The trace's times are coarse (tracefile.Options.TimeShift): each
	// event is dated by its place instead, which merging must give back.
	for i := range evs {
		evs[i].Time = uint64(10 + i)
	}
	rings := map[int32]int{}
	// parts[w][r]: the events of window w for ring r.
	var parts [][][]event.Event
	for i := 0; i < len(evs); i += drain {
		var w [][]event.Event
		for _, ev := range evs[i:min(i+drain, len(evs))] {
			r, ok := rings[ev.Thread]
			if !ok {
				r = len(rings)
				rings[ev.Thread] = r
			}
			for len(w) <= r {
				w = append(w, nil)
			}
			w[r] = append(w[r], ev)
		}
		parts = append(parts, w)
	}
	var free [][]event.Event
	// Stack definitions take the time of their ring's event before.
	var last uint64
	took := 0
	m := merger{fresh: func() []event.Event { return reuse(&free) }, send: func(out []event.Event, _ bool) {
		for i := range out {
			if out[i].Kind != event.StackDef {
				if out[i].Time <= last {
					b.Fatalf("event %d at %d after one at %d", took+i, out[i].Time, last)
				}
				last = out[i].Time
			}
		}
		took += len(out)
		free = append(free, out[:0])
	}, age: behind}
	// The time merging takes, apart from queueing the events.
	var merging time.Duration
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, _ := testfixture.ThreadCPU()
	for b.Loop() {
		m.rings, m.latest, last, took = m.rings[:0], 0, 0, 0
		for w, part := range parts {
			for r, p := range part {
				if len(p) > 0 {
					m.add(r, p)
				}
			}
			start := time.Now()
			m.take(evs[max(w*drain-behind, 0)].Time, false)
			m.sendOut()
			merging += time.Since(start)
		}
		start := time.Now()
		if out := m.takeAll(); len(out) > 0 {
			m.send(out, false)
		}
		merging += time.Since(start)
		if took != len(evs) {
			b.Fatalf("%d events came out of %d", took, len(evs))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
	t1, _ := testfixture.ThreadCPU()
	b.ReportMetric(float64(merging.Nanoseconds())/float64(b.N)/float64(len(evs)), "take-ns/event")
	b.ReportMetric(float64(t1-t0)/float64(b.N)/float64(len(evs)), "cpu-ns/event")
	b.ReportMetric(float64(len(rings)), "rings")
}
