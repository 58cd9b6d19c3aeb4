package report

import (
	stdbytes "bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
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
	case reflect.Interface:
		// The report's only interface is a leak's root cause.
		if rng.Intn(2) == 0 {
			rc := &jsonRootCause{}
			fill(rng, reflect.ValueOf(rc).Elem(), depth+1)
			v.Set(reflect.ValueOf(rc))
		}
	}
}

// sharedFrames: frames fill puts in stacks, once set.
var sharedFrames []jsonFrame

func encodingJSON(v any) ([]byte, error) {
	var b stdbytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	err := enc.Encode(v)
	return b.Bytes(), err
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
			t.Fatalf("case %d: differs at byte %d:\nours:     %q\nexpected: %q", i, n, tail(a[n:]), tail(b[n:]))
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
