package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// linkable reports whether a program links with flags here (an allocator
// library installed or not).
func linkable(t *testing.T, flags ...string) bool {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return testfixture.Compile("cc", filepath.Join(dir, "m"), append([]string{src}, flags...)...) == nil
}

// familyLeaks sums, by kind, the leaks a report lists whose stack is the
// allocs fixture's churn (its own blocks, not the C runtime's nor the
// allocator library's).
func familyLeaks(t *testing.T, r result) (byKind map[string][2]uint64) {
	t.Helper()
	var k kindsImage
	if err := json.Unmarshal(r.reportJSON, &k); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	byKind = map[string][2]uint64{}
	for _, l := range k.Leaks {
		if stackHas(l.Stack, "churn") {
			s := byKind[l.Kind]
			byKind[l.Kind] = [2]uint64{s[0] + l.Bytes, s[1] + l.Blocks}
		}
	}
	return byKind
}

// memcheckKinds runs argv under memcheck and returns its LEAK SUMMARY by
// kind (bytes, blocks); nil (logged) when valgrind is not installed.
func memcheckKinds(t *testing.T, argv ...string) map[string][2]uint64 {
	t.Helper()
	sums, _ := e2e.MemcheckSums(t, argv...)
	return sums
}

// allocatorFamily is one way of building the allocs fixture: the
// allocator it links with, how, and what the report says of it.
type allocatorFamily struct {
	name  string
	flags func(t *testing.T) []string // nil: the plain build
	link  []string                    // what must link here (else skipped)
	run   []string                    // leakpath run's flags
	line  string                      // the report's allocator line has it ("": no line)
}

// pfxBuild builds testdata/fixtures/pfxalloc.c as libpfx<prefix>.so with
// prefix pfx ("": malloc, free... of its own, bound to its own calls),
// and returns its directory and path.
func pfxBuild(t *testing.T, pfx string) (dir, lib string) {
	t.Helper()
	dir = t.TempDir()
	lib = filepath.Join(dir, "libpfx"+strings.TrimSuffix(pfx, "_")+".so")
	if err := testfixture.Compile("cc", lib, "-g", "-O2", "-shared", "-fPIC", "-fno-builtin", "-Wl,-Bsymbolic", "-DPFX="+pfx,
		filepath.Join(root, "testdata", "fixtures", "pfxalloc.c")); err != nil {
		t.Fatal(err)
	}
	return dir, lib
}

// pfxLib builds libpfx<prefix>.so (pfxBuild) and returns the flags that
// link the allocs fixture with it.
func pfxLib(t *testing.T, pfx string) []string {
	t.Helper()
	dir, _ := pfxBuild(t, pfx)
	return []string{"-DPREFIX=" + pfx, "-L" + dir, "-lpfx" + strings.TrimSuffix(pfx, "_"), "-Wl,-rpath," + dir}
}

// pfxDlopen builds libpfx<prefix>.so (pfxBuild) and returns the flags
// that make the allocs fixture dlopen it and call its family.
func pfxDlopen(t *testing.T, pfx string) []string {
	t.Helper()
	_, lib := pfxBuild(t, pfx)
	return []string{"-DPREFIX=" + pfx, `-DDLOPEN="` + lib + `"`, "-ldl"}
}

var (
	staticJemalloc = []string{"-Wl,-Bstatic", "-ljemalloc", "-Wl,-Bdynamic", "-lpthread", "-ldl", "-lm"}
	staticTcmalloc = []string{"-Wl,-Bstatic", "-ltcmalloc_minimal", "-Wl,-Bdynamic", "-lstdc++", "-lpthread", "-lm"}
)

