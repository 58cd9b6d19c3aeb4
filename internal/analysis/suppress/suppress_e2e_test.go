package suppress_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// The leak sites of suppleak.cc, by the function of their frame #0 as
// leakpath names it, and as valgrind's text report names it.
var suppleakSites = []struct{ fn, valgrind string }{
	{"shop::make_cart()", "shop::make_cart()"},
	{"copy_name", "copy_name"},
	{"table(int)", "table(int)"},
	{"extra_leak()", "extra_leak()"}, // only with the argument "extra"
}

// suppLeak is a leak of the JSON report with its suppression.
type suppLeak struct {
	Kind       string      `json:"kind"`
	Blocks     uint64      `json:"blocks"`
	Stack      []e2e.Frame `json:"stack"`
	Suppressed string      `json:"suppressed"`
}

// suppressedSites returns, for each leak site of suppleak.cc in r's
// report, the suppression that hid it ("" none); a site not reported is
// missing.
func suppressedSites(t *testing.T, r e2e.Result) map[string]string {
	t.Helper()
	var rep struct {
		Leaks []suppLeak `json:"leaks"`
	}
	if err := json.Unmarshal(r.ReportJSON, &rep); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range rep.Leaks {
		if l.Kind == "reachable" || len(l.Stack) == 0 {
			continue
		}
		out[l.Stack[0].Function] = l.Suppressed
	}
	return out
}

// valgrindLeaks runs bin under memcheck with extra flags and returns the
// functions of suppleak's sites its report lists as leaked (not
// suppressed) and its exit code; memcheck fails (exit 9) on definite and
// possible leaks, as leakpath's --check does.
func valgrindLeaks(t *testing.T, extra []string, argv ...string) (map[string]bool, int) {
	t.Helper()
	args := append([]string{"--leak-check=full", "--errors-for-leak-kinds=definite,possible", "--error-exitcode=9"}, extra...)
	r := e2e.RunCapture(t, e2e.TestEnv(e2e.ValgrindEnv(t)...), nil, append(append([]string{"valgrind"}, args...), argv...)...)
	if strings.Contains(string(r.Stderr), "FATAL") || strings.Contains(string(r.Stderr), "in suppressions file") {
		t.Fatalf("valgrind failed:\n%s", r.Stderr)
	}
	got := map[string]bool{}
	for _, line := range strings.Split(string(r.Stderr), "\n") {
		// "==1== by 0x109234: table(int) (suppleak.cc:21)" under a
		// "definitely lost" record: the sites' frames appear only there.
		for _, s := range suppleakSites {
			if strings.Contains(line, ": "+s.valgrind+" (") {
				got[s.fn] = true
			}
		}
	}
	return got, r.Code
}

func haveValgrind(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("valgrind is not installed: the comparison with memcheck needs it (apt-get install valgrind)")
	}
}

// TestValgrindSuppressionFile hides leaks with a hand-written valgrind
// suppression file: fun: lines on mangled names with wildcards, obj: and
// src: lines, "...", match-leak-kinds, and entries of other kinds and
// tools that must be skipped. The same file under valgrind hides the same
// leaks.
func TestValgrindSuppressionFile(t *testing.T) {
	bin := e2e.Fixture(t, "suppleak.cc")
	supp := filepath.Join(t.TempDir(), "hand.supp")
	os.WriteFile(supp, []byte(`# operator new, then a mangled name by wildcard
{
   cart
   Memcheck:Leak
   match-leak-kinds: definite,possible
   fun:_Znwm
   fun:_ZN4shop*
   fun:main
}
# "..." over malloc, main by its line, the caller of main by its module
{
   copy
   Memcheck:Leak
   ...
   fun:copy_n?me
   src:suppleak.cc:30
   obj:*/libc.so*
}
# Does not match: table is static, its symbol is _ZL5tablei.
{
   not-table
   Memcheck:Leak
   fun:calloc
   fun:table
}
# Does not match: the extra leak is definite.
{
   extra-possible-only
   Memcheck:Leak
   match-leak-kinds: possible
   fun:malloc
   fun:_Z10extra_leakv
}
{
   another kind
   Memcheck:Param
   write(buf)
   fun:write
}
{
   another tool
   Helgrind:Race
   fun:*
}
`), 0o644)
	r := e2e.Leakpath(t, []string{"--check", "--suppressions", supp}, nil, bin, "extra")
	got := suppressedSites(t, r)
	want := map[string]string{
		"shop::make_cart()": "valgrind:cart", "copy_name": "valgrind:copy",
		"table(int)": "", "extra_leak()": "",
	}
	for fn, w := range want {
		s, ok := got[fn]
		if w != "" {
			w += " (" + supp + ":" + map[string]string{"valgrind:cart": "2", "valgrind:copy": "11"}[w] + ")"
		}
		if !ok || s != w {
			t.Errorf("%s: reported %v, suppressed by %q; want suppressed by %q", fn, ok, s, w)
		}
	}
	if r.Code != e2e.ExitLeaks {
		t.Errorf("--check with two leaks not suppressed exited %d, want %d\n%s", r.Code, e2e.ExitLeaks, r.Text)
	}
	if !strings.Contains(r.Text, "valgrind:cart") {
		t.Errorf("the text report does not list the valgrind suppression used:\n%s", r.Text)
	}

	haveValgrind(t)
	vg, code := valgrindLeaks(t, []string{"--suppressions=" + supp}, bin, "extra")
	for fn, w := range want {
		if vg[fn] != (w == "") {
			t.Errorf("valgrind with the same file: %s leaked %v, want %v", fn, vg[fn], w == "")
		}
	}
	if code != 9 {
		t.Errorf("valgrind exited %d, want 9 (leaks left)", code)
	}
}

