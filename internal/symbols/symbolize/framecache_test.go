package symbolize

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// TestFrameCache: frames looked up by one Symbolizer are served to the next
// without loading the module, the same as loaded; a changed module file or
// a spoilt cache file is a miss (the module is loaded again, the file
// written again).
func TestFrameCache(t *testing.T) {
	src := build(t, fixtureByName(t, "c-gcc-O2-dwarf4-gz-zlib"))
	path := filepath.Join(t.TempDir(), "prog")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Cleanup(forgetDWARFCacheMaps)
	sites := callSites(disassemble(t, path))
	if len(sites) == 0 {
		t.Fatal("no call sites in the fixture")
	}
	lookups := func(cache string) ([][]Frame, int) {
		return lookupAll(t, Options{DWARFCache: cache}, path, sites)
	}
	want, _ := lookups("")
	for _, round := range []string{"cold", "warm"} {
		got, loaded := lookups(dir)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: frames differ from those without a cache", round)
		}
		if wantLoaded := map[string]int{"cold": 1, "warm": 0}[round]; loaded != wantLoaded {
			t.Errorf("%s: %d modules loaded, want %d", round, loaded, wantLoaded)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.frames"))
	if len(files) != 1 {
		t.Fatalf("frame cache files %v, want one", files)
	}
	good, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}

	// The module file changed (its time): a miss, then a hit again.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if got, loaded := lookups(dir); loaded != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("after the module changed: %d modules loaded (want 1), same frames %v", loaded, reflect.DeepEqual(got, want))
	}
	if _, loaded := lookups(dir); loaded != 0 {
		t.Errorf("the rewritten frame cache is not used: %d modules loaded", loaded)
	}

	// A spoilt file: a miss, written again.
	spoilt := append([]byte(nil), good[:len(good)/2]...)
	if err := os.WriteFile(files[0], spoilt, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, loaded := lookups(dir); loaded != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("with a spoilt cache file: %d modules loaded (want 1)", loaded)
	}
	if b, _ := os.ReadFile(files[0]); bytes.Equal(b, spoilt) {
		t.Error("the spoilt frame cache file was not written again")
	}
}

// FuzzFrameCache: decodeFrameCache reads files from disk; whatever they
// hold, it decodes or fails, without a panic.
func FuzzFrameCache(f *testing.F) {
	var buf bytes.Buffer
	c := &frameCacheFile{Key: "k", Frames: map[uint64][]Frame{0x1234: {{Function: "f", File: "a.c", Line: 3, Inlined: true}, {Function: "g"}}, 8: nil}}
	if err := encodeFrameCache(&buf, c); err != nil {
		f.Fatal(err)
	}
	got, err := decodeFrameCache(buf.Bytes())
	if err != nil || got.Key != "k" || !reflect.DeepEqual(got.Frames[0x1234], c.Frames[0x1234]) {
		f.Fatalf("the seed does not round-trip: %v %+v", err, got)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(frameCacheMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeFrameCache(b)
	})
}

// TestFrameCacheWarns: frames served from the frame cache come with the
// warning the module's load gave (here: no debug information).
func TestFrameCacheWarns(t *testing.T) {
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy is not installed (binutils)")
	}
	path := filepath.Join(t.TempDir(), "stripped")
	if out, err := exec.Command("objcopy", "--strip-debug", build(t, fixtureByName(t, "c-gcc-O2")), path).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	dir, debugDir := t.TempDir(), t.TempDir()
	sites := callSites(disassemble(t, path))
	warned := func() ([]string, int) {
		var w warnings
		_, loaded := lookupAll(t, Options{DWARFCache: dir, DebugDirs: []string{debugDir}, Warn: w.warn}, path, sites)
		return w.msgs, loaded
	}
	first, loaded := warned()
	if len(first) != 1 || loaded != 1 {
		t.Fatalf("first run: warnings %q, %d modules loaded; want one warning, one module", first, loaded)
	}
	again, loaded := warned()
	if !reflect.DeepEqual(again, first) || loaded != 0 {
		t.Errorf("from the frame cache: warnings %q, %d modules loaded; want %q and none", again, loaded, first)
	}
}

// TestFrameCacheEncoding: a frame cache file decodes to what was encoded,
// every field of every Frame included; each of its proper prefixes, and
// the file with a byte more, is rejected.
func TestFrameCacheEncoding(t *testing.T) {
	// The encoding names Frame's fields one by one: a new field must be
	// added there (and frameCacheMagic changed).
	if n := reflect.TypeOf(Frame{}).NumField(); n != 5 {
		t.Fatalf("Frame has %d fields; encodeFrameCache and decodeFrameCache code 5", n)
	}
	c := &frameCacheFile{Key: "leakpath 123\n/lib/libc.so.6 1 2\n", Warning: "no debug information in /lib/libc.so.6",
		Frames: map[uint64][]Frame{
			0x7f00000012a4: {{Function: "inner(int)", File: "/src/a.cc", Line: 12, Column: 7, Inlined: true},
				{Function: "outer", File: "/src/a.cc", Line: 40}},
			0x401000: {{Function: "main", File: "main.c", Line: 1 << 20, Column: 0}},
			0x8:      nil, // looked up, nothing known
			0x10:     {{Function: "ünïcode::名前"}},
		}}
	var buf bytes.Buffer
	if err := encodeFrameCache(&buf, c); err != nil {
		t.Fatal(err)
	}
	got, err := decodeFrameCache(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("decoded %+v\nencoded %+v", got, c)
	}
	b := buf.Bytes()
	for n := 0; n < len(b); n++ {
		if _, err := decodeFrameCache(b[:n]); err == nil {
			t.Errorf("the first %d of %d bytes decode", n, len(b))
		}
	}
	if _, err := decodeFrameCache(append(slices.Clone(b), 0)); err == nil {
		t.Error("a byte more decodes")
	}
}