// allocatorFamilies are the builds the families tests run.
var allocatorFamilies = []allocatorFamily{
	{name: "glibc"},
	{name: "jemalloc", link: []string{"-ljemalloc"}, line: "allocator: jemalloc in libjemalloc.so.2, its calls recorded as the C library's"},
	{name: "tcmalloc", link: []string{"-ltcmalloc"}, line: "allocator: tcmalloc (gperftools) in libtcmalloc.so.4, its calls recorded as the C library's"},
	{name: "mimalloc", link: []string{"-lmimalloc"}, line: "allocator: mimalloc in libmimalloc.so.2, its calls recorded as the C library's"},
	{name: "jemalloc-static", link: staticJemalloc, line: "allocator: jemalloc in allocs-"},
	{name: "tcmalloc-static", link: staticTcmalloc, line: "allocator: tcmalloc (gperftools) in allocs-"},
	{name: "je_-prefix-shared", flags: func(t *testing.T) []string { return pfxLib(t, "je_") },
		line: "allocator: libpfxje.so, traced by patching the entries of je_malloc, je_calloc, je_realloc, je_free"},
	{name: "own-prefix-shared", flags: func(t *testing.T) []string { return pfxLib(t, "pa_") }, run: []string{"--alloc-family", "pa_"},
		line: "allocator: libpfxpa.so, traced by patching the entries of pa_malloc, pa_calloc, pa_realloc, pa_free"},
	{name: "je_-prefix-dlopen", flags: func(t *testing.T) []string { return pfxDlopen(t, "je_") },
		line: "allocator: libpfxje.so, traced by patching the entries of je_malloc, je_calloc, je_realloc, je_free"},
	{name: "own-prefix-dlopen", flags: func(t *testing.T) []string { return pfxDlopen(t, "pa_") }, run: []string{"--alloc-family", "pa_"},
		line: "allocator: libpfxpa.so, traced by patching the entries of pa_malloc, pa_calloc, pa_realloc, pa_free"},
	{name: "own-malloc-dlopen", flags: func(t *testing.T) []string { return pfxDlopen(t, "") },
		line: "allocator: libpfx.so, traced by patching the entries of malloc, calloc, realloc, free"},
	{name: "own-prefix-static", flags: func(t *testing.T) []string {
		return []string{"-DPREFIX=pa_", filepath.Join(root, "testdata", "fixtures", "pfxalloc.c"), "-DPFX=pa_"}
	}, run: []string{"--alloc-family", "pa_"}, line: "traced by patching the entries of pa_malloc, pa_calloc, pa_realloc, pa_free"},
}

// TestAllocatorFamilies: a program linked with another allocator than
// glibc's gets the counts of its own arithmetic, N allocations of which
// L leaked, and the kinds memcheck gives the same source run with
// glibc's allocator; the report names the allocator and how it was
// traced. A shared library's malloc goes through the agent's hooks; an
// allocator linked into the executable and a family under a prefix (one
// of the built-in ones, or one run --alloc-family names, exported or in
// the executable's static symbols) are traced by patching their entries.
// Also when the program writes only the first byte of each block,
// leaving the rest as the allocator left it (tcmalloc and mimalloc leave
// their free list's link in the first word: leaked blocks read as
// reaching each other).
func TestAllocatorFamilies(t *testing.T) {
	want := map[string]map[string][2]uint64{}
	for _, mode := range []string{"first", "all"} {
		want[mode] = memcheckKinds(t, fixture(t, "allocs.c"), "100", "100", "64", mode)
	}
	if want["first"] == nil {
		t.Log("valgrind is not installed: kinds compared with the program's arithmetic alone")
	}
	for _, fam := range allocatorFamilies {
		t.Run(fam.name, func(t *testing.T) {
			var flags []string
			if fam.link != nil {
				if !linkable(t, fam.link...) {
					t.Skipf("%v does not link here (the allocator is not installed)", fam.link)
				}
				flags = append(flags, fam.link...)
			}
			if fam.flags != nil {
				flags = append(flags, fam.flags(t)...)
			}
			bin := fixture(t, "allocs.c", flags...)
			for _, mode := range []string{"first", "all"} {
				// All leaked, no frees: each block is handed out fresh.
				args := []string{bin, "100", "100", "64", mode}
				plain := native(t, nil, args...)
				r := leakpath(t, fam.run, nil, args...)
				sameBehaviour(t, r, plain)
				if fam.line != "" && !strings.Contains(r.text, fam.line) {
					t.Errorf("%s: the report does not say %q:\n%s", mode, fam.line, r.text)
				}
				if fam.line == "" && strings.Contains(r.text, "allocator: ") || warned(r, "not traced") || warned(r, "could not trace") {
					t.Errorf("%s: an allocator line, or a warning that something was not traced:\n%s", mode, r.text)
				}
				got := familyLeaks(t, r)
				if d := got["definite"]; d != [2]uint64{6400, 100} || len(got) != 1 {
					t.Errorf("%s: the program's leaks by kind %v, want 100 definite blocks of 64 B", mode, got)
				}
				if vg := want[mode]; vg != nil && vg["definite"] != got["definite"] {
					t.Errorf("%s: definite %v, memcheck on glibc's allocator %v", mode, got["definite"], vg["definite"])
				}
				// 10,000 allocations, 100 leaked, the rest freed and
				// handed out again.
				args = []string{bin, "10000", "100", "64", mode}
				r = leakpath(t, fam.run, nil, args...)
				if !strings.Contains(string(r.stdout), "mallocs 10000 leaked 100") {
					t.Fatalf("%s: the fixture said %q", mode, r.stdout)
				}
				img := r.image(t, "allocs")
				if c := img.Totals.Calls["malloc"]; c < 10000 || c > 10100 {
					t.Errorf("%s: %d mallocs recorded, want the program's 10000 (and the runtime's few)", mode, c)
				}
				if c := img.Totals.Calls["free"]; c < 9900 || c > 9950 {
					t.Errorf("%s: %d frees recorded, want the program's 9900", mode, c)
				}
				// memcheck: 100 definite. The blocks handed out again
				// hold the allocator's words (glibc's free-chunk
				// pointers, a free list's link) the program never
				// wrote, which memcheck reads as undefined: none may
				// make a leak possible or indirect.
				got = familyLeaks(t, r)
				if d := got["definite"]; d != [2]uint64{6400, 100} || len(got) != 1 {
					t.Errorf("%s: the program's leaks by kind %v, want 100 definite blocks of 64 B", mode, got)
				}
			}
		})
	}
}

