package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// ownLeak is a leak group of the JSON report with the fields that tell
// the user's code from libraries.
type ownLeak struct {
	Kind    string      `json:"kind"`
	Bytes   uint64      `json:"bytes"`
	Blocks  uint64      `json:"blocks"`
	Own     *bool       `json:"own"`
	Library string      `json:"library"`
	During  string      `json:"during"`
	Folded  int         `json:"folded_stacks"`
	Stack   []jsonFrame `json:"stack"`
}

type ownImage struct {
	Command []string  `json:"command"`
	Leaks   []ownLeak `json:"leaks"`
}

// ownImages returns the images of a JSON report with their leaks' own
// fields.
func ownImages(t *testing.T, b []byte) []ownImage {
	t.Helper()
	var doc struct {
		ownImage
		Processes []ownImage `json:"processes"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if len(doc.Processes) > 0 {
		return doc.Processes
	}
	return []ownImage{doc.ownImage}
}

// ownApp builds libownnoise without debug information, stripped, in a
// directory outside the working tree (as a system library is), and
// ownapp linked with it.
func ownApp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if wd, err := os.Getwd(); err == nil && strings.HasPrefix(dir, wd+"/") {
		t.Skipf("the temporary directory %s lies under the working directory: the library would count as the user's", dir)
	}
	lib := filepath.Join(dir, "libownnoise.so")
	if err := testfixture.Compile("cc", lib, "-O0", "-fPIC", "-shared", "-Wl,-s",
		filepath.Join(root, "testdata", "fixtures", "ownnoise.c")); err != nil {
		t.Fatal(err)
	}
	return fixture(t, "ownapp.c", "-L"+dir, "-lownnoise", "-Wl,-rpath,"+dir)
}

var leakLine = regexp.MustCompile(`(?m)^LEAK .*`)

// TestOwnLeaksFirst: ownapp's own leak (100 B, smaller than the
// library's) is listed alone; the library's four blocks from two groups
// are one line naming the call that led there; the three call sites of
// noisy_init (no debug information) are one group in the JSON.
func TestOwnLeaksFirst(t *testing.T) {
	app := ownApp(t)
	r := leakpath(t, nil, nil, app)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	leaks := leakLine.FindAllString(r.text, -1)
	if len(leaks) != 1 || leaks[0] != "LEAK 100 B in 1 block (definite) from malloc" || !strings.Contains(r.text, "#0  app_work (") {
		t.Errorf("want app_work's leak alone listed; got %q:\n%s", leaks, r.text)
	}
	lib := "\nLIBRARY LEAKS, not in your code: --show-library-leaks lists them (--own PATTERN makes a module yours)\n" +
		"  libownnoise.so: 2 groups, 1,446 B in 4 blocks, during noisy_hello\n"
	if !strings.Contains(r.text, lib) {
		t.Errorf("want the library's line %q:\n%s", lib, r.text)
	}
	if !strings.Contains(r.text, "\nleakpath: 3 leak groups (1,546 B) not freed, 1 in your code; 0 improper uses.\n") {
		t.Errorf("summary line:\n%s", r.text)
	}

	type row struct {
		own            bool
		lib, during    string
		bytes          uint64
		blocks         uint64
		folded         int
		frame0, frame1 string
	}
	var got []row
	imgs := ownImages(t, r.reportJSON)
	for _, l := range imgs[0].Leaks {
		if l.Own == nil || len(l.Stack) < 2 {
			t.Fatalf("leak without \"own\" or a stack: %+v", l)
		}
		got = append(got, row{*l.Own, filepath.Base(l.Library), l.During, l.Bytes, l.Blocks, l.Folded, l.Stack[0].Function, l.Stack[1].Function})
	}
	want := []row{
		{false, "libownnoise.so", "", 1440, 3, 3, "noisy_init", "call_init"},
		{true, ".", "", 100, 1, 0, "app_work", "main"},
		{false, "libownnoise.so", "noisy_hello", 6, 1, 0, "__GI___strdup", "noisy_hello"},
	}
	if len(got) != len(want) {
		t.Fatalf("JSON leaks %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		// strdup's name depends on libc's debug information.
		if strings.Contains(w.frame0, "strdup") && strings.Contains(g.frame0, "strdup") {
			g.frame0 = w.frame0
		}
		if g != w {
			t.Errorf("JSON leak %d: %+v, want %+v", i, g, w)
		}
	}
}

// TestOwnShowLibraryLeaks: --show-library-leaks lists the library's
// groups in full after the user's, the folded one saying so.
func TestOwnShowLibraryLeaks(t *testing.T) {
	r := leakpath(t, []string{"--show-library-leaks"}, nil, ownApp(t))
	leaks := leakLine.FindAllString(r.text, -1)
	want := []string{"LEAK 100 B in 1 block (definite) from malloc", "LEAK 1,440 B in 3 blocks (definite) from malloc", "LEAK 6 B in 1 block (definite) from malloc"}
	if strings.Join(leaks, "\n") != strings.Join(want, "\n") {
		t.Errorf("LEAK lines %q, want %q:\n%s", leaks, want, r.text)
	}
	folded := "LEAK 1,440 B in 3 blocks (definite) from malloc\n  (3 stacks folded: they differ only in return addresses inside functions without debug information)\n  #0  noisy_init in libownnoise.so\n"
	if !strings.Contains(r.text, folded) || !strings.Contains(r.text, "\n  libownnoise.so: 2 groups, 1,446 B in 4 blocks, during noisy_hello\n") {
		t.Errorf("want the folded group %q and the library line:\n%s", folded, r.text)
	}
}

// TestOwnFlag: --own makes the library the user's code: all its groups
// listed, no library line.
func TestOwnFlag(t *testing.T) {
	r := leakpath(t, []string{"--own", "libownnoise*"}, nil, ownApp(t))
	if n := len(leakLine.FindAllString(r.text, -1)); n != 3 || strings.Contains(r.text, "LIBRARY LEAKS") {
		t.Errorf("--own libownnoise*: %d LEAK lines, want 3 and no library line:\n%s", n, r.text)
	}
}

// TestOwnCheckScope: --check fails on the library's leaks too unless
// --check-scope=own; with it, it fails on the user's leaks only.
func TestOwnCheckScope(t *testing.T) {
	app := ownApp(t)
	for _, c := range []struct {
		flags []string
		arg   string
		code  int
	}{
		{[]string{"--check"}, "clean", exitLeaks},
		{[]string{"--check", "--check-scope=all"}, "clean", exitLeaks},
		{[]string{"--check", "--check-scope=own"}, "clean", 0},
		{[]string{"--check", "--check-scope=own"}, "leak", exitLeaks},
	} {
		r := leakpath(t, c.flags, nil, app, c.arg)
		if r.code != c.code {
			t.Errorf("%v on ownapp %s: exit %d, want %d\n%s", c.flags, c.arg, r.code, c.code, r.text)
		}
	}
	r := runCapture(t, testEnv(), nil, lpBin, "run", "--check-scope=mine", "--", app)
	if r.code != 1 || !strings.Contains(string(r.stderr), `--check-scope: "mine" is neither all nor own`) {
		t.Errorf("--check-scope=mine: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestOwnMPI: mpileak (its rank r loses r+1 blocks of 100 B in rank_leak)
// alone (a singleton) and as 2 ranks under mpiexec: each report lists
// rank_leak's leak alone, Open MPI's (and PMIx's, hwloc's) summed up per
// library, naming MPI_Init.
func TestOwnMPI(t *testing.T) {
	mpiexec, bin := mpiFixture(t)
	env := mpiEnv("OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	dir := t.TempDir()
	check := func(name string, text, js []byte, rank int) {
		t.Helper()
		// The report of mpileak's image: up to the next image's.
		s := string(text)
		if i := strings.Index(s[1:], "\nleakpath: "); i >= 0 {
			s = s[:i+1]
		}
		// Rank r's r+1 blocks: in one group, or in two when a stale copy
		// of a pointer makes one possibly lost.
		leaks := leakLine.FindAllString(s, -1)
		if len(leaks) == 0 || len(leaks) > 2 || strings.Count(s, "#0  rank_leak (") != len(leaks) {
			t.Errorf("%s: want rank_leak's leaks alone; got %q:\n%s", name, leaks, text)
		}
		if !regexp.MustCompile(`\n  lib\S+: \d+ groups?, .* during (.*, )?MPI_Init`).MatchString(s) {
			t.Errorf("%s: no library line naming MPI_Init:\n%s", name, text)
		}
		imgs := ownImages(t, js)
		var own, libs int
		var ownBytes uint64
		for _, l := range imgs[0].Leaks {
			switch {
			case l.Own == nil:
				t.Fatalf("%s: a leak without \"own\": %+v", name, l)
			case *l.Own:
				own++
				ownBytes += l.Bytes
				if !stackHas(l.Stack, "rank_leak") {
					t.Errorf("%s: an own leak not from rank_leak: %+v", name, l)
				}
			case l.Library == "":
				t.Errorf("%s: a library leak without its library: %+v", name, l)
			default:
				libs++
			}
		}
		t.Logf("%s: %d groups of mpileak's image in the JSON, %d of them its own", name, own+libs, own)
		if own != len(leaks) || ownBytes != uint64(100*(rank+1)) || libs == 0 {
			t.Errorf("%s: %d own groups (%d B) and %d library groups; want %d (%d B) and some", name, own, ownBytes, libs, len(leaks), 100*(rank+1))
		}
	}

	r := leakpathEnv(t, env, nil, nil, bin)
	if r.code != 0 {
		t.Fatalf("mpileak alone: exit %d: %s", r.code, r.stderr)
	}
	check("singleton", []byte(r.text), r.reportJSON, 0)

	job, _ := runTimeout(t, 2*time.Minute, env, mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "2",
		lpBin, "run", "-o", filepath.Join(dir, "t.%r.lpt"), "--report", filepath.Join(dir, "r.%r.txt"), "--json", filepath.Join(dir, "j.%r.json"), "--", bin)
	if job.code != 0 {
		t.Fatalf("mpiexec exited %d\nstderr: %s", job.code, job.stderr)
	}
	for rank := 0; rank < 2; rank++ {
		text, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("r.%d.txt", rank)))
		if err != nil {
			t.Fatal(err)
		}
		js, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("j.%d.json", rank)))
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("rank %d", rank), text, js, rank)
	}

	// The summary of both traces: rank_leak's merged group alone, the
	// libraries' summed up.
	rep, _ := runTimeout(t, 2*time.Minute, testEnv(), lpBin, "report", filepath.Join(dir, "t.0.lpt"), filepath.Join(dir, "t.1.lpt"))
	out := string(rep.stdout)
	i := strings.Index(out, "==== summary of 2 traces")
	if rep.code != 0 || i < 0 {
		t.Fatalf("leakpath report of both traces: exit %d, no summary:\n%s\n%s", rep.code, out, rep.stderr)
	}
	sum := out[i:]
	leaks := leakLine.FindAllString(sum, -1)
	if len(leaks) != 1 || !strings.HasPrefix(leaks[0], "LEAK 300 B in 3 blocks from malloc, in 2 ranks") || !strings.Contains(sum, "rank_leak (") ||
		!regexp.MustCompile(`\nLIBRARY LEAKS, not in your code \(all traces\):\n  lib\S+: \d+ groups?, `).MatchString(sum) ||
		!regexp.MustCompile(`\nleakpath: 2 traces: \d+ leak groups \(.*\) not freed, 1 in your code; 0 improper uses\.\n$`).MatchString(sum) {
		t.Errorf("summary of both traces: want rank_leak's group alone, library lines and the count of own groups:\n%s", sum)
	}
}
