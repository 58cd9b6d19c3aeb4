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

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/session"
)

// attachBuild is what session.Prepare makes of attach's flags before it
// attaches: the recording whose options attach records with.
type attachBuild struct {
	o     session.Options
	rec   *session.Recording
	ropts report.Options
}

func buildAttach(t *testing.T, args []string) *attachBuild {
	t.Helper()
	b := &attachBuild{}
	fs := attachFlags(&b.o, io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	// Prepared only: nothing attaches to the test before Record.
	rec, err := session.Prepare(&b.o, os.Getpid(), io.Discard)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	t.Cleanup(rec.Close)
	b.rec, b.ropts = rec, rec.ReportOptions()
	return b
}

// TestAttachUsesEveryFlag sets each of attach's flags to a value other
// than its default and checks that what the session prepares from them
// (the collector's, the report's and the injection's options, the
// outputs) changes accordingly: a flag attach accepts and ignores fails
// here, as --path-to-root did.
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
	// field is the check of a flag consumed outside what Prepare builds
	// (by the symbolizer, or by Attach and Record directly): at least its
	// field must change.
	field := func(get func(o *session.Options) any) effect {
		return func(d, b *attachBuild) bool { return !reflect.DeepEqual(get(&d.o), get(&b.o)) }
	}
	file := func(which int) effect {
		return func(d, b *attachBuild) bool {
			df, bf := [3]string{}, [3]string{}
			df[0], df[1], df[2] = d.rec.Files()
			bf[0], bf[1], bf[2] = b.rec.Files()
			return df[which] != bf[which]
		}
	}
	flags := map[string]struct {
		value string
		used  effect
	}{
		"o":      {filepath.Join(dir, "t.lpt"), file(0)},
		"json":   {filepath.Join(dir, "r.json"), file(1)},
		"report": {filepath.Join(dir, "r.txt"), file(2)},
		"free-stacks": {"false", func(d, b *attachBuild) bool {
			return d.rec.Collect.Region.FreeStacks != b.rec.Collect.Region.FreeStacks
		}},
		"fold": {"false", func(d, b *attachBuild) bool { return d.rec.Collect.Region.Fold != b.rec.Collect.Region.Fold }},
		"time-resolution": {"0", func(d, b *attachBuild) bool {
			return d.rec.Collect.Region.ExactTimes != b.rec.Collect.Region.ExactTimes
		}},
		"max-depth":      {"7", func(d, b *attachBuild) bool { return d.rec.Collect.Region.MaxDepth != b.rec.Collect.Region.MaxDepth }},
		"agent":          {other, func(d, b *attachBuild) bool { return d.rec.Collect.Agent != b.rec.Collect.Agent }},
		"debug-dir":      {dir, field(func(o *session.Options) any { return len(o.DebugDirs) })}, // the symbolizer's
		"ring-size":      {"64", func(d, b *attachBuild) bool { return d.rec.Collect.Region.RingSize != b.rec.Collect.Region.RingSize }},
		"max-memory":     {"100", func(d, b *attachBuild) bool { return d.rec.Collect.MemoryLimit != b.rec.Collect.MemoryLimit }},
		"quiet":          {"true", field(func(o *session.Options) any { return o.Quiet })}, // Record's
		"scan":           {"false", func(d, b *attachBuild) bool { return d.rec.Collect.Region.HoldExit != b.rec.Collect.Region.HoldExit }},
		"types":          {"true", func(d, b *attachBuild) bool { return (d.rec.Collect.Types == nil) != (b.rec.Collect.Types == nil) }},
		"suppressions":   {supp, func(d, b *attachBuild) bool { return (d.ropts.Suppressions == nil) != (b.ropts.Suppressions == nil) }},
		"show-reachable": {"true", func(d, b *attachBuild) bool { return d.ropts.ShowReachable != b.ropts.ShowReachable }},
		"path-to-root":   {"shop::Widget", func(d, b *attachBuild) bool { return d.ropts.PathToRoot != b.ropts.PathToRoot }},
		"own":            {"*.so", func(d, b *attachBuild) bool { return len(d.ropts.Own.Patterns) != len(b.ropts.Own.Patterns) }},
		"show-library-leaks": {"true", func(d, b *attachBuild) bool {
			return d.ropts.ShowLibraryLeaks != b.ropts.ShowLibraryLeaks
		}},
		"check-scope": {"own", func(d, b *attachBuild) bool { return d.ropts.CheckOwnOnly != b.ropts.CheckOwnOnly }},
		"check-kinds": {"reachable", func(d, b *attachBuild) bool { return !reflect.DeepEqual(d.rec.CheckKinds, b.rec.CheckKinds) }},
		"for":         {"1s", field(func(o *session.Options) any { return o.For })}, // Attach's deadline
		"patience":    {"1s", func(d, b *attachBuild) bool { return d.rec.Inject.Patience != b.rec.Inject.Patience }},
	}
	var names []string
	attachFlags(&session.Options{}, io.Discard).VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
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
		if fs := attachFlags(&session.Options{}, io.Discard); fs.Lookup(name) == nil {
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
