package symbolize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// warnings collects Options.Warn calls.
type warnings struct{ msgs []string }

func (w *warnings) warn(msg string) { w.msgs = append(w.msgs, msg) }

// TestAgainstAddr2line compares every frame Lookup returns with
// `addr2line -i -f -C` on call sites and sampled instructions of each
// fixture build.
func TestAgainstAddr2line(t *testing.T) {
	var all comparison
	for _, fx := range allFixtures {
		t.Run(fx.name, func(t *testing.T) {
			path := build(t, fx)
			ref := path
			if fx.ref != "" {
				ref = path + fx.ref
			}
			var w warnings
			s := New(Options{Warn: w.warn, DebugDirs: []string{filepath.Join(filepath.Dir(path), "debug")}})
			defer s.Close()
			addrs := sampleAddrs(disassemble(t, ref), 3)
			c := compareWithAddr2line(t, s, path, ref, addrs)
			all.add(c)
			t.Logf("%s: %v; warnings: %q", fx.name, c, w.msgs)
			for i, m := range c.mismatches {
				if os.Getenv("SYMBOLIZE_ALL_MISMATCHES") != "" {
					t.Logf("mismatch %s", m)
					continue
				}
				if i == 10 {
					t.Logf("... %d more", len(c.mismatches)-10)
					break
				}
				t.Logf("mismatch %s", m)
			}
			if c.rateExplained() < 0.99 {
				t.Errorf("%s: agreement with addr2line or llvm-symbolizer %.2f%% (%.2f%% with naming differences) < 99%%",
					fx.name, 100*c.rateEither(), 100*c.rateExplained())
			}
			if c.rateEither() < 0.80 {
				t.Errorf("%s: agreement with addr2line or llvm-symbolizer %.2f%% < 80%%", fx.name, 100*c.rateEither())
			}
		})
	}
	if all.total > 0 {
		t.Logf("all fixtures: %v", all)
		if all.colAgree < all.colTotal*99/100 {
			t.Errorf("columns agree with llvm-symbolizer at only %d of %d addresses", all.colAgree, all.colTotal)
		}
		if all.rate() < 0.90 {
			t.Errorf("overall agreement with addr2line %.2f%% < 90%%", 100*all.rate())
		}
	}
}

// TestInlineChain checks the inlined frames at the malloc call of
// build_list in the -O2 C fixture: alloc_node inlined into push inlined into
// build_list, each with its call line.
func TestInlineChain(t *testing.T) {
	for _, name := range []string{"c-gcc-O2", "c-gcc-O2-dwarf4", "c-clang-O2"} {
		t.Run(name, func(t *testing.T) {
			path := build(t, fixtureByName(t, name))
			ins := disassemble(t, path)
			sites := callsTo(ins, "build_list", "<malloc@plt>")
			if len(sites) == 0 {
				t.Fatalf("no call to malloc in build_list of %s", path)
			}
			s := New(Options{})
			defer s.Close()
			fr, err := s.Lookup(path, nil, sites[0])
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range fr {
				names = append(names, f.Function)
			}
			if got, want := strings.Join(names, " <- "), "alloc_node <- push <- build_list"; got != want {
				t.Fatalf("frames at %#x: %s, want %s (%+v)", sites[0], got, want, fr)
			}
			if !fr[0].Inlined || !fr[1].Inlined || fr[2].Inlined {
				t.Errorf("Inlined flags %v %v %v, want true true false", fr[0].Inlined, fr[1].Inlined, fr[2].Inlined)
			}
			src := readSourceLines(t, "basic.c")
			for i, want := range []string{"malloc(", "alloc_node(", "push("} {
				if fr[i].Line <= 0 || fr[i].Line > len(src) || !strings.Contains(src[fr[i].Line-1], want) {
					t.Errorf("frame %d (%s) at basic.c:%d, want a line containing %q", i, fr[i].Function, fr[i].Line, want)
				}
				if filepath.Base(fr[i].File) != "basic.c" {
					t.Errorf("frame %d file %q, want basic.c", i, fr[i].File)
				}
			}
		})
	}
}

func readSourceLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(srcPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// TestValgrindName picks among a function's aliases the name valgrind
// shows: PMPI_F over MPI_F, the shortest, the versioned one, then the
// first alphabetically, of those covering the address.
func TestValgrindName(t *testing.T) {
	st := &symtab{
		syms: []symbol{
			{value: 0x100, size: 0x10, name: "__GI___strdup", section: 1, isFunc: true},
			{value: 0x100, size: 0x10, name: "__strdup", section: 1, isFunc: true},
			{value: 0x100, size: 0x10, name: "strdup", section: 1, isFunc: true},
			{value: 0x100, size: 0x10, name: "strdupx@GLIBC_2.2.5", section: 1, isFunc: true},
			{value: 0x200, size: 0x8, name: "bbb", section: 1, isFunc: true},
			{value: 0x200, size: 0x8, name: "aaa", section: 1, isFunc: true},
			{value: 0x300, size: 0, name: "nosize", section: 1, isFunc: true},
			// Open MPI: MPI_Init a weak alias of PMPI_Init, which valgrind
			// names (its m_debuginfo's "MPI hack"), though longer.
			{value: 0x400, size: 0x10, name: "MPI_Init", section: 1, isFunc: true},
			{value: 0x400, size: 0x10, name: "PMPI_Init", section: 1, isFunc: true},
			// As long: the versioned name.
			{value: 0x500, size: 0x10, name: "fooo", section: 1, isFunc: true},
			{value: 0x500, size: 0x10, name: "foo@V1", section: 1, isFunc: true},
			{value: 0x500, size: 0x10, name: "foo", section: 1, isFunc: true},
		},
		sections: []secRange{{lo: 0x100, hi: 0x600, idx: 1}},
	}
	st.extents()
	for _, tt := range []struct {
		addr uint64
		want string
	}{
		{0x104, "strdup"}, {0x200, "aaa"}, {0x207, "aaa"}, {0x208, ""}, {0x300, "nosize"}, {0x301, ""}, {0x50, ""},
		{0x404, "PMPI_Init"}, {0x500, "foo@V1"},
	} {
		if got := st.valgrindName(tt.addr); got != tt.want {
			t.Errorf("valgrindName(%#x) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
