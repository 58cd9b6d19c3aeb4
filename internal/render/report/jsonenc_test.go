package report

import (
	stdbytes "bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// fill sets v to random contents: nil and empty slices, maps and
// pointers, zero values that omitempty drops, and strings that need
// escaping (HTML characters, controls, invalid UTF-8, U+2028).
func fill(rng *rand.Rand, v reflect.Value, depth int) {
	strs := []string{"", "main", "/usr/lib/x86_64-linux-gnu/libc.so.6", "std::map<int, std::string>", "a&b", "x<y",
		"tab\there", "quote\"back\\slash", "caf\u00e9", "bad\xffutf8", "line\u2028sep", "\x01\x1f", "0x7f00deadbeef"}
	switch v.Kind() {
	case reflect.String:
		v.SetString(strs[rng.Intn(len(strs))])
	case reflect.Bool:
		v.SetBool(rng.Intn(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch rng.Intn(3) {
		case 0:
		case 1:
			v.SetInt(-rng.Int63n(1000))
		default:
			v.SetInt(rng.Int63() >> (64 - v.Type().Bits()))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rng.Intn(3) > 0 {
			v.SetUint(rng.Uint64() >> (64 - v.Type().Bits()))
		}
	case reflect.Float32, reflect.Float64:
		fs := []float64{0, 1.5, 1e-9, 3.25e21, 123456789.125, math.SmallestNonzeroFloat64}
		v.SetFloat(fs[rng.Intn(len(fs))])
	case reflect.Pointer:
		if depth < 6 && rng.Intn(3) > 0 {
			p := reflect.New(v.Type().Elem())
			fill(rng, p.Elem(), depth+1)
			v.Set(p)
		}
	case reflect.Slice:
		if v.Type() == frameSliceType && len(sharedFrames) > 0 && rng.Intn(2) == 0 {
			// Frames shared by stacks, as jsonStack makes them: the
			// writer keeps how it wrote each.
			s := make([]jsonFrame, rng.Intn(4))
			for i := range s {
				s[i] = sharedFrames[rng.Intn(len(sharedFrames))]
			}
			v.Set(reflect.ValueOf(s))
			return
		}
		switch n := rng.Intn(4); {
		case n == 0:
		case depth >= 6:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := 0; i < n-1; i++ {
				fill(rng, s.Index(i), depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if rng.Intn(3) > 0 {
			m := reflect.MakeMap(v.Type())
			for i := rng.Intn(4); i > 0; i-- {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(rng, k, depth+1)
				fill(rng, e, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1)
			}
		}
	}
}

// sharedFrames: frames fill puts in stacks, once set.
var sharedFrames []jsonFrame

// encodingJSON is v as writeJSON should write it: as encoding/json's
// indenting encoder does, each frame then put on one line.
func encodingJSON(v any) ([]byte, error) {
	var b stdbytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return oneLineFrames(b.Bytes()), err
}

// indentedFrame is a frame as encoding/json indents it: a JSON value
// never holds a raw line break, so each is the rest of its line.
var indentedFrame = regexp.MustCompile(`\{\n *"address": (.*),\n *"module": (.*),\n *"offset": (.*),\n *"function": (.*),\n *"file": (.*),\n *"line": (.*),\n *"inlined": (true|false)\n *\}`)

func oneLineFrames(b []byte) []byte {
	return indentedFrame.ReplaceAll(b, []byte(`{"address": $1, "module": $2, "offset": $3, "function": $4, "file": $5, "line": $6, "inlined": $7}`))
}

// TestOneLineFrames: the tests' expectation puts frames, and only
// frames, on one line, valid JSON still, the same values.
func TestOneLineFrames(t *testing.T) {
	v := jsonLeak{Kind: "definite", Function: "malloc", Stack: []jsonFrame{
		{Address: "0x401000", Module: "/bin/a, b", Offset: "0x1000", Function: `f("x",\n)`, File: "a.c", Line: 3},
		{Address: "0x402000", Module: "/lib/libc.so.6", Function: "g", Inlined: true}}}
	got, err := encodingJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	want := `    {"address": "0x401000", "module": "/bin/a, b", "offset": "0x1000", "function": "f(\"x\",\\n)", "file": "a.c", "line": 3, "inlined": false},`
	if !strings.Contains(string(got), "\n"+want+"\n") || strings.Count(string(got), "\n") != 13 {
		t.Fatalf("frames not put on a line each (want %s):\n%s", want, got)
	}
	var back jsonLeak
	if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("read back: %+v (%v), want %+v", back, err, v)
	}
}

// TestWriteJSONAsEncoder: the streaming writer writes the report's types
// byte for byte as encoding/json's indenting encoder.
func TestWriteJSONAsEncoder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 8; i++ {
		var f jsonFrame
		fill(rng, reflect.ValueOf(&f).Elem(), 0)
		f.enc = new(frameEnc)
		sharedFrames = append(sharedFrames, f)
	}
	defer func() { sharedFrames = nil }()
	frames := 0
	for i := 0; i < 400; i++ {
		var v any
		switch i % 3 {
		case 0:
			var r jsonReport
			fill(rng, reflect.ValueOf(&r).Elem(), 0)
			v = r
		case 1:
			var m jsonMulti
			fill(rng, reflect.ValueOf(&m).Elem(), 0)
			v = m
		default:
			var m jsonMulti
			fill(rng, reflect.ValueOf(&m).Elem(), 0)
			v = &m
		}
		want, werr := encodingJSON(v)
		var got stdbytes.Buffer
		gerr := writeJSON(&got, v)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("case %d: encoding/json's error %v, ours %v", i, werr, gerr)
		}
		if werr != nil {
			continue
		}
		frames += strings.Count(string(want), `"address": `)
		if !stdbytes.Equal(got.Bytes(), want) {
			a, b := got.String(), string(want)
			n := 0
			for n < len(a) && n < len(b) && a[n] == b[n] {
				n++
			}
			t.Fatalf("case %d: differs at byte %d:\nours:     %q\nexpected: %q", i, n, a[max(0, n-600):min(len(a), n+100)], tail(b[n:]))
		}
	}
	if frames < 1000 {
		t.Fatalf("only %d frames written: the random reports do not exercise stacks", frames)
	}
}

func tail(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(b []byte) (int, error) {
	if w.n -= len(b); w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(b), nil
}

// TestWriteJSONWriteError: a write that fails is returned.
func TestWriteJSONWriteError(t *testing.T) {
	var r jsonReport
	for i := 0; i < 5000; i++ {
		r.Leaks = append(r.Leaks, jsonLeak{Kind: "definite", Stack: []jsonFrame{{Address: "0x" + strconv.Itoa(i), Module: "/bin/prog"}}})
	}
	if err := writeJSON(&failingWriter{n: 100 << 10}, r); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("writeJSON to a full disk: %v, want its error", err)
	}
}

// countingWriter records the size of each write.
type countingWriter struct {
	stdbytes.Buffer
	writes []int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes = append(w.writes, len(b))
	return w.Buffer.Write(b)
}

// TestWriteJSONChunks: a report of many chunks, one piece of it longer
// than a chunk, is written whole and in order, in writes of a chunk at
// most but for that piece's.
func TestWriteJSONChunks(t *testing.T) {
	var r jsonReport
	frames := []jsonFrame{{Address: "0x401000", Module: "/bin/prog", Function: "main", File: "a.c", Line: 3, enc: new(frameEnc)},
		{Address: "0x402000", Module: "/lib/libc.so.6", Function: "__libc_start_main", enc: new(frameEnc)}}
	for i := 0; i < 6000; i++ {
		r.Leaks = append(r.Leaks, jsonLeak{Kind: "definite", Bytes: uint64(i),
			Stack: append([]jsonFrame{{Address: "0x" + strconv.Itoa(i), Module: "/bin/prog"}}, frames...)})
	}
	long := strings.Repeat("w", 3*chunkSize/2)
	r.Warnings = []string{"first", long, "last"}
	want, err := encodingJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	var w countingWriter
	if err := writeJSON(&w, r); err != nil {
		t.Fatal(err)
	}
	if !stdbytes.Equal(w.Bytes(), want) {
		t.Fatalf("differs from encoding/json's (%d bytes, want %d)", w.Len(), len(want))
	}
	if len(w.writes) < 4 {
		t.Fatalf("%d writes of %d bytes: the report does not span chunks", len(w.writes), len(want))
	}
	over := 0
	for _, n := range w.writes {
		if n > chunkSize {
			over++
		}
	}
	if over != 1 {
		t.Errorf("writes of %v bytes: want one longer than a chunk (%d), the long warning's", w.writes, chunkSize)
	}
}

// TestJSONReportLazyStacks: the report written from its frame cache (the
// leaks' stacks as runs) is the report whose stacks are frames of their
// own, as encoding/json writes it; allocator frames and inlined ones
// included, and a stack left with no frame.
func TestJSONReportLazyStacks(t *testing.T) {
	s := heap.NewSession()
	mod := &event.Module{ID: 1, Path: "/usr/bin/prog<&>", Bias: 0x400000, Segments: []event.Segment{{Vaddr: 0, Memsz: 0x10000, Flags: 5}}}
	evs := []event.Event{
		{Kind: event.ProcessStart, X: &event.Extra{Process: &event.ProcessInfo{ParentProc: -1, ExecOf: -1, PID: 5, Argv: []string{"prog"}}}},
		{Kind: event.ModuleLoad, Time: 1, X: &event.Extra{Module: mod}},
	}
	var stacks [][]uint64
	for i := uint64(0); i < 40; i++ {
		// The allocator's frame on top, then frames of which some
		// expand to inlined ones; every stack shares its lower part.
		st := []uint64{0x401000, 0x402000 + i%7*16, 0x403000 + i*16, 0x404000, 0x405000}
		if i%5 == 0 {
			st = st[:1] // nothing but the allocator: no frame shown
		}
		stacks = append(stacks, st)
	}
	for i, st := range stacks {
		evs = append(evs, event.Event{Kind: event.StackDef, Thread: 1, Stack: uint32(i + 1), X: &event.Extra{Frames: st}})
	}
	for i := range stacks {
		for k := 0; k <= i%3; k++ {
			evs = append(evs, event.Event{Kind: event.Alloc, Fn: event.Malloc, Thread: 1, Time: uint64(10 + i*4 + k),
				Addr: 0x10000 + uint64(i*4+k)*64, Size: uint64(16 + i), Stack: uint32(i + 1)})
		}
	}
	s.Apply(evs)
	s.Finish()
	sym := func(m *heap.Module, off uint64) []SourceFrame {
		switch {
		case off < 0x1100:
			return []SourceFrame{{Function: "malloc", Allocator: true}}
		case off < 0x2100 && off%32 == 0x0f:
			// An allocator inlined into the first frame shown.
			return []SourceFrame{{Function: "malloc", Inlined: true, Allocator: true}, {Function: "wrapper", File: "w.c", Line: 7}}
		case off%32 == 0x1f:
			return []SourceFrame{{Function: "inl<T>", File: "a.h", Line: 3, Inlined: true}, {Function: "outer", File: "a.c", Line: int(off % 97)}}
		}
		return []SourceFrame{{Function: "f_" + strconv.FormatUint(off, 16), File: "a.c", Line: int(off % 89)}}
	}
	newReport := func() *Report { return New(s, 0, Options{TicksPerSec: 1e9, Symbolize: sym}) }
	want, err := encodingJSON(newReport().jsonReport())
	if err != nil {
		t.Fatal(err)
	}
	var got stdbytes.Buffer
	if err := newReport().Generate(&got, "json"); err != nil {
		t.Fatal(err)
	}
	checkSchema(t, "the report", got.Bytes())
	if !stdbytes.Equal(got.Bytes(), want) {
		a, b := got.String(), string(want)
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		t.Fatalf("differs at byte %d:\nours:     %q\nexpected: %q", n, tail(a[n:]), tail(b[n:]))
	}
	if c := strings.Count(got.String(), `"address": `); c < 100 {
		t.Fatalf("%d frames in the report: the leaks' stacks are not exercised", c)
	}
	if !strings.Contains(got.String(), `"stack": []`) || !strings.Contains(got.String(), `"inlined": true`) ||
		!strings.Contains(got.String(), `"function": "wrapper"`) {
		t.Fatalf("no empty stack, inlined frame or frame under an inlined allocator in the report:\n%s", tail(got.String()))
	}
}
