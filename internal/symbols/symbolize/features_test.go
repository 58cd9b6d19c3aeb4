package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// cxxfilt demangles names with binutils' c++filt.
func cxxfilt(t *testing.T, names []string) []string {
	t.Helper()
	if _, err := exec.LookPath("c++filt"); err != nil {
		t.Skip("c++filt (binutils) not installed")
	}
	cmd := exec.Command("c++filt")
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	res := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(res) != len(names) {
		t.Fatalf("c++filt returned %d names for %d", len(res), len(names))
	}
	return res
}

// TestCppNames checks the function names at calls to operator new in the
// C++ fixture: member functions, templates and lambdas are demangled with
// parameters like c++filt does.
func TestCppNames(t *testing.T) {
	for _, name := range []string{"cpp-gcc-O0", "cpp-gcc-O2", "cpp-clang-O0", "cpp-clang-O2"} {
		t.Run(name, func(t *testing.T) {
			path := build(t, fixtureByName(t, name))
			ins := disassemble(t, path)
			type site struct {
				sym  string
				addr uint64
			}
			var sites []site
			for i := 0; i+1 < len(ins); i++ {
				if strings.HasPrefix(ins[i].text, "call") && (strings.Contains(ins[i].text, "<_Znwm@plt>") || strings.Contains(ins[i].text, "<_Znam@plt>")) {
					sites = append(sites, site{ins[i].fn, ins[i+1].addr - 1})
				}
			}
			var syms []string
			for _, s := range sites {
				syms = append(syms, s.sym)
				// The DWARF linkage name has no clone suffix.
				if i := strings.IndexByte(s.sym, '.'); i > 0 {
					syms = append(syms, s.sym[:i])
				} else {
					syms = append(syms, s.sym)
				}
			}
			want := cxxfilt(t, syms)
			s := New(Options{})
			defer s.Close()
			seen := map[string]bool{}
			for i, st := range sites {
				fr, err := s.Lookup(path, nil, st.addr)
				if err != nil {
					t.Fatal(err)
				}
				if len(fr) == 0 {
					t.Errorf("%#x (in %s): no frames", st.addr, st.sym)
					continue
				}
				got := fr[len(fr)-1].Function
				if got != want[2*i] && got != want[2*i+1] {
					t.Errorf("%#x: outermost function %q, want %q (c++filt %s)", st.addr, got, want[2*i], st.sym)
				}
				if fr[len(fr)-1].Inlined {
					t.Errorf("%#x: outermost frame marked inlined", st.addr)
				}
				own := strings.HasPrefix(st.sym, "_ZN4shop") || strings.HasPrefix(st.sym, "main") || strings.HasPrefix(st.sym, "_ZZ4main")
				if own && (filepath.Base(fr[len(fr)-1].File) != "shop.cpp" || fr[len(fr)-1].Line == 0) {
					t.Errorf("%#x: outermost frame at %s:%d, want shop.cpp", st.addr, fr[len(fr)-1].File, fr[len(fr)-1].Line)
				}
				seen[got] = true
			}
			for _, w := range []string{"shop::Cart::add(int)", "int* shop::make_array<int>(unsigned long, int)",
				"double* shop::make_array<double>(unsigned long, double)"} {
				if !seen[w] {
					t.Errorf("no call to operator new found in %s; saw %v", w, seen)
				}
			}
			lambda := false
			for f := range seen {
				if strings.HasPrefix(f, "main::{lambda(int)#1}::operator()(int) const") || strings.HasPrefix(f, "main::$_") {
					lambda = true
				}
			}
			if !lambda {
				t.Errorf("no lambda frame among %v", seen)
			}
		})
	}
}

// TestDebugLink symbolizes a stripped binary through its .gnu_debuglink
// file without warnings, with file and line information.
func TestDebugLink(t *testing.T) {
	path := build(t, fixtureByName(t, "cpp-gcc-O2-debuglink"))
	checkSplitDebug(t, path, Options{})
}

