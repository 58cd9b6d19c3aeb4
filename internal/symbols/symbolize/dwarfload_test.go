package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// dwarfLoadFixtures are builds only the loader tests use (the addr2line
// comparisons cover the DWARF they carry through allFixtures).
var dwarfLoadFixtures = []fixture{
	{name: "c-gcc-O2-dwarf4-gz-zlib", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-gdwarf-4", "-gz=zlib"}},
	{name: "cpp-gcc-O2-gz-zlib", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-g", "-gz=zlib"}},
	{name: "cpp-clang-O2-gz-zlib", src: "shop.cpp", cc: "clang++", flags: []string{"-O2", "-g", "-gz=zlib"}},
	{name: "lib-gcc-O2-gz-zlib", src: "lib.c", cc: "gcc", flags: []string{"-O2", "-g", "-gz=zlib"}, shared: true},
	{name: "c-gcc-m32-gz-zlib", src: "freestanding.c", cc: "gcc", flags: []string{"-m32", "-ffreestanding", "-nostdlib", "-static", "-O2", "-g", "-gz=zlib"}},
	{name: "c-gcc-obj-gz-zlib", src: "basic.c", cc: "gcc", flags: []string{"-c", "-O2", "-g", "-gz=zlib"}},
}

// TestLoadDWARFSameAsStdlib checks that loadDWARF gives the same DWARF as
// (*elf.File).DWARF, and the same frames through the Symbolizer, on DWARF 4
// and 5 from gcc and clang, compressed (32- and 64-bit) and not, and that
// it leaves what it does not handle to the standard library.
func TestLoadDWARFSameAsStdlib(t *testing.T) {
	for _, c := range []struct {
		fixture string
		fast    bool                // loadDWARF reads the sections itself
		zlib    bool                // .debug_info is SHF_COMPRESSED zlib
		class   elf.Class           // of the file
		typ     elf.Type            // of the file
		version int                 // of the first unit
		comp    elf.CompressionType // of .debug_info; 0: not compressed
	}{
		{"c-gcc-O2", true, false, elf.ELFCLASS64, elf.ET_DYN, 5, 0},
		{"c-gcc-O2-dwarf4", true, false, elf.ELFCLASS64, elf.ET_DYN, 4, 0},
		{"c-gcc-O2-gz-zlib", true, true, elf.ELFCLASS64, elf.ET_DYN, 5, elf.COMPRESS_ZLIB},
		{"c-gcc-O2-dwarf4-gz-zlib", true, true, elf.ELFCLASS64, elf.ET_DYN, 4, elf.COMPRESS_ZLIB},
		{"c-gcc-O2-nopie", true, false, elf.ELFCLASS64, elf.ET_EXEC, 5, 0},
		{"cpp-gcc-O2-gz-zlib", true, true, elf.ELFCLASS64, elf.ET_DYN, 5, elf.COMPRESS_ZLIB},
		{"cpp-clang-O2-gz-zlib", true, true, elf.ELFCLASS64, elf.ET_DYN, 5, elf.COMPRESS_ZLIB},
		{"cpp-clang-O2-dwarf4", true, false, elf.ELFCLASS64, elf.ET_DYN, 4, 0},
		{"lib-gcc-O2-gz-zlib", true, true, elf.ELFCLASS64, elf.ET_DYN, 5, elf.COMPRESS_ZLIB},
		{"c-gcc-m32-gz-zlib", true, true, elf.ELFCLASS32, elf.ET_EXEC, 5, elf.COMPRESS_ZLIB},
		{"c-gcc-O2-zstd", true, false, elf.ELFCLASS64, elf.ET_DYN, 5, elf.COMPRESS_ZSTD},
		{"c-gcc-O2-zdebug", false, false, elf.ELFCLASS64, elf.ET_DYN, 5, 0},
		{"c-gcc-obj-gz-zlib", false, true, elf.ELFCLASS64, elf.ET_REL, 5, elf.COMPRESS_ZLIB},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			path := build(t, fixtureByName(t, c.fixture))
			f, err := openELF(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Class != c.class || f.Type != c.typ {
				t.Fatalf("%s is %v %v, want %v %v", path, f.Class, f.Type, c.class, c.typ)
			}
			info := ".debug_info"
			if strings.HasSuffix(c.fixture, "-zdebug") {
				info = ".zdebug_info" // GNU-style compression
			}
			if got := sectionCompression(t, f, info); got != c.comp {
				t.Fatalf(".debug_info compression %v, want %v", got, c.comp)
			}
			if _, fast := fastDWARFSections(f.File); fast != c.fast {
				t.Fatalf("fastDWARFSections: %v, want %v", fast, c.fast)
			}
			want, got, addr := loadBoth(t, f)
			if v := firstUnitVersion(t, path); v != c.version {
				t.Fatalf("first unit is DWARF %d, want %d", v, c.version)
			}
			if want := debugAddr(f.File); !bytes.Equal(addr, want) {
				t.Errorf(".debug_addr: %d bytes, want %d", len(addr), len(want))
			}
			n := compareDWARF(t, want, got, 1)
			t.Logf("%s: %s", c.fixture, n)
			if c.typ != elf.ET_REL {
				compareLookups(t, path, callSites(disassemble(t, path)))
			}
		})
	}
}

// loadBoth loads f's DWARF with (*elf.File).DWARF and with loadDWARF.
func loadBoth(t *testing.T, f *elfFile) (want, got *dwarf.Data, addr []byte) {
	t.Helper()
	want, err := f.DWARF()
	if err != nil {
		t.Fatal(err)
	}
	got, addr, err = loadDWARF(f, "")
	if err != nil {
		t.Fatal(err)
	}
	return want, got, addr
}

// sectionCompression returns the ELF compression type of section name of f
// (0 if not SHF_COMPRESSED), read from the section's own Chdr.
func sectionCompression(t *testing.T, f *elfFile, name string) elf.CompressionType {
	t.Helper()
	s := f.Section(name)
	if s == nil {
		t.Fatalf("%s has no %s", f.path, name)
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		return 0
	}
	var ch [4]byte
	if _, err := f.osFile.ReadAt(ch[:], int64(s.Offset)); err != nil {
		t.Fatal(err)
	}
	return elf.CompressionType(f.ByteOrder.Uint32(ch[:]))
}

// firstUnitVersion returns the DWARF version of the first unit of path per
// readelf (an outside reader).
func firstUnitVersion(t *testing.T, path string) int {
	t.Helper()
	b, err := exec.Command("readelf", "--debug-dump=info", path).Output()
	if err != nil {
		t.Skipf("readelf: %v", err)
	}
	out := string(b)
	i := strings.Index(out, "Version:")
	if i < 0 {
		t.Fatalf("no unit version in readelf output of %s", path)
	}
	var v int
	fmt.Sscan(out[i+len("Version:"):], &v)
	return v
}

// dwarfCounts is what compareDWARF compared.
type dwarfCounts struct{ entries, units, lineUnits, rows int }

func (c dwarfCounts) String() string {
	return fmt.Sprintf("%d entries in %d units equal; line tables of %d units, %d rows equal", c.entries, c.units, c.lineUnits, c.rows)
}

// compareDWARF fails t unless got has the same entries (offsets, tags,
// attributes, values) as want, the same unit ranges, and the same line
// tables for every lineEvery-th unit.
func compareDWARF(t testing.TB, want, got *dwarf.Data, lineEvery int) dwarfCounts {
	t.Helper()
	var n dwarfCounts
	var units []*dwarf.Entry
	wr, gr := want.Reader(), got.Reader()
	for {
		we, werr := wr.Next()
		ge, gerr := gr.Next()
		if fmt.Sprint(werr) != fmt.Sprint(gerr) {
			t.Fatalf("after %d entries: error %v, want %v", n.entries, gerr, werr)
		}
		if werr != nil {
			t.Fatalf("after %d entries: %v", n.entries, werr)
		}
		if !reflect.DeepEqual(we, ge) {
			t.Fatalf("entry %d: %+v, want %+v", n.entries, ge, we)
		}
		if we == nil {
			break
		}
		n.entries++
		switch we.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagSkeletonUnit:
			units = append(units, we)
			wrg, werr := want.Ranges(we)
			grg, gerr := got.Ranges(ge)
			if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(wrg, grg) {
				t.Fatalf("unit at %#x: ranges %v (%v), want %v (%v)", we.Offset, grg, gerr, wrg, werr)
			}
		}
	}
	n.units = len(units)
	if n.units == 0 {
		t.Fatal("no units")
	}
	for i := 0; i < len(units); i += lineEvery {
		wl, werr := want.LineReader(units[i])
		gl, gerr := got.LineReader(units[i])
		if fmt.Sprint(werr) != fmt.Sprint(gerr) {
			t.Fatalf("unit at %#x: line reader error %v, want %v", units[i].Offset, gerr, werr)
		}
		if wl == nil {
			continue
		}
		n.lineUnits++
		if !reflect.DeepEqual(wl.Files(), gl.Files()) {
			t.Fatalf("unit at %#x: line files differ", units[i].Offset)
		}
		for {
			var we, ge dwarf.LineEntry
			werr, gerr := wl.Next(&we), gl.Next(&ge)
			if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(we, ge) {
				t.Fatalf("unit at %#x, row %d: %+v (%v), want %+v (%v)", units[i].Offset, n.rows, ge, gerr, we, werr)
			}
			if werr != nil {
				break
			}
			n.rows++
		}
	}
	if n.rows == 0 {
		t.Fatal("no line rows compared")
	}
	return n
}