// TestSystemValgrindSuppressions passes the valgrind suppression files
// Debian installs (and Open MPI's) to leakpath: they load, and hide none of
// the fixture's leaks.
func TestSystemValgrindSuppressions(t *testing.T) {
	bin := e2e.Fixture(t, "suppleak.cc")
	var flags []string
	for _, f := range []string{"/usr/libexec/valgrind/default.supp", "/usr/lib/valgrind/debian.supp",
		"/usr/lib/valgrind/python3.supp", "/usr/share/openmpi/openmpi-valgrind.supp"} {
		if _, err := os.Stat(f); err == nil {
			flags = append(flags, "--suppressions", f)
		}
	}
	if len(flags) == 0 {
		t.Skip("no valgrind suppression file installed (apt-get install valgrind)")
	}
	r := e2e.Leakpath(t, append(flags, "--check"), nil, bin)
	if r.Code != e2e.ExitLeaks {
		t.Fatalf("exited %d, want %d; stderr:\n%s", r.Code, e2e.ExitLeaks, r.Stderr)
	}
	for fn, s := range suppressedSites(t, r) {
		if s != "" {
			t.Errorf("%s suppressed by %s", fn, s)
		}
	}
}

// TestGenSuppressionsRoundTrip writes the leaks of a run as suppressions
// in both formats: a second run with the file passes --check, and the
// file does not hide the leak the first run did not have. valgrind accepts
// the valgrind file and hides the same leaks with it.
func TestGenSuppressionsRoundTrip(t *testing.T) {
	bin := e2e.Fixture(t, "suppleak.cc")
	dir := t.TempDir()
	for _, tc := range []struct {
		name, format, text string
	}{
		{"gen.txt", "", "leak:^copy_name$"},
		{"gen.supp", "", "fun:_ZN4shop9make_cartEv"},
		{"gen.lsan", "valgrind", "fun:_ZL5tablei"}, // the flag beats the name
	} {
		path := filepath.Join(dir, tc.name)
		flags := []string{"--check", "--gen-suppressions", path}
		if tc.format != "" {
			flags = append(flags, "--gen-suppressions-format", tc.format)
		}
		first := e2e.Leakpath(t, flags, nil, bin)
		if first.Code != e2e.ExitLeaks {
			t.Errorf("%s: the first run exited %d, want %d", tc.name, first.Code, e2e.ExitLeaks)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v; stderr:\n%s", tc.name, err, first.Stderr)
		}
		if !strings.Contains(string(b), tc.text) {
			t.Errorf("%s has no %q:\n%s", tc.name, tc.text, b)
		}
		second := e2e.Leakpath(t, []string{"--check", "--suppressions", path}, nil, bin)
		if second.Code != 0 {
			t.Errorf("%s: the run with the generated suppressions exited %d, want 0\n%s\n%s", tc.name, second.Code, b, second.Text)
		}
		for fn, s := range suppressedSites(t, second) {
			if s == "" {
				t.Errorf("%s: %s not suppressed", tc.name, fn)
			}
		}
		third := e2e.Leakpath(t, []string{"--check", "--suppressions", path}, nil, bin, "extra")
		if third.Code != e2e.ExitLeaks {
			t.Errorf("%s: a run with a new leak exited %d, want %d", tc.name, third.Code, e2e.ExitLeaks)
		}
		if s, ok := suppressedSites(t, third)["extra_leak()"]; !ok || s != "" {
			t.Errorf("%s: the new leak: reported %v, suppressed by %q; want reported, not suppressed", tc.name, ok, s)
		}
	}

	// Named by the pid, as -o.
	byPID := e2e.Leakpath(t, []string{"--gen-suppressions", filepath.Join(dir, "pid-%p.supp")}, nil, bin)
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("pid-%d.supp", byPID.Report.PID))); err != nil {
		t.Errorf("--gen-suppressions pid-%%p.supp: %v", err)
	}

	// From a trace, with leakpath report.
	trace := filepath.Join(dir, "run.lpt")
	e2e.Leakpath(t, []string{"-o", trace}, nil, bin)
	fromTrace := filepath.Join(dir, "trace.supp")
	if r := e2e.RunCapture(t, e2e.TestEnv(), nil, e2e.Bin, "report", "--gen-suppressions", fromTrace, "--output", filepath.Join(dir, "out.txt"), trace); r.Code != 0 {
		t.Fatalf("leakpath report --gen-suppressions exited %d:\n%s", r.Code, r.Stderr)
	}
	if r := e2e.Leakpath(t, []string{"--check", "--suppressions", fromTrace}, nil, bin); r.Code != 0 {
		t.Errorf("the run with report's suppressions exited %d, want 0\n%s", r.Code, r.Text)
	}

	haveValgrind(t)
	supp := filepath.Join(dir, "gen.supp")
	if vg, code := valgrindLeaks(t, nil, bin); code != 9 || len(vg) != 3 {
		t.Errorf("valgrind without suppressions: exit %d, leaks at %v; want 9 and the 3 sites", code, vg)
	}
	vg, code := valgrindLeaks(t, []string{"--suppressions=" + supp}, bin)
	if code != 0 || len(vg) != 0 {
		t.Errorf("valgrind with leakpath's generated %s: exit %d, leaks at %v; want 0 and none", supp, code, vg)
	}
	vg, code = valgrindLeaks(t, []string{"--suppressions=" + supp}, bin, "extra")
	if code != 9 || !vg["extra_leak()"] || len(vg) != 1 {
		t.Errorf("valgrind with %s and a new leak: exit %d, leaks at %v; want 9 and extra_leak() alone", supp, code, vg)
	}
}

