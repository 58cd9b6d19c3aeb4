package tracefile

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// fullWriter takes writes until limit bytes, then fails as a full disk
// does: the part that fits, and ENOSPC.
type fullWriter struct {
	buf   bytes.Buffer
	limit int
}

func (w *fullWriter) Write(b []byte) (int, error) {
	room := w.limit - w.buf.Len()
	if room >= len(b) {
		return w.buf.Write(b)
	}
	w.buf.Write(b[:max(room, 0)])
	return max(room, 0), syscall.ENOSPC
}

// TestKeptAfterAFullDisk: once a write fails, Kept tells how many events
// the whole chunks before it hold and the latest time among them, and
// those bytes read back as a trace cut short with exactly those events.
func TestKeptAfterAFullDisk(t *testing.T) {
	g := newGen(7)
	var all []event.Event
	batches := make([][]event.Event, 40)
	for i := range batches {
		batches[i] = g.events(200)
		all = append(all, batches[i]...)
	}
	// Where the limit falls: the size of the trace of the first 25
	// batches, each one chunk, plus half a chunk.
	var whole bytes.Buffer
	w, err := NewWriterOptions(&whole, Meta{}, Options{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, b := range batches {
		w.Write(b)
		w.Flush()
		sizes = append(sizes, whole.Len())
	}
	limit := sizes[24] + (sizes[25]-sizes[24])/2

	fw := &fullWriter{limit: limit}
	w, err = NewWriterOptions(fw, Meta{}, Options{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for _, b := range batches {
		if werr = w.Write(b); werr == nil {
			werr = w.Flush()
		}
		if werr != nil {
			break
		}
	}
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("write error %v, want ENOSPC", werr)
	}
	events, _, last := w.Kept()
	var wantLast uint64
	for _, ev := range all[:25*200] {
		wantLast = max(wantLast, ev.Time)
	}
	if events != 25*200 || last != wantLast {
		t.Errorf("Kept: %d events up to time %d; want %d up to %d", events, last, 25*200, wantLast)
	}
	got, rerr := readAll(t, fw.buf.Bytes()) // with the part of the chunk that did not fit
	if !errors.Is(rerr, ErrTruncated) || len(got) != int(events) {
		t.Errorf("the kept bytes read back as %d events, %v; want %d, cut short", len(got), rerr, events)
	}
}
