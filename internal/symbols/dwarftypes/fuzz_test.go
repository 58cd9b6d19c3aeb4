package dwarftypes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// FuzzTypes feeds mutated ELF files to Types and lays out every global's
// type and every vtable's class: errors, never a panic or a hang. Panic
// recovery is off here while fuzzing (symbolize's FuzzLookup fuzzes the
// loading of the files itself).
func FuzzTypes(f *testing.F) {
	fx, err := testfixture.NewCache(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	src := filepath.Join("..", "..", "..", "testdata", "symbolize", "basic.c")
	for _, flags := range [][]string{{"-O2", "-g"}, {"-O2", "-gdwarf-4"}, {"-O2"}} {
		b, err := os.ReadFile(fx.Build(f, src, flags...))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		recoverPanics = false
		t.Cleanup(func() { recoverPanics = true })
		path := filepath.Join(dir, "fuzz.elf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s := symbolize.New(symbolize.Options{DebugDirs: []string{dir}, Warn: func(string) {}})
		defer s.Close()
		mt, err := NewReader(s).Types(path, nil)
		if err != nil {
			return
		}
		for _, g := range mt.Globals {
			if g.Type != None {
				mt.Fields(g.Type)
			}
		}
		for _, v := range mt.Vtables {
			if id, ok := mt.ByName(v.Class); ok {
				mt.Fields(id)
			}
		}
	})
}