// TestBuildIDDir symbolizes a stripped binary through
// DEBUGDIR/.build-id/xx/yyyy.debug.
func TestBuildIDDir(t *testing.T) {
	path := build(t, fixtureByName(t, "cpp-gcc-O2-buildid"))
	dbg := filepath.Join(filepath.Dir(path), "debug")
	checkSplitDebug(t, path, Options{DebugDirs: []string{"/nonexistent", dbg}})

	// Without the directory there is no debug info: a warning, and only
	// the (few) .dynsym names of a stripped PIE.
	var w warnings
	s := New(Options{Warn: w.warn})
	defer s.Close()
	for _, a := range callSites(disassemble(t, path+".orig")) {
		fr, err := s.Lookup(path, nil, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fr {
			if f.File != "" || f.Line != 0 {
				t.Fatalf("%#x: file/line %s:%d without debug info", a, f.File, f.Line)
			}
		}
	}
	if len(w.msgs) != 1 || !strings.Contains(w.msgs[0], "no debug info") {
		t.Errorf("warnings %q, want one about missing debug info", w.msgs)
	}
}

// checkSplitDebug looks up the call sites of path (a stripped binary whose
// original is path.orig) and expects the same frames as in the original,
// with source lines, and no warnings.
func checkSplitDebug(t *testing.T, path string, opts Options) {
	t.Helper()
	var w warnings
	opts.Warn = w.warn
	s := New(opts)
	defer s.Close()
	ref := New(Options{})
	defer ref.Close()
	sites := callSites(disassemble(t, path+".orig"))
	withLine := 0
	for _, a := range sites {
		got, err := s.Lookup(path, nil, a)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.Lookup(path+".orig", nil, a)
		if err != nil {
			t.Fatal(err)
		}
		if frameKey(got) != frameKey(want) {
			t.Errorf("%#x: stripped %s, original %s", a, frameKey(got), frameKey(want))
		}
		if len(got) > 0 && got[0].Line > 0 {
			withLine++
		}
	}
	if withLine < len(sites)*9/10 {
		t.Errorf("only %d of %d call sites have a line", withLine, len(sites))
	}
	if len(w.msgs) > 0 {
		t.Errorf("warnings: %q", w.msgs)
	}
}

// TestBuildIDMismatch: when the file on disk is not the build the process
// loaded, Lookup must not return its names.
func TestBuildIDMismatch(t *testing.T) {
	path := build(t, fixtureByName(t, "cpp-gcc-O2-buildid"))
	dbg := filepath.Join(filepath.Dir(path), "debug")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f)
	f.Close()
	ins := disassemble(t, path+".orig")
	sites := callSites(ins)
	add := callsTo(ins, "_ZN4shop4Cart3addEi", "call")

	t.Run("match", func(t *testing.T) {
		s := New(Options{DebugDirs: []string{dbg}})
		defer s.Close()
		fr, err := s.Lookup(path, id, add[0])
		if err != nil || len(fr) == 0 || fr[len(fr)-1].Function != "shop::Cart::add(int)" || fr[0].Line == 0 {
			t.Fatalf("Lookup with the right build id: %v, %v", fr, err)
		}
	})

	t.Run("mismatch", func(t *testing.T) {
		var w warnings
		s := New(Options{DebugDirs: []string{t.TempDir()}, Warn: w.warn})
		defer s.Close()
		other := bytes.Repeat([]byte{0xab}, len(id))
		for _, a := range sites[:3] {
			fr, err := s.Lookup(path, other, a)
			if !errors.Is(err, ErrBuildIDMismatch) {
				t.Fatalf("Lookup with another build id: err %v, want ErrBuildIDMismatch", err)
			}
			if fr != nil {
				t.Fatalf("Lookup with another build id returned frames %v", fr)
			}
		}
		if len(w.msgs) != 1 {
			t.Errorf("warnings %q, want exactly one", w.msgs)
		}
	})

	t.Run("debug-file-for-wanted-id", func(t *testing.T) {
		// The process loaded the C++ build; on disk there is now the C
		// build. The debug file of the loaded build is in the build-id
		// tree, so its names are used, not the ones of the file on disk.
		other := build(t, fixtureByName(t, "c-gcc-O2"))
		s := New(Options{DebugDirs: []string{dbg}})
		defer s.Close()
		ref := New(Options{})
		defer ref.Close()
		for _, a := range sites {
			got, err := s.Lookup(other, id, a)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ref.Lookup(path+".orig", nil, a)
			if frameKey(got) != frameKey(want) {
				t.Fatalf("%#x: %s, want %s (from the loaded build's debug file)", a, frameKey(got), frameKey(want))
			}
		}
	})
}

