package symbolize_test

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// refFrame is one line pair of addr2line -i -f -C (or llvm-symbolizer).
type refFrame struct {
	function, file string
	line           int
}

// reference symbolizes module-relative addresses of module with tool
// ("addr2line" or an llvm-symbolizer binary), one inline chain each.
func reference(t *testing.T, tool, module string, addrs []uint64) map[uint64][]refFrame {
	t.Helper()
	var args []string
	if tool == "addr2line" {
		args = []string{"-a", "-i", "-f", "-C", "-e", module}
	} else {
		args = []string{"--obj=" + module, "--inlining", "--functions=linkage", "--demangle", "--output-style=GNU", "--addresses"}
	}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("0x%x", a))
	}
	out, err := exec.Command(tool, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	res := map[uint64][]refFrame{}
	var cur uint64
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "0x") {
			cur, _ = strconv.ParseUint(l[2:], 16, 64)
			continue
		}
		if i+1 >= len(lines) {
			break
		}
		loc := strings.TrimSpace(lines[i+1])
		i++
		f := refFrame{function: l}
		if f.function == "??" {
			f.function = ""
		}
		if j := strings.LastIndexByte(loc, ':'); j > 0 {
			f.file = loc[:j]
			ln := loc[j+1:]
			if k := strings.IndexByte(ln, ' '); k >= 0 {
				ln = ln[:k] // "(discriminator N)"
			}
			if k := strings.IndexByte(ln, ':'); k >= 0 {
				ln = ln[:k] // column
			}
			f.line, _ = strconv.Atoi(ln)
		}
		if f.file == "??" {
			f.file = ""
		}
		res[cur] = append(res[cur], f)
	}
	return res
}

// symBuild is one way of building the fixtures.
type symBuild struct {
	cc, cxx string
	flags   []string
	ref     string // the reference symbolizer
}

func symBuilds(t *testing.T) []symBuild {
	var out []symBuild
	compilers := [][3]string{{"cc", "c++", "addr2line"}}
	if _, err := exec.LookPath("clang-19"); err == nil {
		ref := "llvm-symbolizer-19"
		if _, err := exec.LookPath(ref); err != nil {
			ref = "llvm-symbolizer"
		}
		// addr2line 2.40 drops inlined frames of clang's DWARF 5 range
		// lists: llvm-symbolizer is clang's reference.
		compilers = append(compilers, [3]string{"clang-19", "clang++-19", ref})
	} else {
		t.Log("clang-19 is not installed: only gcc builds are compared (apt-get install clang-19)")
	}
	for _, c := range compilers {
		for _, opt := range []string{"-O0", "-O2"} {
			for _, g := range []string{"-g", ""} {
				for _, pie := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
					flags := []string{opt}
					if g != "" {
						flags = append(flags, g)
					}
					out = append(out, symBuild{cc: c[0], cxx: c[1], flags: append(flags, pie...), ref: c[2]})
				}
			}
		}
	}
	return out
}

