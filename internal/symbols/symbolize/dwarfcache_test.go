package symbolize

import (
	"bytes"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// forgetDWARFCacheMaps drops the process's mapped cache files, so that the
// next load reads its cache file again.
func forgetDWARFCacheMaps() {
	dwarfCacheMaps.Lock()
	clear(dwarfCacheMaps.m)
	dwarfCacheMaps.Unlock()
}

// TestDWARFCache: the first load of a debug file with compressed sections
// writes its cache file, the next maps it and gives the same DWARF as
// (*elf.File).DWARF; a cache file that does not match (another version of
// the debug file, a flipped byte, cut short, another build id) is not
// used, and the next load writes a good one.
func TestDWARFCache(t *testing.T) {
	path := build(t, fixtureByName(t, "cpp-gcc-O2-gz-zlib"))
	dir := t.TempDir()
	t.Cleanup(forgetDWARFCacheMaps)
	f, err := openELF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	secs, ok := fastDWARFSections(f.File)
	if !ok {
		t.Fatal("the fixture is not for loadDWARF's own reader")
	}
	key, ok := cacheKey(f, secs)
	if !ok {
		t.Fatal("a fixture with compressed sections and a build id is not cached")
	}
	cached := dwarfCachePath(dir, key.id)

	load := func() {
		t.Helper()
		want, err := f.DWARF()
		if err != nil {
			t.Fatal(err)
		}
		got, addr, err := loadDWARF(f, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := debugAddr(f.File); !bytes.Equal(addr, want) {
			t.Errorf(".debug_addr: %d bytes, want %d", len(addr), len(want))
		}
		compareDWARF(t, want, got, 1)
	}
	load() // a miss: inflates and writes
	good, err := os.ReadFile(cached)
	if err != nil {
		t.Fatalf("no cache file after the first load: %v", err)
	}
	forgetDWARFCacheMaps()
	if readDWARFCache(dir, key) == nil {
		t.Fatal("the cache file just written is not used")
	}
	forgetDWARFCacheMaps()
	load() // a hit
	// The cached sections are the inflated ones.
	forgetDWARFCacheMaps()
	fromCache := readDWARFCache(dir, key)
	for i, s := range secs {
		if s == nil {
			if fromCache[i] != nil {
				t.Errorf("%s: absent, cached as %d bytes", dwarfSections[i], len(fromCache[i]))
			}
			continue
		}
		want, err := readDWARFSection(f, s, -1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fromCache[i], want) {
			t.Errorf("%s: cached %d bytes differ from the %d inflated", dwarfSections[i], len(fromCache[i]), len(want))
		}
	}

	for _, c := range []struct {
		name  string
		spoil func(b []byte) []byte
		key   func(k dwarfKey) dwarfKey
		err   string
	}{
		{name: "flipped data byte", spoil: func(b []byte) []byte { b[len(b)-100] ^= 1; return b }, err: "checksum"},
		{name: "cut short", spoil: func(b []byte) []byte { return b[:len(b)-1] }, err: "bytes of data"},
		{name: "header only", spoil: func(b []byte) []byte { return b[:20] }, err: "not a DWARF cache"},
		{name: "other version", spoil: func(b []byte) []byte { b[8]++; return b }, err: "version"},
		{name: "debug file changed", key: func(k dwarfKey) dwarfKey { k.mtime++; return k }, err: "another version of the debug file"},
		{name: "other build id", key: func(k dwarfKey) dwarfKey {
			k.id = append([]byte(nil), k.id...)
			k.id[0] ^= 1
			return k
		}, err: "another build id"},
		{name: "other section size", key: func(k dwarfKey) dwarfKey {
			k.lens = append([]uint64(nil), k.lens...)
			k.lens[1]++
			return k
		}, err: ".debug_info"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			k := key
			if c.spoil != nil {
				b = c.spoil(b)
			}
			if c.key != nil {
				k = c.key(k)
			}
			if _, err := parseDWARFCache(b, k); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseDWARFCache: %v, want an error with %q", err, c.err)
			}
			if c.spoil == nil {
				return
			}
			// A new file, as the cache's writers make them: this process
			// may still map the old one (truncating it would make a
			// reader of that mapping fault).
			if err := os.WriteFile(cached+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(cached+".new", cached); err != nil {
				t.Fatal(err)
			}
			forgetDWARFCacheMaps()
			if readDWARFCache(dir, key) != nil {
				t.Fatal("a spoilt cache file is used")
			}
			load() // a miss: rewrites the file
			if b, _ := os.ReadFile(cached); !bytes.Equal(b, good) {
				t.Errorf("the cache file was not written again (%d bytes, want %d)", len(b), len(good))
			}
		})
	}
}

// lookupAll looks up pcs of path with a new Symbolizer and returns their
// frames and how many modules the Symbolizer loaded for them.
func lookupAll(t *testing.T, opts Options, path string, pcs []uint64) ([][]Frame, int) {
	t.Helper()
	s := New(opts)
	defer s.Close()
	var out [][]Frame
	for _, pc := range pcs {
		fr, err := s.Lookup(path, nil, pc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fr)
	}
	return out, len(s.modules)
}

// TestDWARFCacheSymbolizer: a Symbolizer with a DWARF cache gives the same
// frames as one without, from a cold cache and from a warm one (the frame
// cache emptied, so that the DWARF is loaded).
func TestDWARFCacheSymbolizer(t *testing.T) {
	path := build(t, fixtureByName(t, "c-gcc-O2-dwarf4-gz-zlib"))
	dir := t.TempDir()
	t.Cleanup(forgetDWARFCacheMaps)
	sites := callSites(disassemble(t, path))
	if len(sites) == 0 {
		t.Fatal("no call sites in the fixture")
	}
	want, _ := lookupAll(t, Options{}, path, sites)
	for _, round := range []string{"cold", "warm"} {
		forgetDWARFCacheMaps()
		frames, _ := filepath.Glob(filepath.Join(dir, "*.frames"))
		for _, f := range frames {
			os.Remove(f)
		}
		got, loaded := lookupAll(t, Options{DWARFCache: dir}, path, sites)
		if !reflect.DeepEqual(got, want) || loaded != 1 {
			t.Errorf("%s cache: %d modules loaded (want 1); frames the same as without a cache: %v", round, loaded, reflect.DeepEqual(got, want))
		}
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "*.dwarf")); len(ents) != 1 {
		t.Errorf("cache files %v, want one", ents)
	}
}

// FuzzDWARFCache: parseDWARFCache reads files from disk; whatever they
// hold, it returns sections inside the file or an error.
func FuzzDWARFCache(f *testing.F) {
	k := dwarfKey{size: 1234, mtime: 5678, id: []byte{1, 2, 3, 4}, lens: make([]uint64, len(dwarfSections))}
	var data []byte
	for i := range k.lens {
		k.lens[i] = uint64(i)
		if i == 3 {
			k.lens[i] = dwarfAbsent
			continue
		}
		data = append(data, bytes.Repeat([]byte{byte(i)}, i)...)
	}
	good := append(appendDWARFCacheHeader(nil, k, crc32.Checksum(data, symcache.Castagnoli)), data...)
	if _, err := parseDWARFCache(good, k); err != nil {
		f.Fatalf("the seed does not parse: %v", err)
	}
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte(dwarfCacheMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		secs, err := parseDWARFCache(b, k)
		if err != nil {
			return
		}
		for i, s := range secs {
			if uint64(len(s)) != k.lens[i] && !(s == nil && k.lens[i] == dwarfAbsent) {
				t.Fatalf("section %d: %d bytes, want %d", i, len(s), k.lens[i])
			}
		}
	})
}
