package tracefile

import (
	"bytes"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// The fuzz targets reuse one encoder and decoder, as Writer and Reader
// do from chunk to chunk (and making them for each input is slow).
var (
	fuzzEnc = newEncoder()
	fuzzDec = newDecoder()
)

// encodeChunk encodes evs as one chunk payload.
func encodeChunk(t testing.TB, evs []event.Event) []byte {
	e := fuzzEnc
	e.reset()
	e.dual, e.timeMode = true, byte(len(evs)>>1&1)*timeEMA
	for i := range evs {
		if err := e.add(&evs[i]); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	return appendPayload(nil, &e.s, e.alt, e.timeMode, byte(len(evs)&1)*timeEMA)
}

// decodeChunk decodes a whole chunk payload.
func decodeChunk(p []byte) ([]event.Event, error) {
	d := fuzzDec
	if err := d.reset(p); err != nil {
		return nil, err
	}
	var out []event.Event
	for !d.done() {
		out = d.next(out, len(out)+1000)
		if err := d.err(); err != nil {
			return out, err
		}
	}
	return out, d.finish()
}

func FuzzChunk(f *testing.F) {
	g := newGen(11)
	for _, n := range []int{0, 1, 2, 5, 20, 100} {
		f.Add(encodeChunk(f, g.events(n)))
	}
	f.Add(encodeChunk(f, synthStream(2, 200, 50)))
	// The extra parts of the later format versions: a scan, a root cause.
	f.Add(encodeChunk(f, []event.Event{
		{Kind: event.Scan, Time: 5, X: &event.Extra{Scan: &event.ScanInfo{Live: true, PauseNs: 9,
			Blocks: []event.ScannedBlock{{Addr: 0x1000, Size: 8, Kind: event.Indirect, Owner: 0x2000}}}}},
		{Kind: event.RootCause, Stack: 3, Time: 6, X: &event.Extra{RootCause: &event.RootCauseInfo{Status: event.RootCauseFound,
			Traced: 4, Freed: 3, Leaked: 1, Functions: []uint64{0x401000}, Branches: []event.RootBranch{{Addr: 0x401010, To: 0x401020, LeaksWhenTaken: true}}}}},
	}))
	// Version 6: a typed scan.
	f.Add(encodeChunk(f, []event.Event{{Kind: event.Scan, Time: 7, X: &event.Extra{Scan: typedScan()}}}))
	// Version 5: scope markers, a name coded in full then by reference.
	f.Add(encodeChunk(f, []event.Event{
		{Kind: event.ScopeBegin, Thread: 7, Time: 10, Aux: 1, X: &event.Extra{Text: "parse"}},
		{Kind: event.ScopeBegin, Thread: 7, Time: 11, Aux: 2, X: &event.Extra{Text: "parse"}},
		{Kind: event.ScopeEnd, Thread: 7, Time: 12, Aux: 2},
		{Kind: event.ScopeEnd, Thread: 7, Time: 13, Aux: 1},
	}))
	// Version 6: stacks sharing their callers with earlier ones.
	f.Add(encodeChunk(f, sharedCallerStacks(40)))
	// Version 10: allocations and frees whose time and stack are the
	// predicted ones.
	f.Add(encodeChunk(f, loopEvents(60)))
	// Version 11: threads taking turns, each with its own predictions;
	// more threads than the recently-used list holds.
	f.Add(encodeChunk(f, loopThreads(4, 40)))
	f.Add(encodeChunk(f, loopThreads(11, 12)))
	f.Fuzz(func(t *testing.T, p []byte) {
		evs, err := decodeChunk(p)
		if err != nil {
			return
		}
		// What decodes must encode again, to a payload that decodes to
		// the same events (compared as payloads: NaN clocks).
		p1 := encodeChunk(t, evs)
		evs2, err := decodeChunk(p1)
		if err != nil {
			t.Fatalf("re-encoded events do not decode: %v", err)
		}
		if len(evs2) != len(evs) {
			t.Fatalf("re-encoded %d events, decoded %d", len(evs), len(evs2))
		}
		if p2 := encodeChunk(t, evs2); !bytes.Equal(p1, p2) {
			t.Fatalf("decode(encode(events)) differs from events")
		}
	})
}

func FuzzReader(f *testing.F) {
	g := newGen(12)
	for _, n := range []int{0, 1, 30, 60} {
		var b bytes.Buffer
		// The last with coarse times (late allocations' and scope
		// markers' times are coded apart then).
		w, err := NewWriterOptions(&b, testMeta, Options{ChunkSize: 200, Sync: true, TimeShift: uint(n / 60 * 6)})
		if err != nil {
			f.Fatal(err)
		}
		w.Write(g.events(n))
		w.Close()
		f.Add(b.Bytes())
		f.Add(b.Bytes()[:b.Len()/2])
	}
	f.Add([]byte{})
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		defer r.Close()
		r.Meta()
		buf := make([]event.Event, 0, 64)
		total := 0
		for total < 1<<22 {
			buf, err = r.Next(buf)
			total += len(buf)
			if err != nil {
				break
			}
			if len(buf) == 0 {
				t.Fatal("Next returned no events and no error")
			}
		}
		// The error sticks.
		if err != nil {
			if _, err2 := r.Next(buf); err2 != err {
				t.Fatalf("second error %v, first %v", err2, err)
			}
		}
	})
}