// TestGenSuppressionsFlags checks the flags' errors.
func TestGenSuppressionsFlags(t *testing.T) {
	bin := e2e.Fixture(t, "suppleak.cc")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gen-suppressions", "x.supp", "--gen-suppressions-format", "xml"}, `"xml": want lsan or valgrind`},
		{[]string{"--gen-suppressions-format", "lsan"}, "needs --gen-suppressions"},
		{[]string{"--gen-suppressions", "/nonexistent/dir/x.supp"}, "cannot create files in /nonexistent/dir"},
	} {
		r := e2e.RunCapture(t, e2e.TestEnv(), nil, append(append([]string{e2e.Bin, "run"}, tc.args...), "--", bin)...)
		if r.Code == 0 || !strings.Contains(string(r.Stderr), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, r.Code, r.Stderr, tc.want)
		}
	}
	r := e2e.RunCapture(t, e2e.TestEnv(), nil, e2e.Bin, "report", "--gen-suppressions", filepath.Join(t.TempDir(), "x.supp"), "a.lpt", "b.lpt")
	if r.Code != e2e.ExitUsage || !strings.Contains(string(r.Stderr), "--gen-suppressions takes one trace (got 2)") {
		t.Errorf("report --gen-suppressions with two traces: exit %d, stderr %q", r.Code, r.Stderr)
	}
}