// TestAllocatorDlopenByRunpath: a program that dlopens its allocator's
// library by a bare name its RUNPATH resolves makes a dlopen the agent
// cannot make on its behalf (see docs/allocators.md). The family is
// patched all the same, at the loader's stop for debuggers, before the
// dlopen returns: the program's counts, and --check finds the leaks
// (exit 23), not an allocator left untraced (24, as before).
func TestAllocatorDlopenByRunpath(t *testing.T) {
	dir, _ := pfxBuild(t, "je_")
	bin := fixture(t, "allocs.c", "-DPREFIX=je_", `-DDLOPEN="libpfxje.so"`, "-Wl,--enable-new-dtags", "-Wl,-rpath,"+dir, "-ldl")
	args := []string{bin, "1000", "100", "64", "first"}
	plain := native(t, nil, args...)
	if plain.code != 0 {
		t.Fatalf("the fixture failed natively (%d): %s", plain.code, plain.stderr)
	}
	r := leakpath(t, []string{"--check"}, nil, args...)
	if !bytes.Equal(r.stdout, plain.stdout) {
		t.Errorf("stdout %q under leakpath, %q without", r.stdout, plain.stdout)
	}
	if r.code != 23 {
		t.Errorf("--check exited %d, want 23 (leaks found)", r.code)
	}
	if want := "allocator: libpfxje.so, traced by patching the entries of je_malloc, je_calloc, je_realloc, je_free"; !strings.Contains(r.text, want) {
		t.Errorf("the report does not say %q:\n%s", want, r.text)
	}
	if got := familyLeaks(t, r); got["definite"] != [2]uint64{6400, 100} || len(got) != 1 {
		t.Errorf("the program's leaks by kind %v, want 100 definite blocks of 64 B", got)
	}
}

