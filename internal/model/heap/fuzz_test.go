package heap

import (
	"bytes"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// FuzzApply feeds the model whatever a trace file decodes to, as `leakpath
// report` does: a corrupt trace may make the reader fail, never the model
// panic or grow without bound.
func FuzzApply(f *testing.F) {
	forked := append(benchHead(2),
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: 20, Addr: 0x1000, Size: 24, Stack: 1},
		event.Event{Kind: event.ProcessStart, Proc: 1, Time: 30, X: &event.Extra{Process: &event.ProcessInfo{Index: 1, ParentProc: 0, ForkID: 7, ExecOf: -1}}},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Proc: 1, Thread: 2, Time: 40, Addr: 0x1000, Stack: 2},
		event.Event{Kind: event.ProcessStart, Proc: 2, Time: 50, X: &event.Extra{Process: &event.ProcessInfo{Index: 2, ParentProc: -1, ExecOf: 1}}},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: 60, Addr: 0x1000, Stack: 2},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: 1, Time: 70, Addr: 0x1000, Stack: 2},
	)
	for _, evs := range [][]event.Event{loopEvents(200), forked} {
		var b bytes.Buffer
		w, err := tracefile.NewWriterOptions(&b, tracefile.Meta{Command: []string{"prog"}}, tracefile.Options{ChunkSize: 512, Sync: true})
		if err != nil {
			f.Fatal(err)
		}
		if err := w.Write(evs); err != nil {
			f.Fatal(err)
		}
		if err := w.Close(); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := tracefile.NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		defer r.Close()
		s := NewSession()
		var buf []event.Event
		for total := 0; total < 1<<20; total += len(buf) {
			buf, err = r.Next(buf)
			s.Apply(buf)
			if err != nil {
				break
			}
		}
		if len(s.Procs) > event.MaxImages {
			t.Fatalf("%d process images from %d bytes", len(s.Procs), len(data))
		}
	})
}
