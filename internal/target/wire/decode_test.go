package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func hdr(typ, fn, words int, aux uint32) uint64 {
	return uint64(typ) | uint64(fn)<<8 | uint64(words)<<16 | uint64(aux)<<32
}

func words(ws ...uint64) []byte {
	b := make([]byte, 8*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

func TestDecodeRecords(t *testing.T) {
	path := "/lib/libz.so.1"
	pathWords := make([]uint64, (len(path)+7)/8)
	pb := make([]byte, len(pathWords)*8)
	copy(pb, path)
	for i := range pathWords {
		pathWords[i] = binary.LittleEndian.Uint64(pb[8*i:])
	}
	bid := []byte{1, 2, 3, 4, 5}
	bidWord := uint64(0x0504030201)
	mod := append([]uint64{
		hdr(RecModule, 0, 4+3+1+len(pathWords), 7), 100, 0x7f0000000000,
		uint64(len(path)) | uint64(len(bid))<<32 | 1<<48,
		0x1000, 0x2000, 5 | 0x1000<<32, bidWord,
	}, pathWords...)
	var in []uint64
	in = append(in, hdr(RecThreadStart, 0, 3, 42), 10, 0xdead)
	in = append(in, hdr(RecStack, 0, 3, 9), 0x401000, 0x402000)
	in = append(in, hdr(RecAlloc, int(event.Malloc), 4, 9), 11, 0x5000, 64)
	in = append(in, hdr(RecPad, 0, 2, 0), 0)
	in = append(in, hdr(RecReallocBegin, int(event.ReallocFn), 3, 9), 12, 0x5000)
	in = append(in, hdr(RecRealloc, int(event.ReallocFn), 5, 9), 13, 0x5000, 0x6000, 128)
	in = append(in, hdr(RecFree, int(event.FreeFn), 3, 0), 14, 0x6000)
	in = append(in, mod...)
	in = append(in, hdr(RecExit, 0, 3, 3), 15, 2)
	in = append(in, hdr(RecThreadName, 0, 4, 0), 16, 0xbeef, 0x72656b726f77)   // "worker"
	in = append(in, hdr(RecScopeBegin, 0, 3, 1), 17, 0x6573726170)             // "parse"
	in = append(in, hdr(RecScopeBegin, 0, 4, 2), 18, 0x3837363534333231, 0x39) // "123456789"
	in = append(in, hdr(RecScopeBegin, 0, 3, 3), 19, 0)                        // no name
	in = append(in, hdr(RecScopeEnd, 0, 2, 3), 20)
	in = append(in, hdr(RecPending, 0, 3, 0), 21, 4096)
	in = append(in, hdr(RecRefree, int(event.Malloc), 6, 9), 22, 0x7000, 0, 0x401234, uint64(event.FreeFn))
	in = append(in, hdr(RecIgnore, 0, 3, 0), 23, 0x7008)
	in = append(in, hdr(RecRootRegion, 0, 4, 1), 24, 0x8000, 64)
	in = append(in, hdr(RecRootRegion, 0, 4, 0), 25, 0x8000, 64)
	var r Ring
	got, err := Decode(words(in...), 1, &r, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Event{
		{Kind: event.ThreadStart, Proc: 1, Thread: 42, Time: 10, Addr: 0xdead},
		{Kind: event.StackDef, Proc: 1, Thread: 42, Stack: 9, X: &event.Extra{Frames: []uint64{0x401000, 0x402000}}},
		{Kind: event.Alloc, Fn: event.Malloc, Proc: 1, Thread: 42, Stack: 9, Time: 11, Addr: 0x5000, Size: 64},
		{Kind: event.ReallocBegin, Fn: event.ReallocFn, Proc: 1, Thread: 42, Stack: 9, Time: 12, Addr: 0x5000},
		{Kind: event.Realloc, Fn: event.ReallocFn, Proc: 1, Thread: 42, Stack: 9, Time: 13, Addr: 0x5000, Addr2: 0x6000, Size: 128},
		{Kind: event.Free, Fn: event.FreeFn, Proc: 1, Thread: 42, Time: 14, Addr: 0x6000},
		{Kind: event.ModuleLoad, Proc: 1, Thread: 42, Time: 100, X: &event.Extra{Module: &event.Module{ID: 7, Path: path, BuildID: bid,
			Bias: 0x7f0000000000, Segments: []event.Segment{{Vaddr: 0x1000, Memsz: 0x2000, Flags: 5, Offset: 0x1000}}}}},
		{Kind: event.Exit, Proc: 1, Thread: 42, Time: 15, Aux: 3, Size: 2},
		{Kind: event.ThreadName, Proc: 1, Thread: 0, Time: 16, Addr: 0xbeef, X: &event.Extra{Text: "worker"}},
		{Kind: event.ScopeBegin, Proc: 1, Thread: 42, Time: 17, Aux: 1, X: &event.Extra{Text: "parse"}},
		{Kind: event.ScopeBegin, Proc: 1, Thread: 42, Time: 18, Aux: 2, X: &event.Extra{Text: "123456789"}},
		{Kind: event.ScopeBegin, Proc: 1, Thread: 42, Time: 19, Aux: 3},
		{Kind: event.ScopeEnd, Proc: 1, Thread: 42, Time: 20, Aux: 3},
		{Kind: event.Pending, Proc: 1, Thread: 42, Time: 21, Size: 4096},
		{Kind: event.Refree, Fn: event.Malloc, Proc: 1, Thread: 42, Stack: 9, Time: 22, Addr: 0x7000, Addr2: 0x401234, Aux: uint64(event.FreeFn)},
		{Kind: event.Ignore, Proc: 1, Thread: 42, Time: 23, Addr: 0x7008},
		{Kind: event.RootRegion, Proc: 1, Thread: 42, Time: 24, Addr: 0x8000, Size: 64, Aux: 1},
		{Kind: event.RootRegion, Proc: 1, Thread: 42, Time: 25, Addr: 0x8000, Size: 64},
	}
	if !reflect.DeepEqual(got, want) {
		for i := range max(len(got), len(want)) {
			if i >= len(got) || i >= len(want) || !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("event %d:\n got %+v\nwant %+v", i, at(got, i), at(want, i))
			}
		}
	}
}

func at(evs []event.Event, i int) any {
	if i < len(evs) {
		if evs[i].ModuleInfo() != nil {
			return struct {
				event.Event
				M event.Module
			}{evs[i], *evs[i].ModuleInfo()}
		}
		return evs[i]
	}
	return "(none)"
}

func TestDecodeRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"zero header":         words(0),
		"unknown type":        words(hdr(99, 0, 1, 0)),
		"too short alloc":     words(hdr(RecAlloc, 1, 2, 0), 0),
		"past the end":        words(hdr(RecFree, 5, 9, 0), 0, 0),
		"alloc unknown fn":    words(hdr(RecAlloc, 200, 4, 0), 0, 0, 0),
		"stack id 0":          words(hdr(RecStack, 0, 2, 0), 1),
		"stack id too large":  words(hdr(RecStack, 0, 2, event.MaxStackID), 1),
		"bad module lengths":  words(hdr(RecModule, 0, 4, 1), 0, 0, 100),
		"half a word":         {1, 2, 3},
		"scope without name":  words(hdr(RecScopeBegin, 0, 2, 1), 0),
		"refree of address 0": words(hdr(RecRefree, int(event.Malloc), 6, 1), 0, 0, 0, 1, uint64(event.FreeFn)),
		"refree, free fn 0":   words(hdr(RecRefree, int(event.Malloc), 6, 1), 0, 0x10, 0, 1, 0),
		"refree, alloc fn 99": words(hdr(RecRefree, 99, 6, 1), 0, 0x10, 0, 1, uint64(event.FreeFn)),
		"short ignore":        words(hdr(RecIgnore, 0, 2, 0), 0),
		"root region aux 2":   words(hdr(RecRootRegion, 0, 4, 2), 0, 0x10, 8),
		"scope name too long": words(append([]uint64{hdr(RecScopeBegin, 0, 2+17, 1), 0},
			make([]uint64, 17)...)...),
		"pool operation 3":      words(hdr(RecPool, 0, 4, 0), 0, 0xa0, 3),
		"pool object at 0":      words(hdr(RecPoolAlloc, 0, 5, 1), 0, 0, 16, 0xa0),
		"pool free of 0":        words(hdr(RecPoolFree, 0, 4, 0), 0, 0, 0xa0),
		"short pool alloc":      words(hdr(RecPoolAlloc, 0, 4, 1), 0, 0x10, 16),
		"family of fn 0":        words(hdr(RecFamily, 0, 5, 0), 0, 0x401000, FamilyTraced, 0x636f6c6c616d),
		"family of pool fn":     words(hdr(RecFamily, 0, 5, uint32(event.PoolAllocFn)), 0, 0x401000, FamilyTraced, 0),
		"family outcome 0":      words(hdr(RecFamily, 0, 5, uint32(event.Malloc)), 0, 0x401000, 0, 0),
		"family outcome 8":      words(hdr(RecFamily, 0, 5, uint32(event.Malloc)), 0, 0x401000, FamilyNoSlot+1, 0),
		"family name too long":  words(append([]uint64{hdr(RecFamily, 0, 4+9, uint32(event.Malloc)), 0, 0x401000, FamilyTraced}, make([]uint64, 9)...)...),
		"family without a name": words(hdr(RecFamily, 0, 4, uint32(event.Malloc)), 0, 0x401000, FamilyTraced),
	} {
		var r Ring
		_, err := Decode(in, 0, &r, nil)
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s: got %v, want a *DecodeError", name, err)
		} else if de.Short != (name == "past the end") {
			t.Errorf("%s: Short %v", name, de.Short)
		}
	}
}