// TestAllocatorDlopenConstructor: a library whose constructor allocates
// 40 blocks through its own family, before dlopen returns; the program
// frees 30 of them through that family and forgets 10. The family is
// patched before the constructor runs: 40 allocations at the
// constructor's site, 10 definite leaks of 48 B, no improper use (before:
// the 40 were not seen, and the 30 frees read as invalid ones).
func TestAllocatorDlopenConstructor(t *testing.T) {
	bin := fixture(t, "ctoralloc.c", "-ldl")
	for _, pfx := range []string{"je_", ""} {
		t.Run("prefix="+pfx, func(t *testing.T) {
			lib := filepath.Join(t.TempDir(), "libctor.so")
			if err := testfixture.Compile("cc", lib, "-g", "-O2", "-shared", "-fPIC", "-fno-builtin", "-Wl,-Bsymbolic",
				"-DPFX="+pfx, "-DCTOR=40", filepath.Join(root, "testdata", "fixtures", "pfxalloc.c")); err != nil {
				t.Fatal(err)
			}
			args := []string{bin, lib, pfx, "40", "30"}
			plain := native(t, nil, args...)
			if !bytes.Equal(plain.stdout, []byte("ctor 40 freed 30\n")) {
				t.Fatalf("the fixture said %q natively: %s", plain.stdout, plain.stderr)
			}
			r := leakpath(t, nil, nil, args...)
			sameBehaviour(t, r, plain)
			for _, e := range r.image(t, "ctoralloc").Errors {
				t.Errorf("improper use %s at %v", e.Kind, e.Stack)
			}
			got := map[string][2]uint64{}
			for _, l := range r.image(t, "ctoralloc").Leaks {
				for _, f := range l.Stack {
					if f.Function == "ctor_alloc" {
						s := got[l.Kind]
						got[l.Kind] = [2]uint64{s[0] + l.Bytes, s[1] + l.Blocks}
						break
					}
				}
			}
			if got["definite"] != [2]uint64{480, 10} || len(got) != 1 {
				t.Errorf("the constructor's leaks by kind %v, want 10 definite blocks of 48 B", got)
			}
			if want := "LEAK 480 B in 10 blocks (definite) from malloc (10 of 40 allocated here)"; !strings.Contains(r.text, want) {
				t.Errorf("the report does not say %q:\n%s", want, r.text)
			}
		})
	}
}

// TestAllocatorFamilySlots: the agent has room for eight families, the
// executable's own included (seven under a prefix). A program linked
// with eight libraries, each with a family under a prefix --alloc-family
// names, gets the first seven traced (the program's calls, through the
// first, counted) and the eighth reported: its functions NOT traced, a
// warning, and --check's exit 24 on a run with no leak, not a silent
// drop.
func TestAllocatorFamilySlots(t *testing.T) {
	pfxs := []string{"pa_", "pb_", "pc_", "pd_", "pe_", "pf_", "pg_", "ph_"}
	flags := []string{"-DPREFIX=pa_", "-Wl,--no-as-needed"} // the program calls the first family
	run := []string{"--check"}
	for _, p := range pfxs {
		dir, _ := pfxBuild(t, p)
		flags = append(flags, "-L"+dir, "-lpfx"+strings.TrimSuffix(p, "_"), "-Wl,-rpath,"+dir)
		run = append(run, "--alloc-family", p)
	}
	bin := fixture(t, "allocs.c", flags...)
	args := []string{bin, "1000", "0", "64", "first"}
	plain := native(t, nil, args...)
	if plain.code != 0 {
		t.Fatalf("the fixture failed natively (%d): %s", plain.code, plain.stderr)
	}
	r := leakpath(t, run, nil, args...)
	if !bytes.Equal(r.stdout, plain.stdout) {
		t.Errorf("stdout %q under leakpath, %q without", r.stdout, plain.stdout)
	}
	if r.code != 24 {
		t.Errorf("--check exited %d, want 24 (an allocator not traced)", r.code)
	}
	for _, p := range pfxs[:7] {
		lib := "libpfx" + strings.TrimSuffix(p, "_") + ".so"
		if want := "allocator: " + lib + ", traced by patching the entries of " + p + "malloc"; !strings.Contains(r.text, want) {
			t.Errorf("the report does not say %q:\n%s", want, r.text)
		}
	}
	if want := "allocator: libpfxph.so; NOT traced: ph_malloc (more allocator families than leakpath has room for: eight)"; !strings.Contains(r.text, want) {
		t.Errorf("the report does not say %q:\n%s", want, r.text)
	}
	if !warned(r, "could not trace its allocator's ph_malloc, ph_calloc, ph_realloc, ph_free") {
		t.Errorf("no warning names the functions not traced:\n%s", r.stderr)
	}
	if c := r.image(t, "allocs").Totals.Calls["malloc"]; c < 1000 || c > 1100 {
		t.Errorf("%d mallocs recorded, want the program's 1000 (and the runtime's few)", c)
	}
}