// TestCorruptDebugFile: a truncated or garbled debug file degrades to
// symbol-table names with one warning.
func TestCorruptDebugFile(t *testing.T) {
	src := build(t, fixtureByName(t, "cpp-gcc-O2"))
	sites := callSites(disassemble(t, src))
	ref := New(Options{})
	defer ref.Close()

	// checkDegraded expects names (the ELF symbol containing each site's
	// outermost function), no file/line, and one warning containing want.
	checkDegraded := func(t *testing.T, path string, opts Options, want string) {
		t.Helper()
		var w warnings
		opts.Warn = w.warn
		s := New(opts)
		defer s.Close()
		named := 0
		for _, a := range sites {
			fr, err := s.Lookup(path, nil, a)
			if err != nil {
				t.Fatalf("%#x: %v", a, err)
			}
			if len(fr) > 1 {
				t.Fatalf("%#x: %d frames without debug info", a, len(fr))
			}
			if len(fr) == 1 {
				if fr[0].Line != 0 {
					t.Fatalf("%#x: line %d without debug info", a, fr[0].Line)
				}
				if fr[0].Function != "" {
					named++
				}
			}
		}
		if named < len(sites)*9/10 {
			t.Errorf("only %d of %d sites named", named, len(sites))
		}
		if len(w.msgs) != 1 || !strings.Contains(w.msgs[0], want) {
			t.Errorf("warnings %q, want one containing %q", w.msgs, want)
		}
	}

	t.Run("debuglink-truncated", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "prog")
		if err := copyFile(src, bin); err != nil {
			t.Fatal(err)
		}
		if _, err := splitDebugLink("--strip-debug")(dir, bin); err != nil {
			t.Fatal(err)
		}
		truncate(t, bin+".debug")
		checkDegraded(t, bin, Options{DebugDirs: []string{t.TempDir()}}, "CRC32")
	})

	t.Run("buildid-truncated", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "prog")
		if err := copyFile(src, bin); err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		id := buildID(f)
		f.Close()
		dbg := buildIDPath(filepath.Join(dir, "debug"), id)
		os.MkdirAll(filepath.Dir(dbg), 0o755)
		if err := run("objcopy", "--only-keep-debug", bin, dbg); err != nil {
			t.Fatal(err)
		}
		if err := run("strip", "--strip-debug", bin); err != nil {
			t.Fatal(err)
		}
		truncate(t, dbg)
		checkDegraded(t, bin, Options{DebugDirs: []string{filepath.Join(dir, "debug")}}, "no debug info")
	})

	t.Run("garbled-debug-info", func(t *testing.T) {
		// Garble the entries of the first of two units of an unstripped
		// binary, keeping its header and compilation-unit entry: loading
		// succeeds, the unit fails to parse on first use, and lookups fall
		// back to symbol names.
		src := build(t, fixtureByName(t, "c-gcc-O2-two-units"))
		sites := callSites(disassemble(t, src))
		dir := t.TempDir()
		bin := filepath.Join(dir, "prog")
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		sec := f.Section(".debug_info")
		if sec == nil || sec.Flags&elf.SHF_COMPRESSED != 0 {
			t.Skip("fixture has no plain .debug_info")
		}
		unitLen := uint64(f.ByteOrder.Uint32(b[sec.Offset:]))
		if unitLen < 400 || unitLen+4 >= sec.FileSize {
			t.Skipf("unexpected first unit length %d of %d", unitLen, sec.FileSize)
		}
		for i := sec.Offset + 200; i < sec.Offset+4+unitLen; i++ {
			b[i] = 0xff
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		var w warnings
		s := New(Options{Warn: w.warn, DebugDirs: []string{t.TempDir()}})
		defer s.Close()
		named, lines := 0, 0
		for _, a := range sites {
			fr, err := s.Lookup(bin, nil, a)
			if err != nil {
				t.Fatalf("%#x: %v", a, err)
			}
			if len(fr) > 0 && fr[len(fr)-1].Function != "" {
				named++
			}
			if len(fr) > 0 && fr[0].Line > 0 {
				lines++
			}
		}
		if named < len(sites)*9/10 {
			t.Errorf("only %d of %d sites named", named, len(sites))
		}
		if lines == 0 {
			t.Errorf("no lines at all: the intact second unit (lib.c) should give some")
		}
		if lines == len(sites) {
			t.Errorf("all %d sites have lines although the first unit is garbled", lines)
		}
		if len(w.msgs) != 1 || !strings.Contains(w.msgs[0], "corrupt debug info") || !strings.Contains(w.msgs[0], "compilation unit at .debug_info+0x") {
			t.Errorf("warnings %q, want one about corrupt debug info in the first unit", w.msgs)
		}
		t.Logf("warning: %q", w.msgs)
	})
}

