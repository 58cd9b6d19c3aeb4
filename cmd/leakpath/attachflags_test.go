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
	"github.com/leakpath/leakpath/internal/analysis/rootcause"
	"github.com/leakpath/leakpath/internal/analysis/stale"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/session"
	"github.com/leakpath/leakpath/internal/target/region"
)

// prepared is what session.Prepare makes of a command's flags before it
// records: the recording whose options the command records with.
type prepared struct {
	run   runOptions // its s is attach's options too
	rec   *session.Recording
	ropts report.Options
}

// prepare parses args as command's (run or attach) and prepares the
// recording, nothing started: attach's of the test itself, run's of true.
func prepare(t *testing.T, command string, args []string) *prepared {
	t.Helper()
	b := &prepared{}
	fs, pid := attachFlags(&b.run.s, io.Discard), os.Getpid()
	if command == "run" {
		fs, pid = runFlags(&b.run, io.Discard), 0
		b.run.s.Argv = []string{"true"}
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	rec, err := session.Prepare(&b.run.s, pid, io.Discard)
	if err != nil {
		t.Fatalf("%s %v: %v", command, args, err)
	}
	t.Cleanup(rec.Close)
	b.rec, b.ropts = rec, rec.ReportOptions()
	return b
}

// analyses are the analyses of type T registered with p's collector.
func analyses[T collect.Analysis](p *prepared) []T {
	var out []T
	for _, a := range p.rec.Collect.Analyses {
		if t, ok := a.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// flagEffect is a flag's check: a value other than its default, flags it
// needs beside it, and whether it changed what was prepared (d: without
// it).
type flagEffect struct {
	value string
	with  []string
	used  func(d, b *prepared) bool
}

// flagEffects are the effects of run's and attach's flags on what
// session.Prepare builds: the collector's, the report's and the
// injection's options, the outputs. dir holds the files they name.
func flagEffects(t *testing.T, dir string) map[string]flagEffect {
	other := filepath.Join(dir, "other.so")
	supp := filepath.Join(dir, "leaks.supp")
	baseline := filepath.Join(dir, "baseline.json")
	for f, text := range map[string]string{other: "", supp: "leak:some_function\n", baseline: `{"schema":"` + report.Schema + `"}`} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// field is the check of a flag consumed outside what Prepare builds
	// (by the symbolizer, by cmdRun, or by Attach and Record directly):
	// at least its field must change.
	field := func(get func(o *runOptions) any) func(d, b *prepared) bool {
		return func(d, b *prepared) bool { return !reflect.DeepEqual(get(&d.run), get(&b.run)) }
	}
	file := func(which int) func(d, b *prepared) bool {
		return func(d, b *prepared) bool {
			var df, bf [3]string
			df[0], df[1], df[2] = d.rec.Files()
			bf[0], bf[1], bf[2] = b.rec.Files()
			return df[which] != bf[which]
		}
	}
	inRegion := func(get func(r *region.Options) any) func(d, b *prepared) bool {
		return func(d, b *prepared) bool {
			return !reflect.DeepEqual(get(&d.rec.Collect.Region), get(&b.rec.Collect.Region))
		}
	}
	// analysis is the check of a flag that changes the analyses
	// registered with the collector, or one of them.
	analysis := func(d, b *prepared) bool {
		return !reflect.DeepEqual(analyses[*rootcause.Recorder](d), analyses[*rootcause.Recorder](b)) ||
			!reflect.DeepEqual(analyses[*stale.Watch](d), analyses[*stale.Watch](b))
	}
	typed := func(p *prepared) bool {
		k := analyses[*kinds.Analysis](p)
		return len(k) == 1 && k[0].Typed()
	}
	return map[string]flagEffect{
		// run's and attach's
		"o":               {value: filepath.Join(dir, "t.lpt"), used: file(0)},
		"json":            {value: filepath.Join(dir, "r.json"), used: file(1)},
		"report":          {value: filepath.Join(dir, "r.txt"), used: file(2)},
		"free-stacks":     {value: "false", used: inRegion(func(r *region.Options) any { return r.FreeStacks })},
		"fold":            {value: "false", used: inRegion(func(r *region.Options) any { return r.Fold })},
		"time-resolution": {value: "0", used: inRegion(func(r *region.Options) any { return r.ExactTimes })},
		"max-depth":       {value: "7", used: inRegion(func(r *region.Options) any { return r.MaxDepth })},
		"agent":           {value: other, used: func(d, b *prepared) bool { return d.rec.Collect.Agent != b.rec.Collect.Agent }},
		"debug-dir":       {value: dir, used: field(func(o *runOptions) any { return len(o.s.DebugDirs) })}, // the symbolizer's
		"ring-size":       {value: "64", used: inRegion(func(r *region.Options) any { return r.RingSize })},
		"max-memory":      {value: "100", used: func(d, b *prepared) bool { return d.rec.Collect.MemoryLimit != b.rec.Collect.MemoryLimit }},
		"quiet":           {value: "true", used: field(func(o *runOptions) any { return o.s.Quiet })}, // Record's
		"scan":            {value: "false", used: inRegion(func(r *region.Options) any { return r.HoldExit })},
		"types":           {value: "true", used: func(d, b *prepared) bool { return typed(d) != typed(b) }},
		"suppressions":    {value: supp, used: func(d, b *prepared) bool { return (d.ropts.Suppressions == nil) != (b.ropts.Suppressions == nil) }},
		"show-reachable":  {value: "true", used: func(d, b *prepared) bool { return d.ropts.ShowReachable != b.ropts.ShowReachable }},
		"path-to-root":    {value: "shop::Widget", used: func(d, b *prepared) bool { return d.ropts.PathToRoot != b.ropts.PathToRoot }},
		"own":             {value: "*.so", used: func(d, b *prepared) bool { return len(d.ropts.Own.Patterns) != len(b.ropts.Own.Patterns) }},
		"show-library-leaks": {value: "true", used: func(d, b *prepared) bool {
			return d.ropts.ShowLibraryLeaks != b.ropts.ShowLibraryLeaks
		}},
		"check-scope": {value: "own", used: func(d, b *prepared) bool { return d.ropts.CheckOwnOnly != b.ropts.CheckOwnOnly }},
		"check-kinds": {value: "reachable", used: func(d, b *prepared) bool { return !reflect.DeepEqual(d.rec.CheckKinds, b.rec.CheckKinds) }},
		// attach's
		"for":      {value: "1s", used: field(func(o *runOptions) any { return o.s.For })}, // Attach's deadline
		"patience": {value: "1s", used: func(d, b *prepared) bool { return d.rec.Inject.Patience != b.rec.Inject.Patience }},
		// run's
		"check":                      {value: "true", used: field(func(o *runOptions) any { return o.s.Check })}, // cmdRun's exit code
		"check-exit-code":            {value: "3", used: field(func(o *runOptions) any { return o.checkCode })},
		"check-unmeasured-exit-code": {value: "3", used: field(func(o *runOptions) any { return o.checkUnmeasured })},
		"root-cause":                 {value: "true", used: analysis},
		"root-cause-after":           {value: "5s", with: []string{"--root-cause"}, used: analysis},
		"root-cause-sites":           {value: "2", with: []string{"--root-cause"}, used: analysis},
		"root-cause-budget":          {value: "5s", with: []string{"--root-cause"}, used: analysis},
		"root-cause-slowdown":        {value: "2", with: []string{"--root-cause"}, used: analysis},
		"stale":                      {value: "true", used: analysis},
		"stale-epoch":                {value: "2s", with: []string{"--stale"}, used: analysis},
		"stale-sample":               {value: "3", with: []string{"--stale"}, used: inRegion(func(r *region.Options) any { return r.StaleSample })},
		"stale-slots":                {value: "3", with: []string{"--stale"}, used: inRegion(func(r *region.Options) any { return r.StaleSlots })},
		"stale-t1":                   {value: "3", used: func(d, b *prepared) bool { return d.ropts.StaleT1 != b.ropts.StaleT1 }},
		"stale-t2":                   {value: "20", used: func(d, b *prepared) bool { return d.ropts.StaleT2 != b.ropts.StaleT2 }},
		"gen-suppressions":           {value: filepath.Join(dir, "gen.supp"), used: field(func(o *runOptions) any { return o.s.GenSupp.Path })}, // Record's
		"gen-suppressions-format":    {value: "lsan", with: []string{"--gen-suppressions", filepath.Join(dir, "gen.supp")}, used: field(func(o *runOptions) any { return o.s.GenSupp.Format })},
		"baseline":                   {value: baseline, with: []string{"--check"}, used: field(func(o *runOptions) any { return o.s.Baseline })},
		"alloc-family":               {value: "my_", used: inRegion(func(r *region.Options) any { return r.AllocFamilies })},
		"follow-fork":                {value: "false", used: func(d, b *prepared) bool { return d.rec.Collect.FollowFork != b.rec.Collect.FollowFork }},
		"snapshot-dir":               {value: dir, used: field(func(o *runOptions) any { return o.s.SnapshotDir })}, // the program's own snapshots
		"by":                         {value: "thread", used: field(func(o *runOptions) any { return o.s.Usage.By })},
		"attribution":                {value: "entry", with: []string{"--by", "function"}, used: field(func(o *runOptions) any { return o.s.Usage.Attribution })},
		"per-call":                   {value: "true", with: []string{"--by", "function"}, used: field(func(o *runOptions) any { return o.s.Usage.PerCall })},
		"interval":                   {value: "1s", with: []string{"--by", "function"}, used: field(func(o *runOptions) any { return o.s.Usage.Interval })},
		"usage-json":                 {value: filepath.Join(dir, "u.json"), with: []string{"--by", "function"}, used: field(func(o *runOptions) any { return o.s.Usage.JSON })},
		"ui":                         {value: "true", used: func(d, b *prepared) bool { return (d.rec.Collect.Observer == nil) != (b.rec.Collect.Observer == nil) }},
		"ui-listen":                  {value: "localhost:0", with: []string{"--ui"}, used: field(func(o *runOptions) any { return o.s.UIListen })},
	}
}

// checkEveryFlagUsed sets each of command's flags to a value other than
// its default and checks that what the session prepares from them
// changes accordingly: a flag the command accepts and ignores fails here,
// as attach's --path-to-root did.
func checkEveryFlagUsed(t *testing.T, command string, fs *flag.FlagSet) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.so")
	if err := os.WriteFile(agent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	effects := flagEffects(t, dir)
	base := []string{"--agent", agent}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if len(names) < 20 {
		t.Fatalf("%s defines only %d flags: %v", command, len(names), names)
	}
	for _, name := range names {
		c, ok := effects[name]
		if !ok {
			t.Errorf("%s --%s: no check of its effect here; add one (and make %s use it)", command, name, command)
			continue
		}
		with := append(append([]string(nil), base...), c.with...)
		d := prepare(t, command, with)
		b := prepare(t, command, append(with, "--"+name+"="+c.value))
		if !c.used(d, b) {
			t.Errorf("%s --%s=%s: the session prepares the same as without it (the flag is ignored)", command, name, c.value)
		}
	}
}

// TestAttachUsesEveryFlag: every flag attach accepts changes what it
// records with (checkEveryFlagUsed).
func TestAttachUsesEveryFlag(t *testing.T) {
	checkEveryFlagUsed(t, "attach", attachFlags(&session.Options{}, io.Discard))
}

// TestRunUsesEveryFlag: likewise for run, which shares the pipeline.
func TestRunUsesEveryFlag(t *testing.T) {
	checkEveryFlagUsed(t, "run", runFlags(&runOptions{}, io.Discard))
}

// TestEveryFlagEffectDefined: the table checks no flag that neither run
// nor attach defines.
func TestEveryFlagEffectDefined(t *testing.T) {
	run, attach := runFlags(&runOptions{}, io.Discard), attachFlags(&session.Options{}, io.Discard)
	for name := range flagEffects(t, t.TempDir()) {
		if run.Lookup(name) == nil && attach.Lookup(name) == nil {
			t.Errorf("the table checks --%s, which neither run nor attach defines", name)
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
