package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// Fixtures are C/C++ programs under testdata/symbolize compiled on demand
// into one directory per test binary run.

var (
	fixtureRoot string // set by TestMain
	fixtureMu   sync.Mutex
	fixtureDone = map[string]fixtureResult{}
)

type fixtureResult struct {
	path string
	err  error
}

// TestMain also sets up the end-to-end harness for the tests of
// symbolize_e2e_test.go, which run leakpath itself.
func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "leakpath-symbolize-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fixtureRoot = dir
	cleanup, err := e2e.Setup()
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

// fixture describes one build of a source file.
type fixture struct {
	name   string
	src    string // file name under testdata/symbolize
	extra  []string
	cc     string // compiler command; "clang"/"clang++" mean the installed clang
	flags  []string
	shared bool
	// post, if set, transforms the built file (strip, compress, ...) and
	// returns the path to symbolize.
	post func(dir, out string) (string, error)
	// ref, if set, names the file addr2line should read instead of the
	// result (e.g. the unstripped original).
	ref string
}

// compilers maps the generic names to installed commands.
func compiler(name string) (string, bool) {
	cands := map[string][]string{
		"gcc":     {"gcc"},
		"g++":     {"g++"},
		"clang":   {"clang-19", "clang"},
		"clang++": {"clang++-19", "clang++"},
	}[name]
	for _, c := range cands {
		if p, err := exec.LookPath(c); err == nil {
			return p, true
		}
	}
	return "", false
}

func srcPath(name string) string {
	return filepath.Join("..", "..", "..", "testdata", "symbolize", name)
}

// build compiles fx (once per run) and returns the path to symbolize. It
// skips the test if the compiler or a tool is missing.
func build(t testing.TB, fx fixture) string {
	t.Helper()
	cc, ok := compiler(fx.cc)
	if !ok {
		t.Skipf("compiler %s not installed (apt-get install -y clang-19 for clang)", fx.cc)
	}
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if r, ok := fixtureDone[fx.name]; ok {
		if r.err != nil {
			t.Fatalf("fixture %s: %v", fx.name, r.err)
		}
		return r.path
	}
	dir := filepath.Join(fixtureRoot, fx.name)
	r := fixtureResult{}
	r.path, r.err = func() (string, error) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		src, err := filepath.Abs(srcPath(fx.src))
		if err != nil {
			return "", err
		}
		out := filepath.Join(dir, fx.name)
		if fx.shared {
			out += ".so"
		}
		args := append([]string{}, fx.flags...)
		args = append(args, "-Wl,--build-id", src)
		for _, e := range fx.extra {
			p, err := filepath.Abs(srcPath(e))
			if err != nil {
				return "", err
			}
			args = append(args, p)
		}
		if fx.shared {
			args = append([]string{"-shared", "-fPIC"}, args...)
		}
		if err := testfixture.Compile(cc, out, args...); err != nil {
			return "", err
		}
		if fx.post != nil {
			return fx.post(dir, out)
		}
		return out, nil
	}()
	fixtureDone[fx.name] = r
	if r.err != nil {
		t.Fatalf("fixture %s: %v", fx.name, r.err)
	}
	return r.path
}

func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Post-processing steps.

// compressDebug rewrites the debug sections with objcopy
// --compress-debug-sections=kind (zlib-gnu gives .zdebug_* sections).
func compressDebug(kind string) func(dir, out string) (string, error) {
	return func(dir, out string) (string, error) {
		if err := copyFile(out, out+".orig"); err != nil {
			return "", err
		}
		if err := run("objcopy", "--compress-debug-sections="+kind, out); err != nil {
			return "", err
		}
		return out, nil
	}
}