// truncate cuts a file to half its size.
func truncate(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// TestStrippedDynsym: a stripped shared library without debug file still
// names its exported functions from .dynsym.
func TestStrippedDynsym(t *testing.T) {
	path := build(t, fixtureByName(t, "lib-gcc-O2-stripped"))
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := f.DynamicSymbols()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var w warnings
	s := New(Options{Warn: w.warn, DebugDirs: []string{t.TempDir()}})
	defer s.Close()
	found := 0
	for _, sym := range dyn {
		if !strings.HasPrefix(sym.Name, "lib_") || elf.ST_TYPE(sym.Info) != elf.STT_FUNC {
			continue
		}
		for _, off := range []uint64{0, sym.Size / 2, sym.Size - 1} {
			fr, err := s.Lookup(path, nil, sym.Value+off)
			if err != nil {
				t.Fatal(err)
			}
			if len(fr) != 1 || fr[0].Function != sym.Name || fr[0].File != "" || fr[0].Line != 0 {
				t.Errorf("%s+%#x: %+v, want just the name", sym.Name, off, fr)
			}
		}
		found++
	}
	if found != 3 {
		t.Errorf("found %d exported lib_ functions, want 3", found)
	}
	if len(w.msgs) != 1 {
		t.Errorf("warnings %q, want one", w.msgs)
	}
}

// TestStrippedExecutable: in an executable stripped to its .dynsym, an
// address inside an exported function is named after it, and any other (a
// static function's, the start files') is named after nothing, however
// near the exported function below it: the caller shows it as
// module+offset.
func TestStrippedExecutable(t *testing.T) {
	path := build(t, fixtureByName(t, "c-gcc-O2-rdynamic-stripped"))
	dyn := elfFuncSymbols(t, path)
	if f, err := elf.Open(path); err != nil {
		t.Fatal(err)
	} else if _, err := f.Symbols(); err == nil {
		f.Close()
		t.Fatalf("%s still has a .symtab", path)
	} else {
		f.Close()
	}
	s := New(Options{DebugDirs: []string{t.TempDir()}})
	defer s.Close()
	var named, unnamed int
	for _, in := range disassemble(t, path+".orig") {
		want := ""
		for _, d := range dyn {
			if d.Size > 0 && d.Value <= in.addr && in.addr < d.Value+d.Size {
				want = d.Name
			}
		}
		fr, err := s.Lookup(path, nil, in.addr)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(fr) > 0 {
			got = fr[0].Function
			if len(fr) != 1 || got == "" {
				t.Errorf("%#x (in %s): %+v, want one named frame or none", in.addr, in.fn, fr)
			}
		}
		if got != want {
			t.Errorf("%#x (in %s): named %q, want %q", in.addr, in.fn, got, want)
		}
		if want == "" {
			unnamed++
		} else {
			named++
		}
		if in.fn == "sum_list" && got != "" {
			t.Errorf("%#x in the static sum_list: named %q", in.addr, got)
		}
	}
	if named == 0 || unnamed == 0 {
		t.Errorf("%d instructions in exported functions, %d outside: the fixture does not test both", named, unnamed)
	}
	// addr2line names code past an exported function after it; where it
	// does, llvm-symbolizer or the symbol's size must side with Lookup.
	c := compareWithAddr2line(t, s, path, path, sampleAddrs(disassemble(t, path+".orig"), 1))
	t.Logf("%v", c)
	if c.rateEither() < 1 {
		t.Errorf("%d addresses differ from addr2line unexplained: %q", len(c.mismatches), c.mismatches)
	}
}

// TestBadFiles: missing, non-ELF and empty files give cached errors (one
// warning each), never panics.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("not an ELF file\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	var w warnings
	s := New(Options{Warn: w.warn})
	defer s.Close()
	for _, p := range []string{filepath.Join(dir, "missing"), text, empty, dir} {
		for i := 0; i < 2; i++ {
			fr, err := s.Lookup(p, nil, 0x1000)
			if err == nil || fr != nil {
				t.Errorf("Lookup(%s): %v, %v; want an error", p, fr, err)
			}
			if err != nil && !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the path", err)
			}
		}
	}
	if _, err := s.Lookup(filepath.Join(dir, "missing"), nil, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if len(w.msgs) != 4 {
		t.Errorf("%d warnings, want 4: %q", len(w.msgs), w.msgs)
	}
}