// TestBaseline fails --check only on leak sites a baseline report does
// not have, and names them.
func TestBaseline(t *testing.T) {
	bin := e2e.Fixture(t, "suppleak.cc")
	dir := t.TempDir()
	base := filepath.Join(dir, "baseline.json")
	first := e2e.Leakpath(t, []string{"--check"}, nil, bin)
	if first.Code != e2e.ExitLeaks {
		t.Fatalf("the baseline run exited %d, want %d", first.Code, e2e.ExitLeaks)
	}
	os.WriteFile(base, first.ReportJSON, 0o644)

	same := e2e.Leakpath(t, []string{"--check", "--baseline", base}, nil, bin)
	if same.Code != 0 || !strings.Contains(same.Text, "every leak group failing --check (3) is in the baseline "+base) {
		t.Errorf("the same leaks with the baseline: exit %d, want 0 and a note\n%s", same.Code, same.Text)
	}
	grown := e2e.Leakpath(t, []string{"--check", "--baseline", base}, nil, bin, "extra")
	if grown.Code != e2e.ExitLeaks {
		t.Errorf("a new leak with the baseline: exit %d, want %d", grown.Code, e2e.ExitLeaks)
	}
	note := grown.Text[strings.Index(grown.Text, "not in the baseline")+1:]
	if !strings.Contains(grown.Text, "leakpath: 1 leak group not in the baseline "+base+" (of 4 failing --check):") ||
		!strings.Contains(note, "NEW LEAK 777 B in 1 block (definite) from malloc") || !strings.Contains(note, "extra_leak()") {
		t.Errorf("the note does not name the new leak alone:\n%s", grown.Text)
	}
	for _, s := range suppleakSites[:3] {
		if strings.Contains(note, s.fn) {
			t.Errorf("the note names %s, which the baseline has:\n%s", s.fn, note)
		}
	}
	// Kinds still count: a new leak of a kind --check ignores passes.
	if r := e2e.Leakpath(t, []string{"--check", "--check-kinds", "possible", "--baseline", base}, nil, bin, "extra"); r.Code != 0 {
		t.Errorf("a new definite leak with --check-kinds possible: exit %d, want 0", r.Code)
	}

	notJSON := filepath.Join(dir, "bad.json")
	os.WriteFile(notJSON, []byte("leak:foo\n"), 0o644)
	otherSchema := filepath.Join(dir, "other.json")
	os.WriteFile(otherSchema, []byte(`{"schema": "leakpath.diff/v1"}`), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--check", "--baseline", filepath.Join(dir, "missing.json")}, "--baseline: open " + filepath.Join(dir, "missing.json") + ": no such file"},
		{[]string{"--check", "--baseline", notJSON}, "not a leakpath report"},
		{[]string{"--check", "--baseline", otherSchema}, `schema "leakpath.diff/v1"`},
		{[]string{"--baseline", base}, "--baseline works with --check"},
	} {
		r := e2e.RunCapture(t, e2e.TestEnv(), nil, append(append([]string{e2e.Bin, "run"}, tc.args...), "--", bin)...)
		if r.Code == 0 || r.Code == e2e.ExitLeaks || !strings.Contains(string(r.Stderr), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error with %q", tc.args, r.Code, r.Stderr, tc.want)
		}
		if slices.Contains(tc.args, "--check") && strings.Contains(string(r.Stderr), "exited with code") {
			t.Errorf("%v: the program ran despite the bad baseline", tc.args)
		}
	}
}

// TestValgrindGeneratedSuppressions feeds what valgrind
// --gen-suppressions=all writes to leakpath: it hides every leak, inlined
// frames (named by valgrind by their plain DWARF names) and C++ mangled
// names included; and leakpath's --gen-suppressions file hides every leak
// under valgrind.
func TestValgrindGeneratedSuppressions(t *testing.T) {
	e2e.Exhaustive(t, "runs valgrind on each fixture; leakpath's own suppressions are checked without it")
	haveValgrind(t)
	for _, fx := range []struct {
		name  string
		flags []string
		args  []string
	}{
		{"suppleak.cc", nil, []string{"extra"}},
		{"suppinline.cc", []string{"-O2"}, nil},
	} {
		bin := e2e.Fixture(t, fx.name, fx.flags...)
		vg := e2e.RunCapture(t, e2e.TestEnv(e2e.ValgrindEnv(t)...), nil, append([]string{"valgrind", "--leak-check=full", "--gen-suppressions=all", bin}, fx.args...)...)
		// The entries are the lines between "{" and "}" not starting
		// with "==" (valgrind's own lines).
		var supp strings.Builder
		for _, line := range strings.Split(string(vg.Stderr), "\n") {
			if !strings.HasPrefix(line, "==") {
				supp.WriteString(line + "\n")
			}
		}
		if n := strings.Count(supp.String(), "Memcheck:Leak"); n == 0 {
			t.Fatalf("%s: valgrind generated no suppression:\n%s", fx.name, vg.Stderr)
		}
		path := filepath.Join(t.TempDir(), "valgrind.supp")
		os.WriteFile(path, []byte(supp.String()), 0o644)
		without := e2e.Leakpath(t, []string{"--check"}, nil, append([]string{bin}, fx.args...)...)
		with := e2e.Leakpath(t, []string{"--check", "--suppressions", path}, nil, append([]string{bin}, fx.args...)...)
		if without.Code != e2e.ExitLeaks || with.Code != 0 {
			t.Errorf("%s: --check exited %d without valgrind's suppressions, %d with them; want %d and 0\n%s\n%s",
				fx.name, without.Code, with.Code, e2e.ExitLeaks, supp.String(), with.Text)
		}
		// And the other way: leakpath's own file under valgrind.
		own := filepath.Join(t.TempDir(), "leakpath.supp")
		e2e.Leakpath(t, []string{"--gen-suppressions", own}, nil, append([]string{bin}, fx.args...)...)
		if _, code := valgrindLeaks(t, []string{"--suppressions=" + own}, append([]string{bin}, fx.args...)...); code != 0 {
			b, _ := os.ReadFile(own)
			t.Errorf("%s: valgrind with leakpath's suppressions exited %d, want 0\n%s", fx.name, code, b)
		}
	}
}

