package tracefile

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/event"
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

func at(evs []event.Event, i int) any {
	if i < len(evs) {
		return evs[i]
	}
	return "(none)"
}