// TestDecodeShort: a record cut by the end of the bytes is reported
// where it starts, as Short, after the whole records before it, and the
// Modules count follows module loads and unloads.
func TestDecodeShort(t *testing.T) {
	in := words(hdr(RecModuleUnload, 0, 2, 4), 1, hdr(RecFree, int(event.FreeFn), 3, 0), 2, 0x1000,
		hdr(RecAlloc, int(event.Malloc), 4, 1), 3, 0x2000)
	r := Ring{Thread: 7}
	out, n, err := DecodeSome(in, 1, &r, make([]event.Event, 0, 4))
	var de *DecodeError
	if !errors.As(err, &de) || !de.Short || de.Offset != 40 || n != 40 || len(out) != 2 {
		t.Fatalf("decoded %d bytes, %d events, err %v; want 40, 2 and a Short error at 40", n, len(out), err)
	}
	if r.Modules != 1 {
		t.Errorf("Modules %d after one unload", r.Modules)
	}
}

// FuzzDecode: whatever the bytes (the program can write anything in its
// rings), Decode returns events or a DecodeError, never panics, never
// reads past its input, and makes nothing larger than the bytes can
// hold: every count and length it takes from them is bounded.
func FuzzDecode(f *testing.F) {
	f.Add(words(hdr(RecThreadStart, 0, 3, 1), 1, 2, hdr(RecAlloc, 1, 4, 0), 3, 4, 5))
	f.Add(words(hdr(RecStack, 0, 3, 1), 1, 2))
	f.Add(words(hdr(RecModule, 0, 5, 1), 0, 0, 3|1<<32, 0x41424344))
	f.Add(words(hdr(RecExec, 0, 3, 5), 0, 0x6f6c6c6568))
	f.Add(words(hdr(RecScopeBegin, 0, 3, 1), 1, 0x6573726170, hdr(RecScopeEnd, 0, 2, 1), 2))
	f.Add(words(hdr(RecPending, 0, 3, 0), 1, 4096))
	f.Add(words(hdr(RecRefree, 1, 6, 1), 1, 0x10, 0, 0x401000, 5, hdr(RecIgnore, 0, 3, 0), 2, 0x10))
	f.Add(words(hdr(RecRootRegion, 0, 4, 1), 1, 0x10, 8))
	f.Add(words(hdr(RecPool, 0, 4, 1), 1, 0xa0, PoolCreate, hdr(RecPoolAlloc, 0, 5, 1), 2, 0x10, 16, 0xa0,
		hdr(RecPoolFree, 0, 4, 0), 3, 0x10, 0xa0))
	f.Add(words(hdr(RecFamily, 0, 5, 1), 1, 0x401000, FamilyTraced, 0x636f6c6c616d))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Ring
		evs, err := Decode(b, 0, &r, nil)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(b) {
				t.Fatalf("bad error %v", err)
			}
		}
		if len(evs) > len(b)/8 {
			t.Fatalf("%d events from %d bytes", len(evs), len(b))
		}
		if r.Thread < 0 || r.Thread > MaxTID {
			t.Fatalf("ring of thread %d", r.Thread)
		}
		for _, ev := range evs {
			if ev.Kind == 0 {
				t.Fatalf("event without a kind: %+v", ev)
			}
			if ev.Thread < 0 || ev.Thread > MaxTID {
				t.Fatalf("event of thread %d", ev.Thread)
			}
			if ev.Kind == event.StackDef && (ev.Stack == 0 || ev.Stack >= event.MaxStackID || len(ev.Frames()) > MaxDepth) {
				t.Fatalf("stack %d of %d frames", ev.Stack, len(ev.Frames()))
			}
			if x := ev.X; x != nil {
				n := len(x.Text)
				if x.Module != nil {
					n += len(x.Module.Path) + len(x.Module.BuildID) + 24*len(x.Module.Segments)
				}
				if n > len(b) {
					t.Fatalf("%d bytes of text and module from %d", n, len(b))
				}
			}
		}
	})
}

