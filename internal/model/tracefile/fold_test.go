package tracefile

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// TestFoldedEventsRoundTrip: late allocations (Addr2 holds their time)
// and aggregates of folded pairs come back exactly.
func TestFoldedEventsRoundTrip(t *testing.T) {
	evs := []event.Event{
		{Kind: event.StackDef, Stack: 1, Thread: 7, Time: 100, X: &event.Extra{Frames: []uint64{0x401000, 0x402000}}},
		{Kind: event.Alloc, Fn: event.Malloc, Stack: 1, Thread: 7, Time: 200, Addr: 0x5000, Size: 32},
		{Kind: event.Alloc, Fn: event.New, Stack: 1, Thread: 7, Time: 300, Addr: 0x6000, Size: 48, Addr2: 150},
		{Kind: event.Agg, Fn: event.Malloc, Stack: 1, Thread: 7, Time: 400, Aux: 2 | uint64(event.FreeFn)<<32,
			Addr: 123456, Size: 7890123, Addr2: 4567},
		{Kind: event.Free, Fn: event.Delete, Thread: 7, Time: 500, Addr: 0x6000},
		// The compact ways (version 7): the free's function predicted,
		// or not; no free stack; no temporaries; and one the compact
		// way cannot hold.
		{Kind: event.Agg, Fn: event.Malloc, Stack: 1, Thread: 7, Time: 600, Aux: uint64(event.FreeFn) << 32, Addr: 3, Size: 96},
		{Kind: event.Agg, Fn: event.New, Stack: 0, Thread: 7, Time: 600, Aux: 9 | uint64(event.FreeFn)<<32, Addr: 1, Size: 8, Addr2: 1},
		{Kind: event.Agg, Fn: event.NewArray, Stack: 1, Thread: 7, Time: 700, Aux: uint64(event.DeleteArray) << 32, Addr: 70000, Size: 1 << 40},
		{Kind: event.Agg, Fn: event.Malloc, Stack: 1, Thread: 7, Time: 800, Aux: 1 << 50, Addr: 2, Size: 16},
	}
	var b bytes.Buffer
	w, err := NewWriter(&b, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(evs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, normalize(evs)) {
		for i := range evs {
			if i >= len(got) || !reflect.DeepEqual(got[i], normalize(evs)[i]) {
				t.Fatalf("event %d:\n got %+v\nwant %+v", i, at(got, i), evs[i])
			}
		}
	}
}

// TestCompactAggs: an aggregate takes a fraction of the generic coding.
func TestCompactAggs(t *testing.T) {
	ev := event.Event{Kind: event.Agg, Fn: event.Malloc, Stack: 12, Time: 400, Aux: uint64(event.FreeFn) << 32, Addr: 300, Size: 9600}
	e := newEncoder()
	e.add(&ev)
	compact := e.size()
	e.reset()
	e.addGeneric(&ev)
	if generic := e.size(); compact*3 > generic*2 {
		t.Errorf("an aggregate takes %d bytes compact, %d generic", compact, generic)
	}
}

func at(evs []event.Event, i int) any {
	if i < len(evs) {
		return evs[i]
	}
	return "(none)"
}