// compareLookups fails t unless looking up addrs in path gives the same
// frames with loadDWARF's reader as with (*elf.File).DWARF, and most
// addresses have a line (so that DWARF was used).
func compareLookups(t testing.TB, path string, addrs []uint64) {
	t.Helper()
	defer func(old bool) { fastDWARFLoad = old }(fastDWARFLoad)
	frames := func(fast bool) [][]Frame {
		fastDWARFLoad = fast
		var w warnings
		s := New(Options{Warn: w.warn})
		defer s.Close()
		var out [][]Frame
		for _, a := range addrs {
			fr, err := s.Lookup(path, nil, a)
			if err != nil {
				t.Fatalf("%#x: %v", a, err)
			}
			out = append(out, fr)
		}
		if len(w.msgs) > 0 {
			t.Fatalf("warnings (fast %v): %q", fast, w.msgs)
		}
		return out
	}
	want, got := frames(false), frames(true)
	withLine := 0
	for i, a := range addrs {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("%#x: frames %+v, want %+v", a, got[i], want[i])
		}
		if len(want[i]) > 0 && want[i][0].Line > 0 {
			withLine++
		}
	}
	if len(addrs) == 0 || withLine < len(addrs)/2 {
		t.Fatalf("only %d of %d addresses have a line", withLine, len(addrs))
	}
}