// TestDecodePoolsAndFamilies: the records of pools and allocator
// families become their events, with every field in place.
func TestDecodePoolsAndFamilies(t *testing.T) {
	in := words(
		hdr(RecPool, 0, 4, 7), 10, 0xa0, PoolCreate,
		hdr(RecPoolAlloc, 0, 5, 8), 11, 0x5000, 48, 0xa0,
		hdr(RecPoolFree, 0, 4, 0), 12, 0x5000, 0xa0,
		hdr(RecPool, 0, 4, 9), 13, 0xa0, PoolDestroy,
		hdr(RecFamily, 0, 5, uint32(event.Calloc)), 14, 0x401000, FamilyRefused, 0x636f6c6c6163, // "calloc"
	)
	var r Ring
	got, err := Decode(in, 2, &r, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Event{
		{Kind: event.PoolCreate, Proc: 2, Time: 10, Stack: 7, Addr: 0xa0},
		{Kind: event.PoolAlloc, Fn: event.PoolAllocFn, Proc: 2, Time: 11, Stack: 8, Addr: 0x5000, Size: 48, Aux: 0xa0},
		{Kind: event.PoolFree, Fn: event.PoolFreeFn, Proc: 2, Time: 12, Addr: 0x5000, Aux: 0xa0},
		{Kind: event.PoolDestroy, Proc: 2, Time: 13, Stack: 9, Addr: 0xa0},
		{Kind: event.AllocFamilyFn, Fn: event.Calloc, Proc: 2, Time: 14, Addr: 0x401000, Aux: FamilyRefused, X: &event.Extra{Text: "calloc"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
}

// TestResetClearsEveryField: reset makes an event anew field by field; a
// field added to event.Event must be added there too.
func TestResetClearsEveryField(t *testing.T) {
	old := event.Event{Kind: event.Alloc, Fn: event.Malloc, Proc: 1, Thread: 2, Stack: 3, Time: 4,
		Addr: 5, Addr2: 6, Size: 7, Aux: 8, X: &event.Extra{Text: "x"}}
	if n := reflect.TypeOf(old).NumField(); n != 11 {
		t.Fatalf("event.Event has %d fields, reset sets 11", n)
	}
	ev := old
	if got, want := *reset(&ev, 9, 10, 11), (event.Event{Proc: 9, Thread: 10, Time: 11}); got != want {
		t.Fatalf("reset %+v: %+v, want %+v", old, got, want)
	}
}

// TestDecodeOverOldEvents: decoding into a reused batch leaves nothing of
// the events it overwrites, and a record it skips or rejects takes no
// place.
func TestDecodeOverOldEvents(t *testing.T) {
	old := event.Event{Kind: event.ModuleLoad, Fn: event.Malloc, Proc: 1, Thread: 2, Stack: 3, Time: 4,
		Addr: 5, Addr2: 6, Size: 7, Aux: 8, X: &event.Extra{Text: "x"}}
	buf := []event.Event{old, old, old, old}
	in := words(hdr(RecFree, int(event.FreeFn), 3, 0), 20, 0x1000,
		hdr(RecPad, 0, 2, 0), 0,
		hdr(RecAlloc, 0, 4, 1), 21, 0x2000, 16) // no function: bad
	r := Ring{Thread: 7}
	out, n, err := DecodeSome(in, 3, &r, buf[:0])
	if err == nil || n != 40 {
		t.Fatalf("decoded %d bytes, err %v; want 40 and an error", n, err)
	}
	want := event.Event{Kind: event.Free, Fn: event.FreeFn, Proc: 3, Thread: 7, Time: 20, Addr: 0x1000}
	if len(out) != 1 || out[0] != want {
		t.Fatalf("got %+v, want [%+v]", out, want)
	}
}