// TestStacksMatchAddr2line: for every frame of every leak of the
// fixtures, in every build, the function, file and line leakpath reports
// equal the reference symbolizer's for the same address (the return
// address minus one), inlined frames included.
func TestStacksMatchAddr2line(t *testing.T) {
	if _, err := exec.LookPath("addr2line"); err != nil {
		t.Skip("addr2line is not installed (binutils)")
	}
	llvm := ""
	for _, name := range []string{"llvm-symbolizer-19", "llvm-symbolizer"} {
		if _, err := exec.LookPath(name); err == nil {
			llvm = name
			break
		}
	}
	frames, agree, tieBroken := 0, 0, 0
	for i, b := range symBuilds(t) {
		name := fmt.Sprintf("%s%s", b.cc, strings.Join(b.flags, ""))
		t.Run(name, func(t *testing.T) {
			if i > 0 {
				e2e.Exhaustive(t, "the first build stands for the 16 compilers, levels and layouts")
			}
			dir := t.TempDir()
			lib := filepath.Join(dir, "libsym.so")
			bin := filepath.Join(dir, "symleak")
			cxxbin := filepath.Join(dir, "symleakxx")
			fx := filepath.Join(e2e.Root, "testdata", "fixtures")
			libFlags := []string{"-shared", "-fPIC", filepath.Join(fx, "symlib.c")}
			for _, f := range b.flags {
				if f != "-fPIE" && f != "-pie" && f != "-fno-pie" && f != "-no-pie" {
					libFlags = append(libFlags, f)
				}
			}
			e2e.CompileTo(t, b.cc, lib, libFlags...)
			e2e.CompileTo(t, b.cc, bin, append([]string{filepath.Join(fx, "symleak.c"), "-ldl"}, b.flags...)...)
			e2e.CompileTo(t, b.cxx, cxxbin, append([]string{filepath.Join(fx, "symleak.cc")}, b.flags...)...)
			var stacks [][]e2e.Frame
			for _, argv := range [][]string{{bin, lib}, {cxxbin}} {
				r := e2e.Leakpath(t, nil, nil, argv...)
				for _, im := range append([]e2e.Image{r.Report.Image}, r.Report.Processes...) {
					for _, l := range im.Leaks {
						stacks = append(stacks, l.Stack)
					}
				}
			}
			// Every frame in the fixtures' own modules, by address.
			mine := map[string]bool{bin: true, lib: true, cxxbin: true}
			byMod := map[string][]uint64{}
			got := map[string]map[uint64][]e2e.Frame{}
			for _, st := range stacks {
				for _, f := range st {
					if !mine[f.Module] {
						continue
					}
					off, err := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
					if err != nil {
						t.Fatalf("frame offset %q", f.Offset)
					}
					if got[f.Module] == nil {
						got[f.Module] = map[uint64][]e2e.Frame{}
					}
					if _, seen := got[f.Module][off]; !seen {
						byMod[f.Module] = append(byMod[f.Module], off-1)
					}
					got[f.Module][off] = append(got[f.Module][off], f)
				}
			}
			if len(byMod[bin]) == 0 || len(byMod[lib]) == 0 || len(byMod[cxxbin]) == 0 {
				t.Fatalf("the leaks' stacks miss a fixture module: %v", byMod)
			}
			for mod, addrs := range byMod {
				ref := reference(t, b.ref, mod, addrs)
				var second map[uint64][]refFrame
				for _, a := range addrs {
					// A frame reported once per leak stack it is in.
					ours, want := dedupFrames(got[mod][a+1]), ref[a]
					frames += len(want)
					if same(ours, want) {
						agree += len(want)
						continue
					}
					// addr2line names an inlined function that has no
					// linkage name (a lambda's operator()) after the
					// function it was inlined into; llvm-symbolizer, like
					// leakpath, by its own name. Let it break the tie.
					if llvm != "" && b.ref == "addr2line" {
						if second == nil {
							second = reference(t, llvm, mod, addrs)
						}
						if same(ours, second[a]) {
							tieBroken += len(want)
							continue
						}
					}
					t.Errorf("%s+0x%x: leakpath says\n%s\n%s says\n%s", filepath.Base(mod), a, fmtOurs(ours), b.ref, fmtRef(want))
				}
			}
		})
	}
	t.Logf("%d of %d frames agree with the reference symbolizer (addr2line for gcc, llvm-symbolizer for clang); %d more agree with llvm-symbolizer where addr2line names an inlined lambda after its caller",
		agree, frames, tieBroken)
}

// same reports whether leakpath's inline chain equals a reference's.
func same(ours []e2e.Frame, want []refFrame) bool {
	if len(ours) != len(want) {
		return false
	}
	for i := range want {
		if ours[i].Function != want[i].function || ours[i].Line != want[i].line ||
			filepath.Base(ours[i].File) != filepath.Base(want[i].file) {
			return false
		}
	}
	return true
}

func dedupFrames(fs []e2e.Frame) []e2e.Frame {
	// The same address appears in several stacks: keep one inline chain,
	// which starts again at each non-inlined frame's successor.
	var out []e2e.Frame
	for _, f := range fs {
		out = append(out, f)
		if !f.Inlined {
			break
		}
	}
	return out
}

func fmtOurs(fs []e2e.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s (%s:%d) inlined=%v\n", f.Function, f.File, f.Line, f.Inlined)
	}
	return b.String()
}

func fmtRef(fs []refFrame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s (%s:%d)\n", f.function, f.file, f.line)
	}
	return b.String()
}