// TestUnknownAddress: addresses outside any section give no frames and no
// error.
func TestUnknownAddress(t *testing.T) {
	path := build(t, fixtureByName(t, "c-gcc-O2"))
	s := New(Options{})
	defer s.Close()
	for _, a := range []uint64{0, 1, 1 << 40, ^uint64(0)} {
		fr, err := s.Lookup(path, nil, a)
		if err != nil || fr != nil {
			t.Errorf("Lookup(%#x) = %v, %v; want nothing", a, fr, err)
		}
	}
}

// TestSmallCache: with a cache bound far below one unit, results are the
// same as with the default cache.
func TestSmallCache(t *testing.T) {
	path := build(t, fixtureByName(t, "cpp-gcc-O2"))
	addrs := sampleAddrs(disassemble(t, path), 2)
	big := New(Options{})
	defer big.Close()
	small := New(Options{CacheBytes: 1})
	defer small.Close()
	for _, a := range addrs {
		g, _ := small.Lookup(path, nil, a)
		w, _ := big.Lookup(path, nil, a)
		if frameKey(g) != frameKey(w) {
			t.Fatalf("%#x: small cache %s, default %s", a, frameKey(g), frameKey(w))
		}
	}
	if small.lru.Len() > 1 {
		t.Errorf("small cache holds %d units", small.lru.Len())
	}
}