// libcDebugFile returns the path of the system libc's build-id debug file,
// or skips.
func libcDebugFile(t testing.TB) string {
	t.Helper()
	f, err := elf.Open(libcWithDebug(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return buildIDPath("/usr/lib/debug", buildID(f))
}

// TestLoadDWARFLibc compares loadDWARF with (*elf.File).DWARF on the system
// libc's debug file: every entry, the line tables of about 40 units, and
// the frames of about 4,000 addresses through the Symbolizer.
func TestLoadDWARFLibc(t *testing.T) {
	path := libcDebugFile(t)
	f, err := openELF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, fast := fastDWARFSections(f.File); !fast {
		t.Fatalf("%s: loadDWARF leaves it to the standard library", path)
	}
	t.Logf(".debug_info compression: %v", sectionCompression(t, f, ".debug_info"))
	want, got, _ := loadBoth(t, f)
	units := 0
	for r := want.Reader(); ; r.SkipChildren() {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		units++
	}
	t.Logf("%s", compareDWARF(t, want, got, max(1, units/40)))

	// Functions of libc's symbol table: entry and middle.
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var funcs []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
			funcs = append(funcs, s)
		}
	}
	var addrs []uint64
	for i := 0; i < len(funcs); i += max(1, len(funcs)/2000) {
		addrs = append(addrs, funcs[i].Value, funcs[i].Value+funcs[i].Size/2)
	}
	compareLookups(t, systemLibc, addrs)
	t.Logf("%d addresses give the same frames", len(addrs))
}