// TestExpectedFunctionsInStacks: in a plain gcc -O0 -g build the leak
// stacks name the fixture's functions, the inlined helper marked.
func TestExpectedFunctionsInStacks(t *testing.T) {
	dir := t.TempDir()
	fx := filepath.Join(e2e.Root, "testdata", "fixtures")
	lib := filepath.Join(dir, "libsym.so")
	bin := filepath.Join(dir, "symleak")
	e2e.CompileTo(t, "cc", lib, "-shared", "-fPIC", "-g", "-O0", filepath.Join(fx, "symlib.c"))
	e2e.CompileTo(t, "cc", bin, "-g", "-O0", filepath.Join(fx, "symleak.c"), "-ldl")
	r := e2e.Leakpath(t, nil, nil, bin, lib)
	var sawInline, sawLib bool
	for _, l := range r.Report.Leaks {
		names := e2e.Funcs(l.Stack)
		if strings.HasPrefix(names, "dup_name make_entry main") && l.Blocks == 3 && l.Stack[0].Inlined {
			sawInline = true
		}
		if strings.HasPrefix(names, "lib_alloc lib_make main") && l.Bytes == 40 {
			sawLib = true
		}
	}
	if !sawInline || !sawLib {
		t.Errorf("stacks lack dup_name [inlined] → make_entry → main or lib_alloc → lib_make → main:\n%s", r.Text)
	}
}

// splitDebugFixture builds the symleak program and its library libsym.so
// in a temporary dir, moves the library's debug information to a build-id
// tree under debugDir (objcopy --only-keep-debug with keepFlags), then
// strips the library with strip (a command, given the library).
func splitDebugFixture(t *testing.T, keepFlags, strip []string) (dir, lib, bin, debugDir, debugFile, id string) {
	t.Helper()
	for _, tool := range []string{"objcopy", strip[0]} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (binutils)", tool)
		}
	}
	dir = t.TempDir()
	fx := filepath.Join(e2e.Root, "testdata", "fixtures")
	lib = filepath.Join(dir, "libsym.so")
	bin = filepath.Join(dir, "symleak")
	e2e.CompileTo(t, "cc", lib, "-shared", "-fPIC", "-g", "-O0", "-Wl,--build-id", filepath.Join(fx, "symlib.c"))
	e2e.CompileTo(t, "cc", bin, "-g", "-O0", filepath.Join(fx, "symleak.c"), "-ldl")
	id = buildID(t, lib)
	debugDir = filepath.Join(dir, "debug")
	debugFile = filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")
	os.MkdirAll(filepath.Dir(debugFile), 0o755)
	keep := append(append([]string{"objcopy", "--only-keep-debug"}, keepFlags...), lib, debugFile)
	for _, args := range [][]string{keep, append(strip, lib)} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	return dir, lib, bin, debugDir, debugFile, id
}

// TestSeparateDebugFile: a stripped library whose debug file sits in a
// --debug-dir build-id tree resolves to file:line; a corrupt debug file
// gives a warning and names from the dynamic symbol table, never a
// failure.
func TestSeparateDebugFile(t *testing.T) {
	_, lib, bin, debugDir, debugFile, _ := splitDebugFixture(t, nil, []string{"strip", "--strip-all"})
	libFrame := func(r e2e.Result) (e2e.Frame, bool) {
		for _, l := range r.Report.Leaks {
			for _, f := range l.Stack {
				if f.Module == lib {
					return f, true
				}
			}
		}
		return e2e.Frame{}, false
	}
	r := e2e.Leakpath(t, []string{"--debug-dir", debugDir}, nil, bin, lib)
	if f, ok := libFrame(r); !ok || f.Function != "lib_alloc" || filepath.Base(f.File) != "symlib.c" || f.Line != 8 {
		t.Errorf("with the debug file: top library frame %+v, want lib_alloc at symlib.c:8 (the calloc)\n%s", f, r.Text)
	}
	// Without it: names of exported functions only, no file.
	r = e2e.Leakpath(t, nil, nil, bin, lib)
	for _, l := range r.Report.Leaks {
		for _, f := range l.Stack {
			if f.Module == lib && f.File != "" {
				t.Errorf("without the debug file, %+v has a file", f)
			}
		}
	}
	// A corrupt debug file: a warning, and the run and report go on.
	data, _ := os.ReadFile(debugFile)
	os.WriteFile(debugFile, data[:len(data)/3], 0o644)
	r = e2e.Leakpath(t, []string{"--debug-dir", debugDir}, nil, bin, lib)
	if r.Code != 0 || len(r.Report.Leaks) == 0 {
		t.Fatalf("a corrupt debug file broke the run: exit %d\n%s", r.Code, r.Text)
	}
	if len(r.Report.Warnings) == 0 || !strings.Contains(strings.Join(r.Report.Warnings, "\n"), "debug") {
		t.Errorf("no warning about the corrupt debug file: %q", r.Report.Warnings)
	}
	if _, ok := libFrame(r); !ok {
		t.Errorf("the library's frames are gone:\n%s", r.Text)
	}
}

func buildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := f.Section(".note.gnu.build-id")
	if s == nil {
		t.Fatalf("%s has no build id", path)
	}
	d, err := s.Data()
	if err != nil || len(d) < 16 {
		t.Fatalf("build id note: %v", err)
	}
	// namesz, descsz, type, "GNU\0", desc: descsz bytes, which may end in
	// zeros (1 build in 256 does).
	n := int(binary.LittleEndian.Uint32(d[4:8]))
	if binary.LittleEndian.Uint32(d[0:4]) != 4 || 16+n > len(d) || n == 0 {
		t.Fatalf("build id note %x", d)
	}
	return hex.EncodeToString(d[16 : 16+n])
}

// TestDWARFCacheRuns: a debug file with compressed sections is inflated by
// the first run and kept in the DWARF cache (LEAKPATH_CACHE_DIR), with the
// frames looked up; the next runs, from the caches or from a spoilt DWARF
// cache file (written again), give the same stacks; "off" keeps nothing.
func TestDWARFCacheRuns(t *testing.T) {
	dir, lib, bin, debugDir, _, id := splitDebugFixture(t, []string{"--compress-debug-sections=zlib"}, []string{"objcopy", "--strip-debug"})
	cache := filepath.Join(dir, "cache")
	cached := filepath.Join(cache, id+".dwarf")
	xdg := filepath.Join(dir, "xdg")
	run := func(cacheDir string) string {
		t.Helper()
		// cacheDir "": LEAKPATH_CACHE_DIR unset.
		env := []string{"XDG_CACHE_HOME=" + xdg}
		for _, kv := range e2e.TestEnv() {
			if !strings.HasPrefix(kv, "LEAKPATH_CACHE_DIR=") {
				env = append(env, kv)
			}
		}
		if cacheDir != "" {
			env = append(env, "LEAKPATH_CACHE_DIR="+cacheDir)
		}
		r := e2e.LeakpathEnv(t, env, []string{"--debug-dir", debugDir}, nil, bin, lib)
		var b strings.Builder
		for _, l := range r.Report.Leaks {
			for _, f := range l.Stack {
				fmt.Fprintf(&b, "%s %s:%d; ", f.Function, filepath.Base(f.File), f.Line)
			}
			b.WriteString("\n")
		}
		if !strings.Contains(b.String(), "lib_alloc symlib.c:8") {
			t.Fatalf("no lib_alloc at symlib.c:8 in the leaks:\n%s", r.Text)
		}
		return b.String()
	}
	first := run(cache)
	st, err := os.Stat(cached)
	if err != nil {
		t.Fatalf("the first run kept no cache file of the debug file: %v", err)
	}
	if got := run(cache); got != first {
		t.Errorf("from the cache:\n%s\nwant\n%s", got, first)
	}
	// The frames looked up are kept too (the next run loads no DWARF for
	// them).
	if _, err := os.Stat(filepath.Join(cache, id+".frames")); err != nil {
		t.Errorf("no frame cache file of the library: %v", err)
	}
	// A spoilt DWARF cache file (and no frame cache, so the DWARF is
	// needed).
	if err := os.Remove(filepath.Join(cache, id+".frames")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cached, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	if got := run(cache); got != first {
		t.Errorf("with a spoilt cache file:\n%s\nwant\n%s", got, first)
	}
	if st2, err := os.Stat(cached); err != nil || st2.Size() != st.Size() {
		t.Errorf("the spoilt cache file was not written again: %v", err)
	}
	if got := run("off"); got != first {
		t.Errorf("without a cache:\n%s\nwant\n%s", got, first)
	}
	if _, err := os.Stat(xdg); err == nil {
		t.Errorf("LEAKPATH_CACHE_DIR=off made %s", xdg)
	}
	// Unset: the user's cache directory.
	if got := run(""); got != first {
		t.Errorf("with the default cache:\n%s\nwant\n%s", got, first)
	}
	if _, err := os.Stat(filepath.Join(xdg, "leakpath", id+".dwarf")); err != nil {
		t.Errorf("no cache file under $XDG_CACHE_HOME/leakpath: %v", err)
	}
}
