package main

import (
	"bufio"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/kinds"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/target/inject"
)

// attachBuild is what attachProgram makes of its flags before it attaches,
// built by the same functions.
type attachBuild struct {
	o     attachOptions
	copts collect.Options
	ropts report.Options
	inj   inject.Options
	kinds []event.LeakKind
	outs  *outputs
}

// typed reports whether the collector's scan types the blocks.
func typed(copts collect.Options) bool {
	for _, a := range copts.Analyses {
		if k, ok := a.(*kinds.Analysis); ok && k.Typed() {
			return true
		}
	}
	return false
}

func buildAttach(t *testing.T, args []string) *attachBuild {
	t.Helper()
	b := &attachBuild{}
	fs := attachFlags(&b.o, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	r := &b.o.run
	agent, err := r.checkRecording()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	supp, err := r.leaks.suppressionSet()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if b.kinds, err = r.leaks.kinds(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if b.outs, err = newOutputs(r, io.Discard); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	t.Cleanup(b.outs.close)
	sym := newSymbolizer(r.debugDirs, func(string) {})
	t.Cleanup(sym.close)
	b.copts = attachCollectOptions(r, agent, sym, io.Discard)
	b.ropts = r.reportOptions(sym, supp)
	b.inj = b.o.injectOptions()
	return b
}

// TestAttachUsesEveryFlag sets each of attach's flags to a value other
// than its default and checks that what attach builds from its flags (the
// collector's, the report's and the injection's options, the outputs)
// changes accordingly: a flag attach accepts and ignores fails here, as
// --path-to-root did.
func TestAttachUsesEveryFlag(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.so")
	other := filepath.Join(dir, "other.so")
	supp := filepath.Join(dir, "leaks.supp")
	for _, f := range []string{agent, other} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(supp, []byte("leak:some_function\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--agent", agent}
	def := buildAttach(t, base)

	type effect func(d, b *attachBuild) bool
	// field is the check of a flag consumed outside the options built
	// here (by cmdAttach or attachProgram directly): at least its field
	// must change.
	field := func(get func(o *attachOptions) any) effect {
		return func(d, b *attachBuild) bool { return !reflect.DeepEqual(get(&d.o), get(&b.o)) }
	}
	flags := map[string]struct {
		value string
		used  effect
	}{
		"o":               {filepath.Join(dir, "t.lpt"), func(d, b *attachBuild) bool { return d.outs.trace.s != b.outs.trace.s }},
		"json":            {filepath.Join(dir, "r.json"), func(d, b *attachBuild) bool { return d.outs.json.s != b.outs.json.s }},
		"report":          {filepath.Join(dir, "r.txt"), func(d, b *attachBuild) bool { return d.outs.report.s != b.outs.report.s }},
		"free-stacks":     {"false", func(d, b *attachBuild) bool { return d.copts.Region.FreeStacks != b.copts.Region.FreeStacks }},
		"fold":            {"false", func(d, b *attachBuild) bool { return d.copts.Region.Fold != b.copts.Region.Fold }},
		"time-resolution": {"0", field(func(o *attachOptions) any { return o.run.timeRes })}, // the trace's clock.ShiftAfter
		"max-depth":       {"7", func(d, b *attachBuild) bool { return d.copts.Region.MaxDepth != b.copts.Region.MaxDepth }},
		"agent":           {other, func(d, b *attachBuild) bool { return d.copts.Agent != b.copts.Agent }},
		"debug-dir":       {dir, field(func(o *attachOptions) any { return len(o.run.debugDirs) })}, // newSymbolizer
		"ring-size":       {"64", func(d, b *attachBuild) bool { return d.copts.Region.RingSize != b.copts.Region.RingSize }},
		"max-memory":      {"100", func(d, b *attachBuild) bool { return d.copts.MemoryLimit != b.copts.MemoryLimit }},
		"quiet":           {"true", field(func(o *attachOptions) any { return o.run.quiet })}, // writeReports
		"scan":            {"false", func(d, b *attachBuild) bool { return d.copts.Region.HoldExit != b.copts.Region.HoldExit }},
		"types":           {"true", func(d, b *attachBuild) bool { return typed(d.copts) != typed(b.copts) }},
		"suppressions":    {supp, func(d, b *attachBuild) bool { return (d.ropts.Suppressions == nil) != (b.ropts.Suppressions == nil) }},
		"show-reachable":  {"true", func(d, b *attachBuild) bool { return d.ropts.ShowReachable != b.ropts.ShowReachable }},
		"path-to-root":    {"shop::Widget", func(d, b *attachBuild) bool { return d.ropts.PathToRoot != b.ropts.PathToRoot }},
		"own":             {"*.so", func(d, b *attachBuild) bool { return len(d.ropts.Own.Patterns) != len(b.ropts.Own.Patterns) }},
		"show-library-leaks": {"true", func(d, b *attachBuild) bool {
			return d.ropts.ShowLibraryLeaks != b.ropts.ShowLibraryLeaks
		}},
		"check-scope": {"own", func(d, b *attachBuild) bool { return d.ropts.CheckOwnOnly != b.ropts.CheckOwnOnly }},
		"check-kinds": {"reachable", func(d, b *attachBuild) bool { return !reflect.DeepEqual(d.kinds, b.kinds) }},
		"for":         {"1s", field(func(o *attachOptions) any { return o.duration })}, // cmdAttach's deadline
		"patience":    {"1s", func(d, b *attachBuild) bool { return d.inj.Patience != b.inj.Patience }},
	}
	var names []string
	attachFlags(&attachOptions{}, io.Discard).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if len(names) < 20 {
		t.Fatalf("attach defines only %d flags: %v", len(names), names)
	}
	for _, name := range names {
		c, ok := flags[name]
		if !ok {
			t.Errorf("--%s: no check of its effect here; add one (and make attach use it)", name)
			continue
		}
		b := buildAttach(t, append(append([]string(nil), base...), "--"+name+"="+c.value))
		if !c.used(def, b) {
			t.Errorf("--%s=%s: attach builds the same options as without it (the flag is ignored)", name, c.value)
		}
	}
	for name := range flags {
		if fs := attachFlags(&attachOptions{}, io.Discard); fs.Lookup(name) == nil {
			t.Errorf("the table checks --%s, which attach does not define", name)
		}
	}
}

// TestAttachPathToRoot: attach --types --path-to-root types the blocks
// made after the attach at the scan before the detach and shows how the
// global holds them (attach used to accept --path-to-root and ignore it).
func TestAttachPathToRoot(t *testing.T) {
	bin := fixture(t, "attach_typed.c", "-g")
	cmd := exec.Command(bin)
	cmd.Env = testEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != want {
				t.Fatalf("the program said %q, want %q", l, want)
			}
		case <-time.After(2 * time.Minute): // a hang guard
			t.Fatalf("the program never said %q", want)
		}
	}
	expect("ready")
	a := startAttach(t, cmd.Process.Pid, "--types", "--path-to-root", "node")
	io.WriteString(stdin, "build\n")
	expect("built")
	if out, err := exec.Command(lpBin, "detach", strconv.Itoa(cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("leakpath detach: %v\n%s", err, out)
	}
	_, text := a.wait(t)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("the program after the detach: %v", err)
	}
	b, err := os.ReadFile(a.json)
	if err != nil {
		t.Fatal(err)
	}
	p := typesOf(t, b).PathToRoot
	if p == nil || len(p.Steps) == 0 || !strings.HasPrefix(p.Steps[0].Via, "g_list") || p.Steps[len(p.Steps)-1].Type != "node" {
		t.Errorf("path to root of a node: %+v\n%s", p, text)
	}
	if !strings.Contains(text, "PATH TO ROOT of node") {
		t.Errorf("the text report has no path to root:\n%s", text)
	}
}
