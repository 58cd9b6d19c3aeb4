package dwarftypes

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/symbols/symcache"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// typesDump describes what a Module says of its globals: their
// names, addresses and types, and the pointer fields of the types they
// lead to (three levels deep).
func typesDump(mt *Module) string {
	var b strings.Builder
	seen := map[ID]bool{}
	var dump func(id ID, depth int)
	dump = func(id ID, depth int) {
		if id == None || seen[id] || depth > 3 {
			return
		}
		seen[id] = true
		t := mt.Type(id)
		fmt.Fprintf(&b, "  %s %d:", t.Name, t.Size)
		fs := mt.Fields(id)
		for _, f := range fs {
			target := "void"
			if f.Target != None {
				target = mt.Type(f.Target).Name
			}
			fmt.Fprintf(&b, " [%d %s %s]", f.Off, f.Name, target)
		}
		b.WriteString("\n")
		for _, f := range fs {
			dump(f.Target, depth+1)
		}
	}
	for _, g := range mt.Globals {
		fmt.Fprintf(&b, "%s %#x\n", g.Name, g.Addr)
		dump(g.Type, 0)
	}
	return b.String()
}

// TestTypesCache: a module's types read from DWARF, written to the types
// cache and read back from it say the same of every global and its
// fields; the second Reader takes them from the file (a name changed
// in it shows); a file of another key, or cut short, is not used.
func TestTypesCache(t *testing.T) {
	// The containers fixture: a global pointer to a struct of
	// containers, laid out through their template arguments.
	path := filepath.Join(t.TempDir(), "containers")
	src := filepath.Join("..", "..", "..", "testdata", "fixtures", "containers.cc")
	if err := testfixture.Compile("g++", path, "-g", "-O2", src); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Cleanup(forgetTypesCacheMaps)
	types := func(opts symbolize.Options) *Module {
		t.Helper()
		mt, err := NewReader(symbolize.New(opts)).Types(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return mt
	}
	want := typesDump(types(symbolize.Options{}))
	if !strings.Contains(want, "std::_Rb_tree_node<std::pair<int const, app::Keeper> >") {
		t.Fatalf("the fixture's globals have no pointer fields:\n%s", want)
	}
	if got := typesDump(types(symbolize.Options{DWARFCache: dir})); got != want {
		t.Errorf("cold cache:\n%s\nwant\n%s", got, want)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.types"))
	if len(files) != 1 {
		t.Fatalf("types cache files %v, want one", files)
	}
	if got := typesDump(types(symbolize.Options{DWARFCache: dir})); got != want {
		t.Errorf("warm cache:\n%s\nwant\n%s", got, want)
	}

	// The file is what the warm Reader read: a global renamed in it
	// shows.
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	_, key := symbolize.New(symbolize.Options{DWARFCache: dir}).CacheFile(path, nil, ".types")
	var mt Module
	if err := decodeTypes(&mt, b, key); err != nil {
		t.Fatalf("decoding the cache file: %v", err)
	}
	if len(mt.Globals) == 0 {
		t.Fatal("no globals in the cache file")
	}
	mt.Globals[0].Name = "renamed_by_the_test"
	// (Through a rename, as leakpath writes: a mapped file is never
	// truncated.)
	if err := replaceFile(files[0], encodeTypes(&mt, key)); err != nil {
		t.Fatal(err)
	}
	if got := typesDump(types(symbolize.Options{DWARFCache: dir})); !strings.Contains(got, "renamed_by_the_test") {
		t.Errorf("the warm cache did not read the file")
	}
	// A link in the cache's place, even to a file that would match, is
	// not followed: leakpath often runs as root.
	elsewhere := filepath.Join(t.TempDir(), "planted.types")
	if err := os.Rename(files[0], elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, files[0]); err != nil {
		t.Fatal(err)
	}
	forgetTypesCacheMaps()
	if got := typesDump(types(symbolize.Options{DWARFCache: dir})); strings.Contains(got, "renamed_by_the_test") {
		t.Errorf("the types cache followed a symbolic link")
	}
	// Another key, or a file cut short: not used (read from DWARF again).
	if err := replaceFile(files[0], encodeTypes(&mt, key+"x")); err != nil {
		t.Fatal(err)
	}
	if got := typesDump(types(symbolize.Options{DWARFCache: dir})); got != want {
		t.Errorf("a file of another key was used")
	}
	full := encodeTypes(&mt, key)
	for _, n := range []int{0, 5, len(typesCacheMagic) + 3, len(full) / 2, len(full) - 1} {
		var c Module
		if err := decodeTypes(&c, full[:n], key); err == nil {
			t.Errorf("a file cut to %d of %d bytes decodes", n, len(full))
		}
	}
}

// forgetTypesCacheMaps drops the process's mapped types cache files, so
// that the next read maps its file again.
func forgetTypesCacheMaps() {
	typesCacheMaps.Lock()
	clear(typesCacheMaps.m)
	typesCacheMaps.Unlock()
}

func replaceFile(path string, b []byte) error {
	return symcache.Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// FuzzTypesCache: a types cache file, whatever it holds past its
// checksum, decodes or is refused, and the types it gives lay out
// without a panic.
func FuzzTypesCache(f *testing.F) {
	mt := &Module{nodes: map[dwarf.Offset]*dnode{
		1: {tag: dwarf.TagStructType, name: "s", size: 16, members: []dmember{{name: "p", off: 0, typ: 2}, {name: "q", off: 8, typ: 2}}, tparams: []dwarf.Offset{3}},
		2: {tag: dwarf.TagPointerType, size: 8, typ: 1, hasTyp: true},
		3: {tag: dwarf.TagBaseType, name: "int", size: 4},
	}, byName: map[string]dwarf.Offset{"s": 1}, Globals: []Global{{Name: "g", Addr: 0x1000}}, globalOffs: []dwarf.Offset{2},
		alloc: []allocSite{{pc: 0x20, off: 1}}}
	good := encodeTypes(mt, "k")
	f.Add(good[len(typesCacheMagic)+4:])
	f.Add([]byte{1, 'k', 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, rest []byte) {
		b := append([]byte(typesCacheMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(rest, symcache.Castagnoli))...)
		b = append(b, rest...)
		var c Module
		if decodeTypes(&c, b, "k") != nil {
			return
		}
		for name := range c.byName {
			if id, ok := c.ByName(name); ok && id != None {
				c.Fields(id)
			}
		}
		for _, g := range c.Globals {
			if g.Type != None {
				c.Fields(g.Type)
			}
		}
	})
}