// splitDebugLink moves the debug info to out.debug next to a stripped
// binary carrying a .gnu_debuglink; the unstripped original is kept as
// out.orig.
func splitDebugLink(stripArgs ...string) func(dir, out string) (string, error) {
	return func(dir, out string) (string, error) {
		orig := out + ".orig"
		if err := copyFile(out, orig); err != nil {
			return "", err
		}
		dbg := out + ".debug"
		if err := run("objcopy", "--only-keep-debug", out, dbg); err != nil {
			return "", err
		}
		if err := run("strip", append(stripArgs, out)...); err != nil {
			return "", err
		}
		// objcopy computes the CRC of dbg; run it in dir so the link name
		// is the base name.
		cmd := exec.Command("objcopy", "--add-gnu-debuglink="+filepath.Base(dbg), filepath.Base(out))
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("objcopy --add-gnu-debuglink: %v\n%s", err, b)
		}
		return out, nil
	}
}

// splitBuildID strips the binary and stores its debug info at
// dir/debug/.build-id/xx/yyyy.debug (the -dbgsym layout).
func splitBuildID(dir, out string) (string, error) {
	if err := copyFile(out, out+".orig"); err != nil {
		return "", err
	}
	f, err := elf.Open(out)
	if err != nil {
		return "", err
	}
	id := buildID(f)
	f.Close()
	if len(id) < 2 {
		return "", fmt.Errorf("%s has no build id", out)
	}
	dbg := buildIDPath(filepath.Join(dir, "debug"), id)
	if err := os.MkdirAll(filepath.Dir(dbg), 0o755); err != nil {
		return "", err
	}
	if err := run("objcopy", "--only-keep-debug", out, dbg); err != nil {
		return "", err
	}
	if err := run("strip", "--strip-all", out); err != nil {
		return "", err
	}
	return out, nil
}

// stripAll strips everything; only .dynsym remains.
func stripAll(dir, out string) (string, error) {
	return out, run("strip", "--strip-all", out)
}