// TestSuppressedOwnerKeepsIndirect: a suppression that hides a definite
// leak hides the indirect blocks it holds when it is LeakSanitizer's
// (LSan treats suppressed blocks as reachable) but not when it is a
// valgrind entry: memcheck suppresses each loss record by its own stack,
// and leakpath must report what memcheck does with the same file.
func TestSuppressedOwnerKeepsIndirect(t *testing.T) {
	bin := e2e.Fixture(t, "suppowner.c")
	dir := t.TempDir()
	vgSupp := filepath.Join(dir, "head.supp")
	os.WriteFile(vgSupp, []byte("{\n   head\n   Memcheck:Leak\n   fun:calloc\n   fun:make_head\n}\n"), 0o644)
	lsanSupp := filepath.Join(dir, "head.txt")
	os.WriteFile(lsanSupp, []byte("leak:make_head\n"), 0o644)
	for _, tc := range []struct {
		file     string
		indirect [2]uint64 // bytes, blocks left reported
	}{
		{vgSupp, [2]uint64{64, 1}},
		{lsanSupp, [2]uint64{0, 0}},
	} {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			r, k := e2e.RunKinds(t, []string{"--suppressions", tc.file}, bin)
			if d := k.Totals.ByKind["definite"]; d.Blocks != 0 {
				t.Errorf("definite: %d B in %d blocks, want the head suppressed\n%s", d.Bytes, d.Blocks, r.Text)
			}
			if in := k.Totals.ByKind["indirect"]; in.Bytes != tc.indirect[0] || in.Blocks != tc.indirect[1] {
				t.Errorf("indirect: %d B in %d blocks, want %d in %d\n%s", in.Bytes, in.Blocks, tc.indirect[0], tc.indirect[1], r.Text)
			}
		})
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Log("valgrind is not installed: not compared with memcheck")
		return
	}
	log := e2e.MemcheckLog(t, "--leak-check=full", "--suppressions="+vgSupp, bin)
	m := e2e.VGKind.FindAllSubmatch(log, -1)
	for _, s := range m {
		if string(s[1]) == "indirectly lost" && (e2e.Atoi(string(s[2])) != 64 || e2e.Atoi(string(s[3])) != 1) {
			t.Errorf("memcheck with the same file: indirectly lost %s B in %s blocks, want 64 in 1 as leakpath\n%s", s[2], s[3], log)
		}
	}
	if len(m) == 0 {
		t.Errorf("no LEAK SUMMARY in memcheck's log:\n%s", log)
	}
}

// TestBaselineOtherCheckout: a baseline recorded on a build in one
// directory knows the same leak sites built from the same sources in
// another (a CI workspace), whose debug information has other absolute
// paths; a new leak there is still new.
func TestBaselineOtherCheckout(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(e2e.Root, "testdata", "fixtures", "suppleak.cc"))
	if err != nil {
		t.Fatal(err)
	}
	var bins []string
	for _, d := range []string{"dev", "ci"} {
		dir := filepath.Join(t.TempDir(), d)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "suppleak.cc"), src, 0o644)
		bin := filepath.Join(dir, "suppleak")
		// Not the cache's: each checkout has its own copy of the source.
		if err := testfixture.Compile("c++", bin, "-g", "-O0", filepath.Join(dir, "suppleak.cc")); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, bin)
	}
	first := e2e.Leakpath(t, []string{"--check"}, nil, bins[0])
	if first.Code != e2e.ExitLeaks {
		t.Fatalf("the baseline run exited %d, want %d\n%s", first.Code, e2e.ExitLeaks, first.Text)
	}
	base := filepath.Join(t.TempDir(), "baseline.json")
	os.WriteFile(base, first.ReportJSON, 0o644)
	if r := e2e.Leakpath(t, []string{"--check", "--baseline", base}, nil, bins[1]); r.Code != 0 {
		t.Errorf("the same leaks built elsewhere: exit %d, want 0\n%s", r.Code, r.Text)
	}
	if r := e2e.Leakpath(t, []string{"--check", "--baseline", base}, nil, bins[1], "extra"); r.Code != e2e.ExitLeaks ||
		!strings.Contains(r.Text, "1 leak group not in the baseline") {
		t.Errorf("a new leak built elsewhere: exit %d, want %d and one new group\n%s", r.Code, e2e.ExitLeaks, r.Text)
	}
}