// TestLoadDWARFCorrupt checks that corrupt compressed sections give an
// error naming the section (not a panic, nor a huge allocation).
func TestLoadDWARFCorrupt(t *testing.T) {
	defer func() { recoverPanics = true }()
	recoverPanics = false
	for _, c := range []struct {
		fixture string
		name    string
		edit    func(b []byte, s *elf.Section, bo binary.ByteOrder)
		want    string
	}{
		{"c-gcc-O2-gz-zlib", "size 100 GB", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint64(b[s.Offset+8:], 100<<30)
		}, "impossible"},
		{"c-gcc-O2-gz-zlib", "size one more", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint64(b[s.Offset+8:], bo.Uint64(b[s.Offset+8:])+1)
		}, "shorter"},
		{"c-gcc-O2-gz-zlib", "size one less", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint64(b[s.Offset+8:], bo.Uint64(b[s.Offset+8:])-1)
		}, "longer"},
		{"c-gcc-O2-gz-zlib", "unknown type", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint32(b[s.Offset:], 99)
		}, "unknown compression type 99"},
		{"c-gcc-O2-gz-zlib", "corrupt stream", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			mid := s.Offset + s.FileSize/2
			copy(b[mid:mid+16], bytes.Repeat([]byte{0xff}, 16))
		}, "zlib"},
		{"c-gcc-O2-gz-zlib", "bad checksum", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			b[s.Offset+s.FileSize-1] ^= 1 // the stream ends the section
		}, "checksum"},
		{"c-gcc-O2-gz-zlib", "past the end", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			setSectionSize(b, s, 1<<40)
		}, "past the end of the file"},
		{"c-gcc-m32-gz-zlib", "32-bit size 4 GB", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint32(b[s.Offset+4:], 0xffffffff)
		}, "impossible"},
		{"c-gcc-m32-gz-zlib", "32-bit size one more", func(b []byte, s *elf.Section, bo binary.ByteOrder) {
			bo.PutUint32(b[s.Offset+4:], bo.Uint32(b[s.Offset+4:])+1)
		}, "shorter"},
	} {
		t.Run(c.fixture+"/"+c.name, func(t *testing.T) {
			src := build(t, fixtureByName(t, c.fixture))
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.NewFile(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			s := ef.Section(".debug_info")
			if s == nil || s.Flags&elf.SHF_COMPRESSED == 0 {
				t.Fatalf("%s: .debug_info not compressed", src)
			}
			c.edit(b, s, ef.ByteOrder)
			path := filepath.Join(t.TempDir(), "corrupt")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := openELF(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, _, err = loadDWARF(f, "")
			if err == nil || !strings.Contains(err.Error(), "section .debug_info: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming .debug_info and containing %q", err, c.want)
			}
			// The Symbolizer warns and falls back to symbol names.
			var w warnings
			sym := New(Options{Warn: w.warn, DebugDirs: []string{t.TempDir()}})
			defer sym.Close()
			if _, err := sym.Lookup(path, nil, 0x1139); err != nil {
				t.Fatal(err)
			}
			if len(w.msgs) == 0 || !strings.Contains(strings.Join(w.msgs, "\n"), ".debug_info") {
				t.Fatalf("warnings %q, want one naming .debug_info", w.msgs)
			}
		})
	}
}