// stripAllKeepOrig is stripAll keeping the unstripped original as out.orig.
func stripAllKeepOrig(dir, out string) (string, error) {
	if err := copyFile(out, out+".orig"); err != nil {
		return "", err
	}
	return stripAll(dir, out)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// allFixtures are the builds compared against addr2line.
var allFixtures = []fixture{
	{name: "c-gcc-O0", src: "basic.c", cc: "gcc", flags: []string{"-O0", "-g"}},
	{name: "c-gcc-O2", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g"}},
	{name: "c-gcc-O2-nopie", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g", "-fno-PIE", "-no-pie"}},
	{name: "c-gcc-O2-pie", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g", "-fPIE", "-pie"}},
	{name: "c-gcc-O2-nodebug", src: "basic.c", cc: "gcc", flags: []string{"-O2"}},
	{name: "c-gcc-O2-dwarf4", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-gdwarf-4"}},
	{name: "c-gcc-O2-gz-zlib", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g", "-gz=zlib"}},
	{name: "c-gcc-O2-zstd", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g"}, post: compressDebug("zstd")},
	{name: "c-gcc-O2-zdebug", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g"}, post: compressDebug("zlib-gnu"), ref: ".orig"}, // binutils 2.40 addr2line ignores .zdebug from objcopy
	{name: "c-gcc-O2-two-units", src: "basic.c", extra: []string{"lib.c"}, cc: "gcc", flags: []string{"-O2", "-g"}},
	{name: "cpp-gcc-O0", src: "shop.cpp", cc: "g++", flags: []string{"-O0", "-g"}},
	{name: "cpp-gcc-O2", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-g"}},
	{name: "cpp-gcc-O2-nopie", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-g", "-fno-PIE", "-no-pie"}},
	{name: "cpp-gcc-O2-dwarf4", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-gdwarf-4"}},
	{name: "lib-gcc-O2", src: "lib.c", cc: "gcc", flags: []string{"-O2", "-g"}, shared: true},
	{name: "lib-gcc-O0", src: "lib.c", cc: "gcc", flags: []string{"-O0", "-g"}, shared: true},
	{name: "cpp-gcc-O2-debuglink", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-g"}, post: splitDebugLink("--strip-all")},
	{name: "cpp-gcc-O2-buildid", src: "shop.cpp", cc: "g++", flags: []string{"-O2", "-g"}, post: splitBuildID, ref: ".orig"},
	{name: "lib-gcc-O2-stripped", src: "lib.c", cc: "gcc", flags: []string{"-O2", "-g"}, shared: true, post: stripAll},
	{name: "c-clang-O0", src: "basic.c", cc: "clang", flags: []string{"-O0", "-g"}},
	{name: "c-clang-O2", src: "basic.c", cc: "clang", flags: []string{"-O2", "-g"}},
	{name: "c-clang-O2-nopie", src: "basic.c", cc: "clang", flags: []string{"-O2", "-g", "-fno-PIE", "-no-pie"}},
	{name: "cpp-clang-O0", src: "shop.cpp", cc: "clang++", flags: []string{"-O0", "-g"}},
	{name: "cpp-clang-O2", src: "shop.cpp", cc: "clang++", flags: []string{"-O2", "-g"}},
	{name: "cpp-clang-O2-dwarf4", src: "shop.cpp", cc: "clang++", flags: []string{"-O2", "-gdwarf-4"}},
	{name: "lib-clang-O2", src: "lib.c", cc: "clang", flags: []string{"-O2", "-g"}, shared: true},
}

// strippedFixtures are stripped builds whose unstripped original is kept
// as .orig, compared by TestStrippedExecutable.
var strippedFixtures = []fixture{
	{name: "c-gcc-O2-rdynamic-stripped", src: "basic.c", cc: "gcc", flags: []string{"-O2", "-g", "-rdynamic"}, post: stripAllKeepOrig},
}

func fixtureByName(t testing.TB, name string) fixture {
	t.Helper()
	for _, fx := range slices.Concat(allFixtures, dwarfLoadFixtures, strippedFixtures) {
		if fx.name == name {
			return fx
		}
	}
	t.Fatalf("no fixture %q", name)
	return fixture{}
}

// Disassembly.

var (
	objdumpFunc = regexp.MustCompile(`^([0-9a-f]+) <(.+)>:$`)
	objdumpInsn = regexp.MustCompile(`^\s*([0-9a-f]+):\s+(\S.*)$`)
)

// insn is one disassembled instruction.
type insn struct {
	addr uint64
	fn   string // enclosing symbol per objdump
	text string
}

// disassemble returns the instructions of the executable sections of path.
func disassemble(t testing.TB, path string) []insn {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "-w", path).Output()
	if err != nil {
		t.Skipf("objdump -d %s: %v", path, err)
	}
	var res []insn
	fn := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := objdumpFunc.FindStringSubmatch(line); m != nil {
			fn = m[2]
			continue
		}
		if m := objdumpInsn.FindStringSubmatch(line); m != nil {
			a, err := strconv.ParseUint(m[1], 16, 64)
			if err != nil {
				continue
			}
			res = append(res, insn{a, fn, m[2]})
		}
	}
	return res
}

// callSites returns, for each call instruction, the return address minus
// one (what a symbolizer is given for a stack frame).
func callSites(ins []insn) []uint64 {
	var out []uint64
	for i := 0; i+1 < len(ins); i++ {
		if strings.HasPrefix(ins[i].text, "call") && ins[i+1].addr > ins[i].addr {
			out = append(out, ins[i+1].addr-1)
		}
	}
	return out
}

// callsTo returns the return-minus-one addresses of calls inside function fn
// whose target text contains target.
func callsTo(ins []insn, fn, target string) []uint64 {
	var out []uint64
	for i := 0; i+1 < len(ins); i++ {
		if ins[i].fn == fn && strings.HasPrefix(ins[i].text, "call") && strings.Contains(ins[i].text, target) {
			out = append(out, ins[i+1].addr-1)
		}
	}
	return out
}

// sampleAddrs returns every call site plus every stride-th instruction.
func sampleAddrs(ins []insn, stride int) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	add := func(a uint64) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, a := range callSites(ins) {
		add(a)
	}
	for i := 0; i < len(ins); i += stride {
		add(ins[i].addr)
	}
	return out
}

// addr2line runs `addr2line -a -i -f -C -e path` on addrs and returns the
// frames it prints for each (function, file, line; "??" becomes empty).
func addr2line(t testing.TB, path string, addrs []uint64) [][]Frame {
	t.Helper()
	if _, err := exec.LookPath("addr2line"); err != nil {
		t.Skip("addr2line (binutils) not installed")
	}
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.Command("addr2line", "-a", "-i", "-f", "-C", "-e", path)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("addr2line -e %s: %v", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	res := make([][]Frame, 0, len(addrs))
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line output: expected address at line %d: %q", i, lines[i])
		}
		i++
		var fr []Frame
		for i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x") {
			fr = append(fr, parseA2LFrame(lines[i], lines[i+1]))
			i += 2
		}
		res = append(res, fr)
	}
	if len(res) != len(addrs) {
		t.Fatalf("addr2line printed %d records for %d addresses", len(res), len(addrs))
	}
	return res
}

var discriminator = regexp.MustCompile(` \(discriminator \d+\)$`)

func parseA2LFrame(fn, loc string) Frame {
	var f Frame
	if fn != "??" {
		f.Function = fn
	}
	loc = discriminator.ReplaceAllString(loc, "")
	if i := strings.LastIndexByte(loc, ':'); i >= 0 {
		if file := loc[:i]; file != "??" {
			f.File = file
		}
		f.Line, _ = strconv.Atoi(loc[i+1:])
	}
	return f
}

// frameKey is what is compared with addr2line: function, file base name and
// line of every frame.
func frameKey(fr []Frame) string {
	var b strings.Builder
	for i, f := range fr {
		if i > 0 {
			b.WriteString(" <- ")
		}
		file := ""
		if f.File != "" {
			file = filepath.Base(f.File)
		}
		fmt.Fprintf(&b, "%s @ %s:%d", f.Function, file, f.Line)
	}
	if len(fr) == 0 {
		// addr2line prints one unknown frame when it knows nothing.
		b.WriteString(" @ :0")
	}
	return b.String()
}

// llvmSymbolizer runs llvm-symbolizer on addrs (if installed) and returns
// its frames with function names demangled by demangleName, so that they
// compare with ours independent of LLVM's demangler style. It returns nil if
// llvm-symbolizer is not installed.
func llvmSymbolizer(t testing.TB, path string, addrs []uint64) [][]Frame {
	t.Helper()
	exe, err := exec.LookPath("llvm-symbolizer")
	if err != nil {
		return nil
	}
	var in bytes.Buffer
	for _, a := range addrs {
		fmt.Fprintf(&in, "%#x\n", a)
	}
	cmd := exec.Command(exe, "--inlining", "--functions=linkage", "--no-demangle", "--obj="+path)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Logf("llvm-symbolizer --obj=%s: %v (not used)", path, err)
		return nil
	}
	var res [][]Frame
	for _, rec := range strings.Split(strings.TrimRight(string(out), "\n"), "\n\n") {
		lines := strings.Split(rec, "\n")
		var fr []Frame
		for i := 0; i+1 < len(lines); i += 2 {
			var f Frame
			if lines[i] != "??" {
				f.Function = demangleName(lines[i])
			}
			// file:line:column
			loc := lines[i+1]
			if j := strings.LastIndexByte(loc, ':'); j >= 0 {
				f.Column, _ = strconv.Atoi(loc[j+1:])
				loc = loc[:j]
			}
			if j := strings.LastIndexByte(loc, ':'); j >= 0 {
				if file := loc[:j]; file != "??" {
					f.File = file
				}
				f.Line, _ = strconv.Atoi(loc[j+1:])
			}
			fr = append(fr, f)
		}
		if len(fr) == 1 && fr[0] == (Frame{}) {
			fr = nil
		}
		res = append(res, fr)
	}
	if len(res) != len(addrs) {
		t.Logf("llvm-symbolizer printed %d records for %d addresses (not used)", len(res), len(addrs))
		return nil
	}
	return res
}

// comparison is the agreement of Lookup with addr2line (and, where they
// differ, llvm-symbolizer) on a set of addresses.
type comparison struct {
	total     int
	agree     int // every frame equal to addr2line's
	agreeLLVM int // not addr2line's, but every frame equal to llvm-symbolizer's
	// agreeSplit: names equal to addr2line's, locations to llvm-symbolizer's.
	agreeSplit int
	// naming: every location equal to addr2line's, names differing only
	// for functions DWARF gives no linkage name (which binutils names by
	// query history and LLVM by symbol; see Frame.Function).
	naming int
	// outside: equal to addr2line's but for a function name addr2line
	// takes from the nearest symbol below an address past that symbol's
	// size, where Lookup names none (see symtab.find).
	outside    int
	mismatches []string
	// colTotal counts addresses whose frame locations equal
	// llvm-symbolizer's; colAgree those of them with equal columns too.
	colTotal, colAgree int
}

// compareWithAddr2line looks up every address in path (through s) and
// compares the frames with addr2line, then llvm-symbolizer, on ref.
func compareWithAddr2line(t testing.TB, s *Symbolizer, path, ref string, addrs []uint64) comparison {
	t.Helper()
	batch := addr2line(t, ref, addrs)
	c := comparison{total: len(addrs)}
	type diff struct {
		i      int
		got    []Frame
		plain  []bool
		single []Frame
	}
	var diffs []diff
	llvm := llvmSymbolizer(t, ref, addrs)
	refSyms := elfFuncSymbols(t, ref)
	for i, a := range addrs {
		var plain []bool
		got, err := s.lookupPlain(path, nil, a, &plain)
		if err != nil {
			t.Fatalf("Lookup(%s, %#x): %v", path, a, err)
		}
		if llvm != nil && sameLocations(got, llvm[i]) {
			c.colTotal++
			if sameColumns(got, llvm[i]) {
				c.colAgree++
			}
		}
		if frameKey(got) == frameKey(batch[i]) {
			c.agree++
			continue
		}
		diffs = append(diffs, diff{i: i, got: got, plain: plain})
	}
	if len(diffs) == 0 {
		return c
	}
	// addr2line's answer for DIEs without a linkage name depends on the
	// addresses it looked up before in the same process; for those the
	// reference is a fresh `addr2line -e FILE ADDR`.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for k := range diffs {
		if !slices.Contains(diffs[k].plain, true) {
			diffs[k].single = batch[diffs[k].i]
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(d *diff) {
			defer func() { <-sem; wg.Done() }()
			d.single = addr2lineOne(ref, addrs[d.i])
		}(&diffs[k])
	}
	wg.Wait()
	for _, d := range diffs {
		a := addrs[d.i]
		g, w := frameKey(d.got), frameKey(d.single)
		if d.single != nil && g == w {
			c.agree++
			continue
		}
		l := ""
		if llvm != nil {
			l = frameKey(llvm[d.i])
			if g == l {
				c.agreeLLVM++
				continue
			}
			if splitAgree(d.got, d.single, llvm[d.i]) {
				c.agreeSplit++
				continue
			}
		}
		if namingOnly(d.got, d.single, d.plain) {
			c.naming++
			continue
		}
		if outsideOnly(d.got, d.single, a, refSyms) {
			c.outside++
			continue
		}
		c.mismatches = append(c.mismatches, fmt.Sprintf("%#x:\n\tgot  %s\n\twant %s\n\tllvm %s", a, g, w, l))
	}
	return c
}

// sameLocations reports whether a and b have the same frames' file base
// names and lines.
func sameLocations(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if filepath.Base(a[i].File) != filepath.Base(b[i].File) || a[i].Line != b[i].Line {
			return false
		}
	}
	return true
}

// sameColumns reports whether a and b (of equal length) have the same
// columns.
func sameColumns(a, b []Frame) bool {
	for i := range a {
		if a[i].Column != b[i].Column {
			return false
		}
	}
	return true
}

// addr2lineOne runs addr2line for one address; nil on error.
func addr2lineOne(path string, addr uint64) []Frame {
	out, err := exec.Command("addr2line", "-i", "-f", "-C", "-e", path, fmt.Sprintf("%#x", addr)).Output()
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	var fr []Frame
	for i := 0; i+1 < len(lines); i += 2 {
		fr = append(fr, parseA2LFrame(lines[i], lines[i+1]))
	}
	if len(fr) == 0 {
		fr = []Frame{{}}
	}
	return fr
}

// splitAgree reports whether every frame of got has addr2line's function
// name and llvm-symbolizer's location (the tools disagree with each other:
// binutils 2.40 mislabels files of DWARF 5 units built from #included .c
// templates, while LLVM names outer frames after a symbol alias).
func splitAgree(got, a2l, llvm []Frame) bool {
	if len(got) != len(a2l) || len(got) != len(llvm) {
		return false
	}
	for i := range got {
		if got[i].Function != a2l[i].Function ||
			filepath.Base(got[i].File) != filepath.Base(llvm[i].File) || got[i].Line != llvm[i].Line {
			return false
		}
	}
	return true
}

// String summarizes the comparison for the test log.
func (c comparison) String() string {
	return fmt.Sprintf("%d/%d addresses agree with addr2line (%.2f%%); %d more with llvm-symbolizer, %d more with addr2line's names and llvm-symbolizer's locations, %d more but for addr2line's name of a symbol that ends below the address (%.2f%% confirmed); %d more differ only in names of functions without linkage names (%.2f%% explained); %d unexplained; columns equal to llvm-symbolizer's at %d/%d addresses",
		c.agree, c.total, 100*c.rate(), c.agreeLLVM, c.agreeSplit, c.outside, 100*c.rateEither(), c.naming, 100*c.rateExplained(), len(c.mismatches), c.colAgree, c.colTotal)
}

// add accumulates o into c (without the mismatch texts).
func (c *comparison) add(o comparison) {
	c.total += o.total
	c.agree += o.agree
	c.agreeLLVM += o.agreeLLVM
	c.agreeSplit += o.agreeSplit
	c.naming += o.naming
	c.outside += o.outside
	c.colTotal += o.colTotal
	c.colAgree += o.colAgree
	c.mismatches = append(c.mismatches, o.mismatches...)
}

func (c comparison) rate() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.agree) / float64(c.total)
}

func (c comparison) rateEither() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.agree+c.agreeLLVM+c.agreeSplit+c.outside) / float64(c.total)
}

func (c comparison) rateExplained() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.agree+c.agreeLLVM+c.agreeSplit+c.outside+c.naming) / float64(c.total)
}