// TestValgrindObjByFile: a library loaded by a name that is a symbolic
// link (its soname, libsym.so.1 -> libsym.so.1.0) is the file to
// valgrind, whose obj: lines (hand-written or generated) name
// libsym.so.1.0; leakpath matches them, as memcheck does with the same
// file, and its own generated entries name the file too.
func TestValgrindObjByFile(t *testing.T) {
	dir := t.TempDir()
	fx := filepath.Join(e2e.Root, "testdata", "fixtures")
	file := filepath.Join(dir, "libsym.so.1.0")
	link := filepath.Join(dir, "libsym.so.1")
	bin := filepath.Join(dir, "symleak")
	e2e.CompileTo(t, "cc", file, "-shared", "-fPIC", "-g", "-O0", filepath.Join(fx, "symlib.c"))
	e2e.CompileTo(t, "cc", bin, "-g", "-O0", filepath.Join(fx, "symleak.c"), "-ldl")
	if err := os.Symlink("libsym.so.1.0", link); err != nil {
		t.Fatal(err)
	}
	supp := filepath.Join(dir, "lib.supp")
	os.WriteFile(supp, []byte("{\n   by-file\n   Memcheck:Leak\n   fun:calloc\n   obj:"+file+"\n}\n"), 0o644)
	r, k := e2e.RunKinds(t, []string{"--suppressions", supp}, bin, link)
	if sp := k.Totals.Suppressed; sp == nil || sp.Bytes != 40 || sp.Blocks != 1 {
		t.Errorf("suppressed: %v, want the library's 40 B in 1 block by obj:%s\n%s", sp, file, r.Text)
	}
	gen := filepath.Join(dir, "gen.supp")
	if g := e2e.Leakpath(t, []string{"--gen-suppressions", gen}, nil, bin, link); g.Code != 0 {
		t.Fatalf("--gen-suppressions run: exit %d\n%s", g.Code, g.Text)
	}
	b, _ := os.ReadFile(gen)
	if !strings.Contains(string(b), "fun:lib_alloc") || strings.Contains(string(b), "obj:"+link+"\n") {
		t.Errorf("the generated entries name the library by its link or miss lib_alloc:\n%s", b)
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Log("valgrind is not installed: not compared with memcheck")
		return
	}
	log := e2e.MemcheckLog(t, "--leak-check=full", "--suppressions="+supp, bin, link)
	if !strings.Contains(string(log), "suppressed: 40 bytes in 1 blocks") {
		t.Errorf("memcheck with the same file does not suppress the library's 40 B:\n%s", log)
	}
}

// TestGenSuppressionsMainWarns: a leak allocated in main itself gets
// leak:^main$ in LeakSanitizer's format, which matches main in every
// stack: the file would hide any new leak, so leakpath says so on stderr
// (the file's comment alone is not read in CI); valgrind's format needs
// no warning.
func TestGenSuppressionsMainWarns(t *testing.T) {
	bin := e2e.Fixture(t, "roots.c", e2e.IncludeFlag())
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		warn bool
	}{{"main.txt", true}, {"main.supp", false}} {
		path := filepath.Join(dir, tc.name)
		r := e2e.Leakpath(t, []string{"--gen-suppressions", path}, nil, bin, "static")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if tc.warn != strings.Contains(string(b), "\nleak:^main$\n") {
			t.Fatalf("%s: leak:^main$ written %v, want %v:\n%s", tc.name, !tc.warn, tc.warn, b)
		}
		if got := strings.Contains(string(r.Stderr), "hides every leak under main"); got != tc.warn {
			t.Errorf("%s: warning on stderr %v, want %v:\n%s", tc.name, got, tc.warn, r.Stderr)
		}
	}
}
