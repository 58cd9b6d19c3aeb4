package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func writeTrace(t testing.TB, evs []event.Event, opts Options, batch int) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriterOptions(&b, testMeta, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(evs); i += batch {
		if err := w.Write(evs[i:min(i+batch, len(evs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func diffEvents(t *testing.T, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d events, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, fmtEvent(got[i]), fmtEvent(want[i]))
		}
	}
}

func fmtEvent(ev event.Event) string {
	s := fmt.Sprintf("%+v", ev)
	if ev.ModuleInfo() != nil {
		s += fmt.Sprintf(" module=%+v", *ev.ModuleInfo())
	}
	if ev.ProcessInfo() != nil {
		s += fmt.Sprintf(" process=%+v", *ev.ProcessInfo())
	}
	if ev.ClockInfo() != nil {
		s += fmt.Sprintf(" clock=%+v", *ev.ClockInfo())
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		batch int
	}{
		{"default", Options{}, 1000},
		{"in-write", Options{Encode: EncodeInWrite}, 1000},
		{"aside", Options{Encode: EncodeAside, ChunkSize: 30000}, 5000},
		{"small-chunks", Options{ChunkSize: 2000}, 7},
		{"small-chunks-aside", Options{ChunkSize: 2000, Encode: EncodeAside}, 7},
		{"sync", Options{ChunkSize: 10000, Sync: true}, 1},
		{"zstd-default", Options{Compression: CompressDefault, ChunkSize: 50000}, 333},
		{"zstd-better", Options{Compression: CompressBetter}, 5000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := newGen(uint64(len(tc.name))).events(20000)
			want := normalize(evs)
			data := writeTrace(t, evs, tc.opts, tc.batch)
			got, err := readAll(t, data)
			if err != nil {
				t.Fatal(err)
			}
			diffEvents(t, got, want)
		})
	}
}

// TestRoundTripKinds checks every kind separately, so that a kind whose
// encoding is broken is named.
func TestRoundTripKinds(t *testing.T) {
	g := newGen(7)
	all := g.events(50000)
	scope := func(k event.Kind) bool { return k == event.ScopeBegin || k == event.ScopeEnd }
	var kinds []event.Kind
	for k := range event.Clock + 1 {
		kinds = append(kinds, k)
	}
	for _, k := range append(kinds, event.ScopeBegin, event.ScopeEnd) {
		var evs []event.Event
		for _, ev := range all {
			if ev.Kind == k || k == 0 && ev.Kind > event.Clock && !scope(ev.Kind) {
				evs = append(evs, ev)
			}
		}
		if len(evs) < 10 {
			t.Fatalf("kind %v: only %d events", k, len(evs))
		}
		got, err := readAll(t, writeTrace(t, evs, Options{ChunkSize: 3000}, 100))
		if err != nil {
			t.Fatalf("kind %v: %v", k, err)
		}
		diffEvents(t, got, normalize(evs))
	}
}

func TestFileAndMeta(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lpt")
	w, err := Create(path, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	evs := newGen(1).events(1000)
	if err := w.Write(evs); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	n, size := w.Stats()
	if fi, err := os.Stat(path); err != nil || fi.Size() != size || n != 1000 {
		t.Fatalf("Stats = %d, %d; file %v, %v", n, size, fi.Size(), err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Write(evs); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if m := r.Meta(); !reflect.DeepEqual(m, testMeta) {
		t.Errorf("Meta = %+v, want %+v", m, testMeta)
	}
	if r.Version() != Version {
		t.Errorf("Version = %d", r.Version())
	}
}

func TestEmptyTrace(t *testing.T) {
	data := writeTrace(t, nil, Options{}, 1)
	got, err := readAll(t, data)
	if err != nil || len(got) != 0 {
		t.Fatalf("got %d events, %v", len(got), err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeTrace(t, newGen(1).events(10), Options{}, 10)
	future := bytes.Clone(good)
	future[8] = Version + 1
	for _, tc := range []struct {
		name string
		data []byte
		is   error
		want string
	}{
		{"empty", nil, ErrNotTrace, "empty file"},
		{"text", []byte("hello world, this is not a trace"), ErrNotTrace, "not a leakpath trace"},
		{"short-text", []byte("LEAKX"), ErrNotTrace, "not a leakpath trace"},
		{"magic-only", []byte("LEAKPATH"), ErrTruncated, "truncated at byte 0"},
		{"future", future, ErrNewerVersion, fmt.Sprintf("format version %d", Version+1)},
	} {
		path := filepath.Join(dir, tc.name)
		if err := os.WriteFile(path, tc.data, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: Open: %v; want %v containing %q and the path", tc.name, err, tc.is, tc.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Open of a missing file: %v", err)
	}
}

// boundaries writes evs in batches, flushing after each, and returns the
// trace and, for each chunk end, its file offset and the events before it.
func boundaries(t *testing.T, evs []event.Event, batch int) (data []byte, offs []int64, counts []int) {
	var b bytes.Buffer
	w, err := NewWriterOptions(&b, testMeta, Options{Sync: true, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, size := w.Stats()
	offs, counts = append(offs, size), append(counts, 0)
	for i := 0; i < len(evs); i += batch {
		w.Write(evs[i:min(i+batch, len(evs))])
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		n, size := w.Stats()
		offs, counts = append(offs, size), append(counts, int(n))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), offs, counts
}

func TestTruncated(t *testing.T) {
	evs := newGen(3).events(60)
	want := normalize(evs)
	data, offs, counts := boundaries(t, evs, 13)
	for l := 0; l < len(data); l++ {
		got, err := readAll(t, data[:l])
		if l < int(offs[0]) {
			if l == 0 && !errors.Is(err, ErrNotTrace) || l > 0 && !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut at %d (in the header): %v", l, err)
			}
			continue
		}
		k := 0
		for k+1 < len(offs) && offs[k+1] <= int64(l) {
			k++
		}
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrTruncated) || ce.Offset != offs[k] {
			t.Fatalf("cut at %d: err %v, want ErrTruncated at %d", l, err, offs[k])
		}
		if !reflect.DeepEqual(got, want[:counts[k]]) && !(len(got) == 0 && counts[k] == 0) {
			t.Fatalf("cut at %d: got %d events, want %d", l, len(got), counts[k])
		}
	}
	got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, want)
}

func TestFlippedByte(t *testing.T) {
	evs := newGen(4).events(200)
	want := normalize(evs)
	data, offs, counts := boundaries(t, evs, 50)
	for i := range data {
		for _, x := range []byte{1, 0xa0} {
			bad := bytes.Clone(data)
			bad[i] ^= x
			got, err := readAll(t, bad)
			if i < int(offs[0]) {
				if err == nil {
					t.Fatalf("flip %#x at %d in the header: no error", x, i)
				}
				continue
			}
			k := 0
			for k+1 < len(offs) && offs[k+1] <= int64(i) {
				k++
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Offset != offs[k] || errors.Is(err, ErrTruncated) && i < len(data)-chunkHeaderSize {
				t.Fatalf("flip %#x at %d: err %v, want a CorruptError at %d", x, i, err, offs[k])
			}
			if !reflect.DeepEqual(got, want[:counts[k]]) && !(len(got) == 0 && counts[k] == 0) {
				t.Fatalf("flip at %d: got %d events, want %d", i, len(got), counts[k])
			}
		}
	}
}

// TestNoRetention mutates every slice after Write and checks that the
// trace holds the values at the time of Write.
func TestNoRetention(t *testing.T) {
	for _, mode := range writeModes {
		evs := newGen(5).events(5000)
		want := normalize(evs)
		var b bytes.Buffer
		mode.ChunkSize = 4000
		w, err := NewWriterOptions(&b, testMeta, mode)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(evs); i += 100 {
			batch := evs[i : i+100]
			if err := w.Write(batch); err != nil {
				t.Fatal(err)
			}
			for j := range batch {
				ev := &batch[j]
				for k := range ev.Frames() {
					ev.Frames()[k] = 0xdead
				}
				if m := ev.ModuleInfo(); m != nil {
					for k := range m.BuildID {
						m.BuildID[k] = 0xee
					}
					for k := range m.Segments {
						m.Segments[k].Vaddr = 0xbad
					}
					m.Path = "mutated"
				}
				if p := ev.ProcessInfo(); p != nil {
					for k := range p.Argv {
						p.Argv[k] = "mutated"
					}
					p.PID = -7
				}
				if c := ev.ClockInfo(); c != nil {
					c.Ticks = 0xbad
				}
				if st := ev.StaleInfo(); st != nil {
					for k := range st.Referenced {
						st.Referenced[k] = 0xbad
					}
				}
				*ev = event.Event{Kind: event.Free, Addr: 1}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		diffEvents(t, got, want)
	}
}

func TestLimits(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	ok := event.Event{Kind: event.Alloc, Addr: 16, Size: 1, Time: 5}
	bads := []event.Event{
		{Kind: event.StackDef, Stack: 1, X: &event.Extra{Frames: make([]uint64, MaxFrames+1)}},
		{Kind: event.Exec, X: &event.Extra{Text: strings.Repeat("x", MaxString+1)}},
		{Kind: event.ModuleLoad, X: &event.Extra{Module: &event.Module{Segments: make([]event.Segment, MaxSegments+1)}}},
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{Argv: make([]string, MaxArgs+1)}}},
		{Kind: event.StackDef, Stack: event.MaxStackID, X: &event.Extra{Frames: []uint64{1}}},
		{Kind: event.Alloc, Proc: event.MaxImages, Addr: 32, Size: 1, Time: 6},
	}
	for _, bad := range bads {
		if err := w.Write([]event.Event{ok, bad, ok}); err == nil || !strings.Contains(err.Error(), "event 1 of the batch") {
			t.Errorf("%v beyond the limits: %v", bad.Kind, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, b.Bytes())
	if err != nil || len(got) != len(bads) {
		t.Fatalf("got %d events (%v), want the %d good ones (each batch's first)", len(got), err, len(bads))
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(b), nil
}

// writeModes are the ways a Writer can run: each goroutine arrangement.
var writeModes = []Options{{Sync: true}, {Encode: EncodeInWrite}, {Encode: EncodeAside}}

func TestWriteError(t *testing.T) {
	for _, mode := range writeModes {
		mode.ChunkSize = 1000
		w, err := NewWriterOptions(&failWriter{n: 2}, testMeta, mode)
		if err != nil {
			t.Fatal(err)
		}
		evs := newGen(1).events(10000)
		for i := 0; i < len(evs) && err == nil; i += 100 {
			err = w.Write(evs[i : i+100])
		}
		if err == nil {
			err = w.Flush()
		}
		if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("%+v: %v", mode, err)
		}
		if cerr := w.Close(); cerr == nil {
			t.Errorf("%+v: Close after a write error succeeded", mode)
		}
	}
}

func TestTimeShift(t *testing.T) {
	evs := newGen(9).events(20000)
	const shift = 10
	want := normalize(evs)
	late := 0
	for i := range want {
		if w := &want[i]; w.Kind == event.Alloc && w.Addr2>>shift != 0 && w.Addr2 <= w.Time {
			w.Addr2 = w.Addr2 >> shift << shift // its own time, as coarse
			late++
		}
		// Scope markers coded as such keep their exact times (an end
		// without a depth is coded as a generic event).
		if w := &want[i]; !scopeMarker(w) || w.Kind == event.ScopeEnd && w.Aux == 0 {
			want[i].Time = want[i].Time >> shift << shift
		}
	}
	if late == 0 {
		t.Fatal("the generator made no late allocation")
	}
	var b bytes.Buffer
	w, err := NewWriterOptions(&b, testMeta, Options{TimeShift: shift, ChunkSize: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(evs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if r.TimeShift() != shift {
		t.Errorf("TimeShift = %d", r.TimeShift())
	}
	got, err := readAll(t, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, want)
	if _, err := NewWriterOptions(&b, testMeta, Options{TimeShift: 33}); err == nil {
		t.Error("TimeShift 33 accepted")
	}
}

// TestRoundTripScan writes scans of every shape (a snapshot's, an exit's
// in two parts, a failed one) and reads them back whole.
func TestRoundTripScan(t *testing.T) {
	blocks := func(n int, base uint64) []event.ScannedBlock {
		out := make([]event.ScannedBlock, n)
		for i := range out {
			out[i] = event.ScannedBlock{Addr: base + uint64(i)*48, Size: uint64(8 + i%40), Kind: event.LeakKind(i % int(event.NumLeakKinds))}
			if out[i].Kind == event.Indirect {
				out[i].Owner = base + uint64(i/2)*48 // before and after it
			}
		}
		return out
	}
	scans := []*event.ScanInfo{
		{Blocks: blocks(300, 0x5555_0000), Live: true, PauseNs: 12345, RootBytes: 1 << 20, HeapBytes: 14400},
		{Blocks: blocks(100, 0x7f00_0000), Suppressions: "leak:libfoo\n", PauseNs: 99},
		{Blocks: blocks(50, 0x7f10_0000), Part: 1},
		{Error: "ptrace: operation not permitted", Live: true},
		typedScan(),
		{Blocks: typedScan().Blocks, Typed: true, Part: 1},
	}
	var evs []event.Event
	for i, sc := range scans {
		evs = append(evs, event.Event{Kind: event.Scan, Proc: 1, Time: uint64(1000 + i), X: &event.Extra{Scan: sc}})
	}
	got, err := readAll(t, writeTrace(t, evs, Options{}, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events, wrote %d", len(got), len(evs))
	}
	for i, ev := range got {
		sc := ev.ScanInfo()
		if sc == nil || ev.Kind != event.Scan {
			t.Fatalf("event %d: %s, not a scan", i, fmtEvent(ev))
		}
		want := *scans[i]
		if len(want.Blocks) == 0 {
			want.Blocks = sc.Blocks[:0:0]
			if sc.Blocks == nil {
				want.Blocks = nil
			}
		}
		if !reflect.DeepEqual(*sc, want) {
			t.Errorf("scan %d:\n got %+v\nwant %+v", i, *sc, want)
		}
	}
}

// typedScan is a scan that typed its blocks (format version 6).
func typedScan() *event.ScanInfo {
	sc := &event.ScanInfo{Typed: true, Live: true,
		Types: []event.TypeDef{{Name: "shop::Widget", File: "/src/shop.h", Line: 12, Size: 48}, {Name: "char"}},
		Names: []string{"g_shop.items._M_impl._M_start", "next", "+0x18"}, TypeNs: 123456}
	for i := range 40 {
		sc.Blocks = append(sc.Blocks, event.ScannedBlock{Addr: 0x6000_0000 + uint64(i)*64, Size: 48,
			Type: uint32(i % 3), Evidence: uint8(i % event.NumEvidence), Via: uint32(i % 4), Retained: uint64(48 * (40 - i))})
		if i > 0 {
			sc.Blocks[i].Holder = 0x6000_0000 + uint64(i-1)*64
		}
	}
	sc.Blocks[5].Holder = 0x7000_0000 // after it
	return sc
}

// TestTypedScanNeedsVersion6: a typed scan in a version 5 trace is
// corruption (that version had no typed scans).
func TestTypedScanNeedsVersion6(t *testing.T) {
	data := setVersion(writeTrace(t, []event.Event{{Kind: event.Scan, Proc: 1, X: &event.Extra{Scan: typedScan()}}}, Options{}, 100), 5)
	if _, err := readAll(t, data); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a typed scan in a version 5 trace read with %v, want corruption", err)
	}
}

// TestRoundTripRootCause writes root causes and reads them back whole.
func TestRoundTripRootCause(t *testing.T) {
	infos := []*event.RootCauseInfo{
		{Status: event.RootCauseFound, Traced: 40, Freed: 31, Leaked: 9, Functions: []uint64{0x401000, 0x402000},
			Branches: []event.RootBranch{{Addr: 0x401010, To: 0x401040, LeaksWhenTaken: true}, {Addr: 0x401020, To: 0x401022}},
			WindowNs: 123456, Stops: 789, FoundAfterNs: 1500000000},
		{Status: event.RootCauseInconclusive, Traced: 3, Freed: 3, Note: "every traced execution ended the same way"},
		{Status: event.RootCauseNotTraced},
	}
	var evs []event.Event
	for i, rc := range infos {
		evs = append(evs, event.Event{Kind: event.RootCause, Proc: 0, Stack: uint32(7 + i), Time: uint64(100 + i), X: &event.Extra{RootCause: rc}})
	}
	got, err := readAll(t, writeTrace(t, evs, Options{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %d events, wrote %d", len(got), len(evs))
	}
	for i, ev := range got {
		if ev.Kind != event.RootCause || ev.Stack != evs[i].Stack || !reflect.DeepEqual(ev.RootCauseInfo(), infos[i]) {
			t.Errorf("event %d: %+v %+v, want %+v", i, ev, ev.RootCauseInfo(), infos[i])
		}
	}
}

// TestRoundTripScopes writes scope markers (the compact op and, for the
// odd ones, the generic event) across chunks and reads them back whole,
// and checks that the compact op stays smaller than the generic event.
func TestRoundTripScopes(t *testing.T) {
	var evs []event.Event
	names := []string{"parse", "load config", "x"}
	for i := range 3000 {
		ev := event.Event{Kind: event.ScopeBegin, Thread: int32(100 + i%3), Time: uint64(1000 + 7*i), Aux: uint64(1 + i%4),
			X: &event.Extra{Text: names[i%len(names)]}}
		switch i % 5 {
		case 1:
			ev.Kind, ev.X = event.ScopeEnd, nil
		case 3:
			ev.Ext().Text = fmt.Sprintf("name %d", i) // a new name each time
		case 4:
			if i%20 == 4 {
				ev.Addr = 5 // not a marker: generic
			}
		}
		evs = append(evs, ev)
	}
	data := writeTrace(t, evs, Options{ChunkSize: 4000}, 50)
	got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, normalize(evs))

	// A loop entering one scope: the name is coded once.
	var loop []event.Event
	for i := range 200 {
		loop = append(loop, event.Event{Kind: event.ScopeBegin, Time: uint64(10 * i), Aux: 1, X: &event.Extra{Text: "request handler"}},
			event.Event{Kind: event.ScopeEnd, Time: uint64(10*i + 5), Aux: 1})
	}
	e := newEncoder()
	for i := range loop {
		e.add(&loop[i])
	}
	compact := e.size()
	e.reset()
	for i := range loop {
		e.addGeneric(&loop[i])
	}
	if generic := e.size(); compact*2 > generic {
		t.Errorf("400 scope markers take %d bytes compact, %d generic", compact, generic)
	}
}

// TestOlderVersions: a trace whose header says an older version is read
// as before (frees coded only as distances back before version 7); a
// scope marker in it is corruption before version 5 (those versions had
// none), a stale epoch before version 6.
func TestOlderVersions(t *testing.T) {
	plain := newGen(3).events(2000)
	for i := range plain {
		if k := plain[i].Kind; k == event.ScopeBegin || k == event.ScopeEnd || k == event.StaleEpoch {
			plain[i].Kind = event.ThreadExit
			plain[i].X = nil
		}
	}
	marker := []event.Event{{Kind: event.ScopeBegin, Time: 5, Aux: 1, X: &event.Extra{Text: "s"}}}
	epoch := []event.Event{{Kind: event.StaleEpoch, Time: 5, X: &event.Extra{Stale: &event.StaleInfo{Base: 4096, Page: 4096, Count: 3, Referenced: []uint64{5}}}}}
	for v := 1; v < Version; v++ {
		old := func(evs []event.Event) []byte { return setVersion(writeTrace(t, evs, Options{version: v}, 100), v) }
		got, err := readAll(t, old(plain))
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if len(got) != len(plain) {
			t.Errorf("version %d: read %d events, wrote %d", v, len(got), len(plain))
		}
		if _, err := readAll(t, old(marker)); v < 5 && !errors.Is(err, ErrCorrupt) {
			t.Errorf("version %d: a scope marker read with %v, want corruption", v, err)
		}
		if _, err := readAll(t, old(epoch)); v < 6 && !errors.Is(err, ErrCorrupt) {
			t.Errorf("version %d: a stale epoch read with %v, want corruption", v, err)
		}
	}
}

// sharedCallerStacks makes n stack definitions like an interpreter's:
// deep stacks whose outer frames are one of a few chains, with 1-4 inner
// frames of their own; one in eight is a suffix of an earlier one.
func sharedCallerStacks(n int) []event.Event {
	rng := rand.New(rand.NewPCG(7, 8))
	chains := make([][]uint64, 6)
	for i := range chains {
		chains[i] = make([]uint64, 10+rng.IntN(30))
		for j := range chains[i] {
			chains[i][j] = 0x7f0000000000 + uint64(rng.IntN(1<<20))
		}
	}
	var evs []event.Event
	var defs [][]uint64
	for i := 0; i < n; i++ {
		var fr []uint64
		if i%8 == 7 && len(defs) > 0 {
			d := defs[rng.IntN(len(defs))]
			fr = slices.Clone(d[rng.IntN(len(d)):])
		} else {
			c := chains[rng.IntN(len(chains))]
			for k := 1 + rng.IntN(4); k > 0; k-- {
				fr = append(fr, 0x400000+uint64(rng.IntN(1<<16)))
			}
			fr = append(fr, c[rng.IntN(len(c)/2):]...)
		}
		defs = append(defs, fr)
		evs = append(evs, event.Event{Kind: event.StackDef, Stack: uint32(i + 1), Time: uint64(1000 + i),
			X: &event.Extra{Frames: fr}})
	}
	return evs
}

// TestSharedCallers: stacks that share their outer frames with earlier
// ones read back exactly, across chunks too, and their frames take much
// less than coded whole.
func TestSharedCallers(t *testing.T) {
	evs := sharedCallerStacks(3000)
	for _, chunk := range []int{1 << 20, 4096} {
		checkRoundTrip(t, evs, Options{ChunkSize: chunk})
	}
	// A caller may reuse an event's frames once Write returns: the
	// stacks written later still refer to the earlier ones rightly.
	var b bytes.Buffer
	w, err := NewWriterOptions(&b, testMeta, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(evs); i += 10 {
		batch := normalize(evs[i:min(i+10, len(evs))])
		if err := w.Write(batch); err != nil {
			t.Fatal(err)
		}
		for j := range batch {
			for k := range batch[j].X.Frames {
				batch[j].X.Frames[k] = 0xdead
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, normalize(evs))
	e := encodeAll(t, evs)
	shared := len(e.s[sFrames])
	e.reset()
	for i := range evs {
		e.putFrames(evs[i].Frames())
	}
	whole := len(e.s[sFrames])
	if shared*3 > whole {
		t.Errorf("frames take %d bytes coded with shared callers, %d whole", shared, whole)
	}
	t.Logf("frames: %d bytes with shared callers, %d whole", shared, whole)
}

// TestBumpAddresses: blocks carved one after another from the top of a
// glibc heap (each right after the previous one's chunk) code their
// address in one byte each, and read back exactly.
func TestBumpAddresses(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var evs []event.Event
	addr := uint64(0x555500001010)
	for i := 0; i < 5000; i++ {
		size := uint64(1 + rng.IntN(5000))
		evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Stack: uint32(1 + i%7),
			Time: uint64(100 + i), Addr: addr, Size: size})
		addr += max(32, (size+8+15)&^15)
	}
	checkRoundTrip(t, evs, Options{})
	e := encodeAll(t, evs)
	// The first address has nothing before it: coded in full.
	if n := len(e.s[sAddr]); n > len(evs)-1+binary.MaxVarintLen64 {
		t.Errorf("%d addresses carved one after another take %d bytes", len(evs), n)
	}
}

// checkRoundTrip writes evs with opts and checks they read back as written.
func checkRoundTrip(t *testing.T, evs []event.Event, opts Options) {
	t.Helper()
	got, err := readAll(t, writeTrace(t, evs, opts, 100))
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, normalize(evs))
}

// encodeAll codes evs in one chunk, for a look at its streams.
func encodeAll(t *testing.T, evs []event.Event) *encoder {
	t.Helper()
	e := newEncoder()
	for i := range evs {
		if err := e.add(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestFreesInAllocationOrder: blocks freed in the order they were
// allocated (a program tearing down a table) code about one byte each, as
// the newest-first frees of temporaries do, and read back the same.
func TestFreesInAllocationOrder(t *testing.T) {
	const n = 3000
	var evs []event.Event
	rng := uint64(7)
	for i := range n {
		rng = rng*6364136223846793005 + 1442695040888963407
		evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: uint64(i), Stack: 1, Addr: 0x10000 + rng>>40<<4, Size: 4096})
	}
	// Unique addresses, so that each free names one allocation.
	seen := map[uint64]bool{}
	var allocs []event.Event
	for _, ev := range evs {
		if !seen[ev.Addr] {
			seen[ev.Addr] = true
			allocs = append(allocs, ev)
		}
	}
	evs = allocs
	for i, a := range allocs {
		evs = append(evs, event.Event{Kind: event.Free, Fn: event.FreeFn, Time: uint64(n + i), Addr: a.Addr})
	}
	freeBytes := func(back bool) int {
		e := newEncoder()
		e.before7 = back
		for i := range allocs {
			e.add(&evs[i])
		}
		before := len(e.s[sAddr])
		for i := len(allocs); i < len(evs); i++ {
			e.add(&evs[i])
		}
		return len(e.s[sAddr]) - before
	}
	// Frees whose allocation the encoder's direct-mapped table lost code
	// their address; the others one byte.
	now, back := freeBytes(false), freeBytes(true)
	if now*10 > len(allocs)*13 || now*10 > back*7 {
		t.Errorf("%d in-order frees take %d address bytes (as distances back: %d), want ~1 each", len(allocs), now, back)
	}
	t.Logf("%d in-order frees: %d address bytes, %d as distances back", len(allocs), now, back)
	got, err := readAll(t, writeTrace(t, evs, Options{}, 512))
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].Kind != evs[i].Kind || got[i].Addr != evs[i].Addr {
			t.Fatalf("event %d read as %v %#x, written %v %#x", i, got[i].Kind, got[i].Addr, evs[i].Kind, evs[i].Addr)
		}
	}
}

// TestStackRefsFromLatestDef: version 8 codes a heap event's stack id from
// the latest StackDef's: a program meeting a new stack uses it at once, so
// with ids past 127 (two bytes plain) the stack stream halves; version 7
// reads back the same events.
func TestStackRefsFromLatestDef(t *testing.T) {
	var evs []event.Event
	for i := 0; i < 2000; i++ {
		id := uint32(1000 + i)
		evs = append(evs,
			event.Event{Kind: event.StackDef, Stack: id, X: &event.Extra{Frames: []uint64{0x401000 + uint64(i%7)*16, 0x402000, 0x403000}}},
			event.Event{Kind: event.Alloc, Fn: event.Malloc, Stack: id, Time: uint64(10 + 2*i), Addr: 0x10000 + uint64(i)*64, Size: 48},
			event.Event{Kind: event.Free, Fn: event.FreeFn, Stack: id, Time: uint64(11 + 2*i), Addr: 0x10000 + uint64(i)*64})
	}
	streams := func(v int) [numStreams][]byte {
		e := newEncoder()
		e.before7, e.before8 = v < 7, v < 8
		for i := range evs {
			if err := e.add(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		return e.s
	}
	v7, v8 := streams(7), streams(8)
	if got, was := len(v8[sStack]), len(v7[sStack]); got*10 > was*6 {
		t.Errorf("stack stream: %d bytes in version 8, %d in 7: want at most 60 %%", got, was)
	}
	for _, v := range []int{7, Version} {
		got, err := readAll(t, setVersion(writeTrace(t, evs, Options{version: v}, 1<<20), v))
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if len(got) != len(evs) {
			t.Fatalf("version %d: read %d events, wrote %d", v, len(got), len(evs))
		}
		for i := range got {
			if got[i].Stack != evs[i].Stack || got[i].Kind != evs[i].Kind {
				t.Fatalf("version %d, event %d: %v stack %d, wrote %v stack %d", v, i, got[i].Kind, got[i].Stack, evs[i].Kind, evs[i].Stack)
			}
		}
	}
}

// setVersion makes the header of trace data say format version v (and
// mends its checksum).
func setVersion(data []byte, v int) []byte {
	binary.LittleEndian.PutUint16(data[8:], uint16(v))
	n := int(binary.LittleEndian.Uint32(data[12:]))
	binary.LittleEndian.PutUint32(data[16+n:], crc32.Checksum(data[:16+n], castagnoli))
	return data
}

// TestDecodeRefusesLimits: a chunk naming a process image or defining a
// stack id past the events' limits (which no writer codes: the bytes are
// changed after) is corrupt, not events a model would make room for.
func TestDecodeRefusesLimits(t *testing.T) {
	for _, c := range []struct {
		name     string
		ev       event.Event
		from, to []byte // the limit less one, uvarint, and the limit
		want     string
	}{
		{"image", event.Event{Kind: event.Alloc, Proc: event.MaxImages - 1, Addr: 32, Size: 1, Time: 6},
			binary.AppendUvarint(nil, event.MaxImages-1), binary.AppendUvarint(nil, event.MaxImages), "process image"},
		{"stack", event.Event{Kind: event.StackDef, Stack: event.MaxStackID - 1, X: &event.Extra{Frames: []uint64{0x401000}}},
			binary.AppendUvarint(nil, event.MaxStackID-1), binary.AppendUvarint(nil, event.MaxStackID), "stack id"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := encodeChunk(t, []event.Event{c.ev})
			if got, err := decodeChunk(p); err != nil || len(got) != 1 {
				t.Fatalf("at the limit less one: %d events, %v", len(got), err)
			}
			if len(c.from) != len(c.to) || bytes.Count(p, c.from) != 1 {
				t.Fatalf("the payload %x holds %x %d times, want once (and as long as %x)", p, c.from, bytes.Count(p, c.from), c.to)
			}
			p = bytes.Replace(p, c.from, c.to, 1)
			if _, err := decodeChunk(p); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("at the limit: %v, want an error naming the %s", err, c.want)
			}
		})
	}
}

// loopEvents is what a loop makes with coarse times (shift 10): many
// events a tick; allocations from call sites that follow each other in
// the same order (4 of them) of sizes that vary, the last one's Fn
// changing now and then; frees of two alternating stacks; late
// allocations made in the tick of their record, one before, now and then
// more.
func loopEvents(n int) []event.Event {
	var evs []event.Event
	rng := uint64(3)
	for i := range n {
		rng = rng*6364136223846793005 + 1442695040888963407
		t := uint64(1<<20 + i/50<<10)
		fn := event.Malloc
		if i%4 == 3 && i%40 == 3 {
			fn = event.New
		}
		a := event.Event{Kind: event.Alloc, Fn: fn, Stack: uint32(11 + i%4), Time: t + 7, Addr: 0x10000 + uint64(i)*64, Size: 16 + rng>>58}
		switch i % 5 {
		case 1:
			a.SetLate(t)
		case 2:
			a.SetLate(t - 1<<10)
		case 3:
			if i%25 == 3 {
				a.SetLate(t - 7<<10)
			}
		}
		evs = append(evs, a)
		if i >= 8 {
			evs = append(evs, event.Event{Kind: event.Free, Fn: event.FreeFn, Stack: uint32(21 + i%2), Time: t + 9, Addr: 0x10000 + uint64(i-8)*64})
		}
	}
	return evs
}

// TestHotCodes: version 10 codes the time and stack of such allocations
// and frees in their op bytes: the time and stack streams, a byte or two
// an event in version 9, keep a tenth of a byte an event (the times of
// new ticks and of the rarer late allocations); and the events read back
// exactly in both versions.
func TestHotCodes(t *testing.T) {
	evs := loopEvents(4000)
	streams := func(v int) [numStreams][]byte {
		e := newEncoder()
		e.shift = 10
		e.before7, e.before8, e.before10, e.perThread = v < 7, v < 8, v < 10, v >= 11
		for i := range evs {
			if err := e.add(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		return e.s
	}
	v9, v10 := streams(9), streams(10)
	for _, s := range []int{sTime, sStack} {
		if got, was := len(v10[s]), len(v9[s]); got*10 > len(evs) || was < len(evs)/2 {
			t.Errorf("%s stream: %d bytes in version 10, %d in 9, for %d events", streamNames[s], got, was, len(evs))
		}
	}
	readsBackShifted(t, evs, 9, Version)
}

// readsBackShifted checks that evs, written with times >> 10 in each of
// the versions, read back as they were but for those times.
func readsBackShifted(t *testing.T, evs []event.Event, versions ...int) {
	t.Helper()
	for _, v := range versions {
		opts := Options{TimeShift: 10, version: v}
		got, err := readAll(t, setVersion(writeTrace(t, evs, opts, 100), v))
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		want := slices.Clone(evs)
		for i := range want {
			want[i].Time = want[i].Time >> 10 << 10
			if at, late := want[i].AllocTime(); late {
				want[i].Addr2 = at >> 10 << 10
			}
		}
		diffEvents(t, got, want)
	}
}

// TestClassReuse checks the encoder's size-class lists (which hold the
// frees' sequence numbers, not the addresses): an allocation codes as a
// class hit (no address bytes) exactly when its address tops its class
// and thread's list, and every event reads back.
func TestClassReuse(t *testing.T) {
	const base = 0x5000_0000
	var evs []event.Event
	tm := uint64(1)
	add := func(k event.Kind, thread int32, addr, size uint64) {
		fn := event.Malloc
		if k == event.Free {
			fn, size = event.FreeFn, 0
		}
		evs = append(evs, event.Event{Kind: k, Fn: fn, Thread: thread, Stack: 1, Time: tm, Addr: addr, Size: size})
		tm++
	}
	// Five blocks of one class, freed and allocated back newest first:
	// four hits (the list's depth), then a miss.
	for i := range uint64(5) {
		add(event.Alloc, 1, base+i*64, 40)
	}
	for i := range uint64(5) {
		add(event.Free, 1, base+i*64, 0)
	}
	for i := range uint64(5) {
		add(event.Alloc, 1, base+(4-i)*64, 40)
	}
	// Freed by thread 1, allocated by thread 2: not its list.
	add(event.Free, 1, base, 0)
	add(event.Alloc, 2, base, 40)
	// Another class on top of the same thread's list of 40-byte blocks:
	// the 40-byte one is still on top of its own.
	add(event.Free, 2, base, 0)
	add(event.Alloc, 2, base+0x1000, 200)
	add(event.Free, 2, base+0x1000, 0)
	add(event.Alloc, 2, base, 40)
	// A block under the top is not a hit, and stays on the list.
	add(event.Alloc, 2, base+0x2000, 40)
	add(event.Free, 2, base+0x2000, 0)
	add(event.Alloc, 2, base+0x3000, 40) // not from the list
	add(event.Free, 2, base+0x3000, 0)
	add(event.Alloc, 2, base+0x2000, 40) // under 0x3000
	add(event.Alloc, 2, base+0x3000, 40) // the top

	e := newEncoder()
	var hits []int
	for i := range evs {
		if err := e.add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		if ops := e.s[sOps]; evs[i].Kind == event.Alloc && ops[len(ops)-1]>>6 == 1 {
			hits = append(hits, i)
		}
	}
	if want := []int{10, 11, 12, 13, 20, 26}; !slices.Equal(hits, want) {
		t.Errorf("class hits at events %v, want %v", hits, want)
	}
	got, err := readAll(t, writeTrace(t, evs, Options{}, 8))
	if err != nil {
		t.Fatal(err)
	}
	diffEvents(t, got, evs)
}

// TestWidestEvents writes runs of the compact kinds with every value at
// its widest (each stream's writes are not checked for room one by one:
// see makeRoom), among events that take the room away, and reads them
// back.
func TestWidestEvents(t *testing.T) {
	const top = ^uint64(0)
	var evs []event.Event
	for i := range 300 {
		tm := uint64(i) << 55
		th := int32(i * 0x3fff_ffff)
		evs = append(evs,
			event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: uint32(i % 3), Thread: th, Stack: ^uint32(0) - uint32(i), Time: tm, Addr: top - uint64(i), Size: top >> (i % 9)},
			event.Event{Kind: event.Alloc, Fn: event.New, Thread: th, Stack: 1, Time: tm + 1, Addr: top / 3, Size: 1<<20 - 40, Addr2: 1},
			event.Event{Kind: event.Realloc, Fn: event.ReallocFn, Thread: -th, Stack: ^uint32(0), Time: tm + 2, Addr: top - uint64(i), Addr2: uint64(i) << 40, Size: top},
			event.Event{Kind: event.Free, Fn: event.Fn(255), Thread: -th, Stack: ^uint32(0) >> 1, Time: tm, Addr: top},
			event.Event{Kind: event.Agg, Fn: event.Malloc, Thread: th, Stack: ^uint32(0), Time: tm, Addr: top, Addr2: top, Size: top, Aux: 255<<32 | uint64(^uint32(0))},
			event.Event{Kind: event.ScopeEnd, Thread: th, Time: tm, Aux: top},
		)
		if i%50 == 0 {
			evs = append(evs, event.Event{Kind: event.StackDef, Stack: uint32(i + 1), X: &event.Extra{Frames: make([]uint64, MaxFrames)}},
				event.Event{Kind: event.ThreadName, Thread: th, Time: tm, X: &event.Extra{Text: strings.Repeat("x", 5000)}})
		}
	}
	for _, opts := range []Options{{}, {TimeShift: 7}} {
		got, err := readAll(t, writeTrace(t, evs, opts, 64))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(evs) {
			t.Fatalf("read %d events of %d", len(got), len(evs))
		}
		if opts.TimeShift == 0 {
			diffEvents(t, got, normalize(evs))
		}
	}
}

// TestPerThreadModels: from version 11 each thread keeps its own
// predictions (previous address, stack chains, last freed allocation), so
// threads that alternate every few events no longer spoil each other's.
// Both versions read back what was written; version 11 is smaller on four
// threads interleaving, and the same size on one.
func TestPerThreadModels(t *testing.T) {
	four := loopThreads(4, 10000)
	one := slices.Clone(four)
	for i := range one {
		one[i].Thread = four[0].Thread
	}
	size := func(evs []event.Event, v int) int {
		data := setVersion(writeTrace(t, evs, Options{version: v}, 1<<20), v)
		got, err := readAll(t, data)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		diffEvents(t, got, normalize(evs))
		return len(data)
	}
	if v10, v11 := size(four, 10), size(four, Version); v11*100 > v10*98 {
		t.Errorf("four threads: %d bytes in version %d, %d in 10: want at least 2 %% fewer", v11, Version, v10)
	}
	if v10, v11 := size(one, 10), size(one, Version); v11 != v10 {
		t.Errorf("one thread: %d bytes in version %d, %d in 10: want the same", v11, Version, v10)
	}
}

// loopThreads makes the events of n threads each running a loop like
// bench/workloads/longlived.c (blocks freed in random order some 64
// allocations later, from a few stacks in turn, glibc-like addresses:
// an arena a thread, a LIFO of freed blocks per size class), taking turns
// every 1 to 8 events.
func loopThreads(n, perThread int) []event.Event {
	r := rand.New(rand.NewPCG(uint64(n), 5))
	type thread struct {
		bump  uint64
		live  [64]uint64
		sizes [64]uint64
		freed map[uint64][]uint64 // chunk size -> addresses, latest last
		done  int
	}
	ths := make([]thread, n)
	for i := range ths {
		ths[i] = thread{bump: 0x7f0000000000 + uint64(i)<<26, freed: map[uint64][]uint64{}}
	}
	var evs []event.Event
	now := uint64(1000)
	emit := func(ev event.Event) {
		now += 80 + uint64(r.IntN(40))
		ev.Time = now
		evs = append(evs, ev)
	}
	for busy := n; busy > 0; {
		i := r.IntN(n)
		th := &ths[i]
		tid := int32(100 + i)
		for run := 1 + r.IntN(8); run > 0 && th.done < perThread; run-- {
			size := 16 + uint64(r.IntN(496))
			cs := chunkSize(size)
			addr := th.bump
			if l := th.freed[cs]; len(l) > 0 {
				addr, th.freed[cs] = l[len(l)-1], l[:len(l)-1]
			} else {
				th.bump += cs
			}
			stack := uint32(1 + 4*i + th.done/500%4)
			emit(event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: tid, Stack: stack, Addr: addr, Size: size})
			slot := r.IntN(len(th.live))
			if old := th.live[slot]; old != 0 {
				emit(event.Event{Kind: event.Free, Fn: event.FreeFn, Thread: tid, Stack: stack + 100, Addr: old})
				ocs := chunkSize(th.sizes[slot])
				th.freed[ocs] = append(th.freed[ocs], old)
			}
			th.live[slot], th.sizes[slot] = addr, size
			if th.done++; th.done == perThread {
				busy--
			}
		}
	}
	return evs
}

// TestChunksStandAlone: a chunk decodes the same with a fresh decoder as
// after the chunks before it (no coding state crosses a chunk's start,
// the threads' own predictions included).
func TestChunksStandAlone(t *testing.T) {
	evs := loopThreads(4, 3000)
	e := newEncoder()
	shared := newDecoder()
	for start := 0; start < len(evs); start += 997 {
		part := evs[start:min(start+997, len(evs))]
		e.reset()
		for i := range part {
			if err := e.add(&part[i]); err != nil {
				t.Fatal(err)
			}
		}
		p := e.payload(nil)
		for _, d := range []*decoder{shared, newDecoder()} {
			if err := d.reset(p); err != nil {
				t.Fatal(err)
			}
			var got []event.Event
			for !d.done() && d.err() == nil {
				got = d.next(got, len(got)+1000)
			}
			if err := d.err(); err != nil {
				t.Fatalf("chunk at event %d: %v", start, err)
			}
			if err := d.finish(); err != nil {
				t.Fatalf("chunk at event %d: %v", start, err)
			}
			diffEvents(t, got, part)
		}
	}
}

// TestThreadSwitches: events of threads that run at once alternate a
// few at a time. A switch to one of the last numThreads threads codes
// its place in their list in the op (no misc bytes), one to another
// thread its id; the events read back in this version and in 9 (which
// codes them without the hot codes).
func TestThreadSwitches(t *testing.T) {
	evs := loopEvents(4000)
	// Runs of 1 to 3 events of 5 threads; halfway, numThreads new
	// ones come in turn, so the list forgets the 5.
	rng := uint64(5)
	for i, k := 0, 0; i < len(evs); k++ {
		rng = rng*6364136223846793005 + 1442695040888963407
		th := int32(100 + rng>>40%5)
		if k >= 1000 && k < 1000+numThreads {
			th = int32(200 + k)
		}
		for n := 1 + int(rng>>50%3); n > 0 && i < len(evs); n-- {
			evs[i].Thread = th
			i++
		}
	}
	e := newEncoder()
	e.shift = 10
	coded := 0
	for i := range evs {
		misc := len(e.s[sMisc])
		if err := e.add(&evs[i]); err != nil {
			t.Fatal(err)
		}
		// The last numThreads threads before this event.
		recent := map[int32]bool{}
		for j := i - 1; j >= 0 && len(recent) < numThreads; j-- {
			recent[evs[j].Thread] = true
		}
		if grew := len(e.s[sMisc]) > misc; grew != !recent[evs[i].Thread] {
			t.Fatalf("event %d (thread %d, after %d): thread id coded %v", i, evs[i].Thread, evs[max(i-1, 0)].Thread, grew)
		} else if grew {
			coded++
		}
	}
	if coded != 5+numThreads+5 {
		t.Errorf("%d thread ids coded, want %d", coded, 5+numThreads+5)
	}
	readsBackShifted(t, evs, 9, Version)
}
