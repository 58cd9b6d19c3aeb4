package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLookup feeds mutated ELF files to Lookup: it must return frames or an
// error, never panic or hang. Panic recovery is off while fuzzing, so that
// a panic in this package or in debug/elf and debug/dwarf is reported
// rather than turned into an error.
func FuzzLookup(f *testing.F) {
	for _, b := range seedELFs(f, "c-gcc-O2", "c-gcc-O2-dwarf4", "c-gcc-O2-gz-zlib", "lib-gcc-O2-stripped") {
		f.Add(b, uint64(0x1139))
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"), uint64(0))

	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		path := fuzzFile(t, dir, data)
		addrs := []uint64{addr}
		if ef, err := elf.NewFile(bytes.NewReader(data)); err == nil {
			for _, sec := range ef.Sections {
				if sec.Flags&elf.SHF_EXECINSTR != 0 && sec.Size > 0 && len(addrs) < 8 {
					addrs = append(addrs, sec.Addr+addr%sec.Size)
				}
			}
		}
		s := New(Options{DebugDirs: []string{dir}, Warn: func(string) {}})
		defer s.Close()
		for _, a := range addrs {
			fr, err := s.Lookup(path, nil, a)
			if err != nil && fr != nil {
				t.Fatalf("Lookup returned both frames and error %v", err)
			}
		}
	})
}

// fuzzFile writes data to dir/fuzz.elf for one fuzz input and turns panic
// recovery off until the input is done, so that a panic in this package or
// in debug/elf and debug/dwarf is reported rather than turned into an error.
func fuzzFile(t *testing.T, dir string, data []byte) string {
	recoverPanics = false
	t.Cleanup(func() { recoverPanics = true })
	path := filepath.Join(dir, "fuzz.elf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// seedELFs builds the named fixtures (those whose compiler is installed)
// and returns their bytes.
func seedELFs(f *testing.F, names ...string) [][]byte {
	var out [][]byte
	for _, name := range names {
		fx := fixtureByName(f, name)
		if _, ok := compiler(fx.cc); !ok {
			continue
		}
		b, err := os.ReadFile(build(f, fx))
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