// TestThrowingNew: an operator new that is not libstdc++'s, which the
// agent calls through (a library's replacement, jemalloc's) or patched
// (a tcmalloc linked into the program), runs with the thread's recording
// suspended; when it throws (bad_alloc, or an exception of its own) and
// the program catches it, recording resumes: the thread's 1,000 new[]
// after three catches are recorded and its 10 leaks found, definite as
// memcheck calls them, and the exceptions' objects, freed at the end of
// each catch, are no invalid frees. Before, the thread recorded nothing
// more. libc++'s operator new (clang++-19 -stdlib=libc++, where
// installed) is done by the hook as libstdc++'s: its bad_alloc, thrown by
// LLVM's libunwind, passed a hook frame whose personality routine
// forwarded to libgcc_s's, and the program crashed.
func TestThrowingNew(t *testing.T) {
	lib := fixture(t, "thrownew_lib.cc", "-shared", "-fPIC")
	builds := []struct {
		name  string
		flags []string
		link  []string // what must link here (else skipped)
	}{
		{name: "libstdc++"},
		{name: "libc++"},
		{name: "replacement-library", flags: []string{lib, "-Wl,-rpath," + filepath.Dir(lib)}},
		// Its exception crosses the agent's cleanup under LLVM's
		// libunwind, libc++abi's unwinder: it crashed the program.
		{name: "replacement-library-libc++"},
		{name: "jemalloc", link: []string{"-ljemalloc"}},
		{name: "tcmalloc-static", link: staticTcmalloc},
	}
	var want map[string][2]uint64
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			if b.link != nil && !linkable(t, b.link...) {
				t.Skipf("%v does not link here (the allocator is not installed)", b.link)
			}
			var bin string
			switch b.name {
			case "libc++":
				bin = clangLibcxx(t, "thrownew.cc")
			case "replacement-library-libc++":
				cxxlib := clangLibcxx(t, "thrownew_lib.cc", "-shared", "-fPIC")
				bin = clangLibcxx(t, "thrownew.cc", cxxlib, "-Wl,-rpath,"+filepath.Dir(cxxlib))
			default:
				bin = fixture(t, "thrownew.cc", append(b.flags, b.link...)...)
			}
			args := []string{bin, "1000", "10"}
			plain := native(t, nil, args...)
			if !bytes.Equal(plain.stdout, []byte("caught 3 news 1000 leaked 10\n")) {
				t.Fatalf("the fixture said %q natively", plain.stdout)
			}
			if b.name == "libstdc++" {
				want = memcheckKinds(t, bin, "1000", "10", "nothrow") // memcheck's new cannot throw
			}
			r := leakpath(t, nil, nil, args...)
			sameBehaviour(t, r, plain)
			img := r.image(t, "thrownew")
			calls := img.Totals.Calls["new_array"] + img.Totals.Calls["malloc"]
			if calls < 1000 || calls > 1030 {
				t.Errorf("%d allocations recorded (new[] and malloc), want the program's 1000 (and the runtime's few): %v", calls, img.Totals.Calls)
			}
			got := map[string][2]uint64{}
			for _, l := range img.Leaks {
				for _, f := range l.Stack {
					if strings.HasPrefix(f.Function, "churn(") {
						s := got[l.Kind]
						got[l.Kind] = [2]uint64{s[0] + l.Bytes, s[1] + l.Blocks}
						break
					}
				}
			}
			if d := got["definite"]; d != [2]uint64{640, 10} || len(got) != 1 {
				t.Errorf("the program's leaks by kind %v, want 10 definite blocks of 64 B", got)
			}
			if want != nil && want["definite"] != got["definite"] {
				t.Errorf("definite %v, memcheck %v", got["definite"], want["definite"])
			}
			for _, e := range img.Errors {
				t.Errorf("improper use %s at %v", e.Kind, e.Stack)
			}
		})
	}
}

// clangLibcxx builds fixture src with clang++-19 and libc++ (-g -O0, then
// flags), or skips the test, saying why, where they are not installed.
func clangLibcxx(t *testing.T, src string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("clang++-19"); err != nil {
		t.Skip("clang++-19 is not installed (apt-get install clang-19 libc++-19-dev libc++abi-19-dev)")
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(src, filepath.Ext(src))+"-libc++")
	args := append([]string{"-stdlib=libc++", "-g", "-O0", "-pthread", filepath.Join(root, "testdata", "fixtures", src)}, flags...)
	if err := testfixture.Compile("clang++-19", out, args...); err != nil {
		t.Skipf("clang++-19 -stdlib=libc++ cannot build %s (libc++-19-dev not installed?): %v", src, err)
	}
	return out
}