// TestParseChdrTruncated checks the compression header's length checks,
// which debug/elf's own header check hides from file-level tests.
func TestParseChdrTruncated(t *testing.T) {
	for _, c := range []struct {
		class elf.Class
		n     int
	}{{elf.ELFCLASS32, 11}, {elf.ELFCLASS64, 23}, {elf.ELFCLASS32, 0}} {
		if _, _, _, err := parseChdr(c.class, binary.LittleEndian, make([]byte, c.n)); err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("%v, %d bytes: error %v, want truncated", c.class, c.n, err)
		}
	}
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b, uint32(elf.COMPRESS_ZLIB))
	binary.BigEndian.PutUint64(b[8:], 0x0102030405060708)
	typ, size, hdr, err := parseChdr(elf.ELFCLASS64, binary.BigEndian, b)
	if err != nil || typ != elf.COMPRESS_ZLIB || size != 0x0102030405060708 || hdr != 24 {
		t.Errorf("big-endian Elf64_Chdr: %v %#x %d %v", typ, size, hdr, err)
	}
}

// setSectionSize sets the size of s in the section header table of the
// 64-bit little-endian ELF file b.
func setSectionSize(b []byte, s *elf.Section, size uint64) {
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	shnum := uint64(binary.LittleEndian.Uint16(b[0x3c:]))
	for i := uint64(0); i < shnum; i++ {
		h := b[shoff+i*shentsize:]
		if binary.LittleEndian.Uint64(h[0x18:]) == s.Offset && binary.LittleEndian.Uint32(h[4:]) == uint32(s.Type) {
			binary.LittleEndian.PutUint64(h[0x20:], size)
			return
		}
	}
	panic("section not found")
}

// FuzzDWARFLoad feeds mutated ELF files with compressed debug sections to
// loadDWARF: an error or DWARF, never a panic or a hang; when both it and
// (*elf.File).DWARF succeed, the first entries agree.
func FuzzDWARFLoad(f *testing.F) {
	for _, b := range seedELFs(f, "c-gcc-O2-gz-zlib", "c-gcc-m32-gz-zlib", "c-gcc-O2-dwarf4-gz-zlib", "c-gcc-O2-zstd") {
		f.Add(b)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := fuzzFile(t, dir, data)
		ef, err := openELF(path)
		if err != nil {
			return
		}
		defer ef.Close()
		got, _, err := loadDWARF(ef, "")
		if err != nil {
			return
		}
		want, err := ef.DWARF()
		if err != nil {
			return
		}
		if err := sameEntries(want, got, 1000); err != nil {
			t.Fatal(err)
		}
	})
}

// sameEntries compares the first n entries of want and got.
func sameEntries(want, got *dwarf.Data, n int) error {
	wr, gr := want.Reader(), got.Reader()
	for i := 0; i < n; i++ {
		we, werr := wr.Next()
		ge, gerr := gr.Next()
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(we, ge) {
			return fmt.Errorf("entry %d: %+v (%v), want %+v (%v)", i, ge, gerr, we, werr)
		}
		if we == nil || werr != nil {
			return nil
		}
	}
	return nil
}

// BenchmarkLoadDWARF loads the DWARF of libc's debug file with
// (*elf.File).DWARF ("stdlib") and with loadDWARF ("fast").
func BenchmarkLoadDWARF(b *testing.B) {
	path := libcDebugFile(b)
	for _, fast := range []bool{false, true} {
		name := "stdlib"
		if fast {
			name = "fast"
		}
		b.Run(name, func(b *testing.B) {
			defer func(old bool) { fastDWARFLoad = old }(fastDWARFLoad)
			fastDWARFLoad = fast
			f, err := openELF(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := loadDWARF(f, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
