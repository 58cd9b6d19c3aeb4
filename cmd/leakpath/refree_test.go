package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fixtureLines maps the LINE(name) comments of a fixture's source to
// their line numbers.
func fixtureLines(t *testing.T, name string) map[string]int {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "testdata", "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	re := regexp.MustCompile(`LINE\(([^)]*)\)`)
	for i, l := range strings.Split(string(src), "\n") {
		if m := re.FindStringSubmatch(l); m != nil && !strings.Contains(l, "carry a") {
			lines[m[1]] = i + 1
		}
	}
	return lines
}

// site is the function and line of a stack's innermost frame.
type site struct {
	fn   string
	line int
}

func (s site) String() string { return fmt.Sprintf("%s:%d", s.fn, s.line) }

func top(st []jsonFrame) site {
	if len(st) == 0 {
		return site{}
	}
	return site{st[0].Function, st[0].Line}
}

// refreeError is an improper use as the JSON report gives it, first-free
// stack included.
type refreeError struct {
	Kind         string      `json:"kind"`
	Function     string      `json:"function"`
	AllocFn      string      `json:"alloc_function"`
	Stack        []jsonFrame `json:"stack"`
	AllocStack   []jsonFrame `json:"alloc_stack"`
	FreeStack    []jsonFrame `json:"free_stack"`
	FreeCallSite bool        `json:"free_stack_call_site_only"`
}

func refreeErrors(t *testing.T, r result) []refreeError {
	t.Helper()
	var rep struct {
		Errors []refreeError `json:"errors"`
	}
	if err := json.Unmarshal(r.reportJSON, &rep); err != nil {
		t.Fatal(err)
	}
	return rep.Errors
}

// memcheckRefree reads memcheck's "Invalid free() / delete / delete[] /
// realloc()" of the program: the sites (innermost frame of the program)
// of the call, of the first free and of the allocation. ok is false when
// valgrind is not installed.
func memcheckRefree(t *testing.T, argv ...string) (call, first, alloc site, size string, ok bool) {
	t.Helper()
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Log("valgrind is not installed: not compared with memcheck (apt-get install valgrind)")
		return
	}
	logf := filepath.Join(t.TempDir(), "vg.log")
	cmd := exec.Command(vg, append([]string{"--log-file=" + logf}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, testEnv()
	cmd.Run()
	log, err := os.ReadFile(logf)
	if err != nil {
		t.Fatalf("valgrind log: %v", err)
	}
	frame := regexp.MustCompile(`^==\d+==\s+by 0x[0-9A-F]+: (\S+) \((\S+):(\d+)\)`)
	sizeRe := regexp.MustCompile(`Address 0x[0-9a-f]+ is 0 bytes inside a block of size (\d+) free'd`)
	part := 0 // 1: the call, 2: the first free, 3: the allocation
	var sites [4]site
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.Contains(l, "Invalid free() / delete / delete[] / realloc()"):
			if part != 0 {
				t.Fatalf("memcheck reported more than one invalid free:\n%s", log)
			}
			part = 1
		case part >= 1 && sizeRe.MatchString(l):
			size = sizeRe.FindStringSubmatch(l)[1]
			part = 2
		case part >= 2 && strings.Contains(l, "Block was alloc'd at"):
			part = 3
		case part >= 1:
			if m := frame.FindStringSubmatch(l); m != nil && sites[part].fn == "" {
				var n int
				fmt.Sscan(m[3], &n)
				sites[part] = site{m[1], n}
			}
		}
	}
	if part != 3 {
		t.Fatalf("no invalid free with its block's free and allocation in memcheck's log:\n%s", log)
	}
	return sites[1], sites[2], sites[3], size, true
}

// TestRefreeFolded: a block freed twice (or realloc'ed after its free)
// is a double free whether or not the agent folded its allocation and
// first free (it does by default: the same thread allocated and freed it
// at once), with the allocation's stack and the first free's call site,
// as memcheck names them; with --fold=false the same kind and sites. A
// realloc the C library aborts inside ("grow") is one too, its own stack
// unknown.
func TestRefreeFolded(t *testing.T) {
	bin := fixture(t, "refree.c", includeFlag())
	lines := fixtureLines(t, "refree.c")
	for _, mode := range []string{"free", "realloc", "grow", "thread"} {
		t.Run(mode, func(t *testing.T) {
			callFn, callLine := "main", lines["second"]
			switch mode {
			case "thread":
				callFn, callLine = "again", lines["thread free"]
			case "realloc":
				callLine = lines["realloc"]
			case "grow":
				callLine = lines["grow"]
			}
			want := struct{ call, first, alloc site }{
				site{callFn, callLine}, site{"drop", lines["first free"]}, site{"make", lines["alloc"]}}
			if call, first, alloc, size, ok := memcheckRefree(t, bin, mode); ok {
				if call != want.call || first != want.first || alloc != want.alloc || size != "48" {
					t.Errorf("memcheck: call %v, first free %v, allocation %v, size %s; the fixture says %v, %v, %v, 48",
						call, first, alloc, size, want.call, want.first, want.alloc)
				}
			}
			for _, fold := range []bool{true, false} {
				r := leakpath(t, []string{fmt.Sprintf("--fold=%v", fold)}, nil, bin, mode)
				errs := refreeErrors(t, r)
				if len(errs) != 1 {
					t.Fatalf("fold %v: %d improper uses, want 1:\n%s", fold, len(errs), r.text)
				}
				e := errs[0]
				wantFn := "free"
				if mode == "realloc" || mode == "grow" {
					wantFn = "realloc"
				}
				if e.Kind != "double_free" || e.Function != wantFn || e.AllocFn != "malloc" {
					t.Errorf("fold %v: %s by %s of a block of %s, want double_free by %s of malloc's:\n%s",
						fold, e.Kind, e.Function, e.AllocFn, wantFn, r.text)
				}
				if got := top(e.Stack); got != want.call {
					t.Errorf("fold %v: the call at %v, want %v:\n%s", fold, got, want.call, r.text)
				}
				if got := top(e.FreeStack); got != want.first {
					t.Errorf("fold %v: first freed at %v, want %v:\n%s", fold, got, want.first, r.text)
				}
				if got := top(e.AllocStack); got != want.alloc || !stackHas(e.AllocStack, "main") {
					t.Errorf("fold %v: allocated at %v (with main: %v), want %v:\n%s", fold, got,
						stackHas(e.AllocStack, "main"), want.alloc, r.text)
				}
				// Folded, the first free's stack is its call site; else whole.
				if e.FreeCallSite != fold || (!fold && !stackHas(e.FreeStack, "main")) {
					t.Errorf("fold %v: first free's stack %d frames, call site only %v:\n%s",
						fold, len(e.FreeStack), e.FreeCallSite, r.text)
				}
			}
		})
	}
}

// TestRefreeReused: an address whose folded block was freed, allocated
// again and recorded at once (inside a scope) and freed is no double
// free: the agent's word that the address was folded is only a hint the
// collector checks against the live blocks.
func TestRefreeReused(t *testing.T) {
	bin := fixture(t, "refree.c", includeFlag())
	r := leakpath(t, nil, nil, bin, "reuse")
	if !bytes.Contains(r.stdout, []byte("the same address again: yes")) {
		t.Skipf("the C library gave another address: nothing to check (%q)", r.stdout)
	}
	if errs := refreeErrors(t, r); len(errs) != 0 || r.code != 0 {
		t.Errorf("exit %d, %d improper uses, want none:\n%s", r.code, len(errs), r.text)
	}
}