// namingOnly reports whether got and want have the same frames and
// locations and differ only in the names of frames marked plain.
func namingOnly(got, want []Frame, plain []bool) bool {
	if len(got) != len(want) || len(plain) != len(got) {
		return false
	}
	for i := range got {
		g, w := got[i], want[i]
		if filepath.Base(g.File) != filepath.Base(w.File) || g.Line != w.Line {
			return false
		}
		if g.Function != w.Function && !plain[i] {
			return false
		}
	}
	return true
}

// elfFuncSymbols returns the defined function-like symbols of path's
// .symtab, or its .dynsym when it has none, read with debug/elf.
func elfFuncSymbols(t testing.TB, path string) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil || len(syms) == 0 {
		syms, _ = f.DynamicSymbols()
	}
	var out []elf.Symbol
	for _, s := range syms {
		typ := elf.ST_TYPE(s.Info)
		if (typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC || typ == elf.STT_NOTYPE) && s.Section != elf.SHN_UNDEF {
			out = append(out, s)
		}
	}
	return out
}

// outsideOnly reports whether got equals want (addr2line's frames at addr)
// but for function names Lookup leaves empty where addr2line names a sized
// symbol that starts below addr and ends at or below it, with no symbol of
// that name covering addr.
func outsideOnly(got, want []Frame, addr uint64, syms []elf.Symbol) bool {
	if len(got) == 0 {
		got = []Frame{{}} // as addr2line prints nothing known
	}
	if len(got) != len(want) {
		return false
	}
	differ := false
	for i := range got {
		g, w := got[i], want[i]
		if filepath.Base(g.File) != filepath.Base(w.File) || g.Line != w.Line {
			return false
		}
		if g.Function == w.Function {
			continue
		}
		if g.Function != "" || w.Function == "" {
			return false
		}
		below := false
		for _, s := range syms {
			if demangleName(s.Name) != w.Function || s.Value > addr {
				continue
			}
			if s.Size == 0 || addr < s.Value+s.Size {
				return false
			}
			below = true
		}
		if !below {
			return false
		}
		differ = true
	}
	return differ
}