// TestConcurrent runs lookups from several goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	paths := []string{build(t, fixtureByName(t, "cpp-gcc-O2")), build(t, fixtureByName(t, "c-gcc-O2"))}
	s := New(Options{})
	defer s.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			p := paths[g%2]
			for _, a := range callSites(disassemble(t, p)) {
				if _, err := s.Lookup(p, nil, a); err != nil {
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestIsAllocatorFrame(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	const libstdcxx = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
	cases := []struct {
		f      Frame
		module string
		want   bool
	}{
		{Frame{Function: "operator new(unsigned long)"}, libstdcxx, true},
		{Frame{Function: "operator new[](unsigned long)"}, libstdcxx, true},
		{Frame{Function: "operator new(unsigned long, std::nothrow_t const&)"}, libstdcxx, true},
		{Frame{Function: "operator new(unsigned long, std::align_val_t)"}, "/app/prog", true},
		{Frame{Function: "operator delete(void*, unsigned long)"}, libstdcxx, true},
		{Frame{Function: "_Znwm"}, libstdcxx, true},
		{Frame{Function: "operator<<(std::ostream&, int)"}, libstdcxx, false},
		{Frame{Function: "operator new_handler_thing"}, "/app/prog", false},
		{Frame{Function: "shop::Pool::operator new(unsigned long)"}, "/app/prog", false},
		{Frame{Function: "malloc"}, libc, true},
		{Frame{Function: "__libc_malloc"}, libc, true},
		{Frame{Function: "_int_malloc"}, libc, true},
		{Frame{Function: "_int_realloc"}, libc, true},
		{Frame{Function: "tcache_init"}, libc, true},
		{Frame{Function: "free"}, "/lib/x86_64-linux-gnu/libc-2.31.so", true},
		{Frame{Function: "checked_request2size", File: "./malloc/malloc.c", Inlined: true}, libc, true},
		{Frame{Function: "__libc_start_main"}, libc, false},
		{Frame{Function: "strdup"}, libc, false},
		{Frame{Function: "malloc"}, "/app/prog", false},
		{Frame{Function: "anything"}, "/opt/leakpath/libleakpath.so", true},
		{Frame{}, "/usr/lib/libleakpath-agent.so.1", true},
		{Frame{}, libc, false},
	}
	for _, c := range cases {
		if got := IsAllocatorFrame(c.f, c.module); got != c.want {
			t.Errorf("IsAllocatorFrame(%+v, %s) = %v, want %v", c.f, c.module, got, c.want)
		}
	}
}

// TestCompressedDebugSections checks that the compressed fixtures compared
// with addr2line really have compressed debug sections of each kind, and
// that lookups in them equal those in an uncompressed build.
func TestCompressedDebugSections(t *testing.T) {
	plain := build(t, fixtureByName(t, "c-gcc-O2"))
	sites := callSites(disassemble(t, plain))
	for _, c := range []struct {
		fixture string
		section string
		typ     elf.CompressionType // 0 for .zdebug (GNU zlib)
	}{
		{"c-gcc-O2-gz-zlib", ".debug_info", elf.COMPRESS_ZLIB},
		{"c-gcc-O2-zstd", ".debug_info", elf.COMPRESS_ZSTD},
		{"c-gcc-O2-zdebug", ".zdebug_info", 0},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			path := build(t, fixtureByName(t, c.fixture))
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			sec := f.Section(c.section)
			if sec == nil {
				t.Fatalf("%s has no %s", path, c.section)
			}
			if c.typ != 0 {
				if sec.Flags&elf.SHF_COMPRESSED == 0 {
					t.Fatalf("%s: %s not SHF_COMPRESSED", path, c.section)
				}
				// The Elf64_Chdr at the start of the section's bytes.
				raw, err := os.ReadFile(path)
				if err != nil || sec.Offset+4 > uint64(len(raw)) {
					t.Fatalf("read %s: %v", path, err)
				}
				ch := raw[sec.Offset : sec.Offset+4]
				if got := elf.CompressionType(f.ByteOrder.Uint32(ch)); got != c.typ {
					t.Fatalf("%s: %s compressed with %v, want %v", path, c.section, got, c.typ)
				}
			}
			f.Close()
			// Same binary code as c-gcc-O2 (only debug sections differ) for
			// the objcopy variants; the -gz build is compared with its own
			// disassembly.
			addrs := sites
			if c.fixture == "c-gcc-O2-gz-zlib" {
				addrs = callSites(disassemble(t, path))
			}
			s := New(Options{})
			defer s.Close()
			withLine := 0
			for _, a := range addrs {
				fr, err := s.Lookup(path, nil, a)
				if err != nil {
					t.Fatal(err)
				}
				if len(fr) > 0 && fr[0].Line > 0 {
					withLine++
				}
			}
			if withLine < len(addrs)/2 {
				t.Errorf("only %d of %d call sites have lines", withLine, len(addrs))
			}
		})
	}
}

// TestFixtureKinds checks that the PIE, non-PIE and shared-library fixtures
// are what their names say, so that the addr2line comparisons cover each.
func TestFixtureKinds(t *testing.T) {
	for _, c := range []struct {
		fixture string
		typ     elf.Type
		interp  bool
	}{
		{"c-gcc-O2-pie", elf.ET_DYN, true},
		{"c-gcc-O2-nopie", elf.ET_EXEC, true},
		{"cpp-gcc-O2-nopie", elf.ET_EXEC, true},
		{"lib-gcc-O2", elf.ET_DYN, false},
	} {
		f, err := elf.Open(build(t, fixtureByName(t, c.fixture)))
		if err != nil {
			t.Fatal(err)
		}
		interp := false
		for _, p := range f.Progs {
			interp = interp || p.Type == elf.PT_INTERP
		}
		if f.Type != c.typ || interp != c.interp {
			t.Errorf("%s: type %v, interpreter %v; want %v, %v", c.fixture, f.Type, interp, c.typ, c.interp)
		}
		f.Close()
	}
}
