package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSnapshotUnderLoad: snapshots of a program whose three threads
// allocate and free without pause complete while it runs; its output and
// exit code stay its own; each snapshot counts exactly the blocks main
// lost so far (pending ones included), classified; diff shows what grew
// between two snapshots, and between a snapshot and the run's trace.
func TestSnapshotUnderLoad(t *testing.T) {
	bin := fixture(t, "snapload.c")
	steps := []string{"leak 100", "leak 300", "keep 50", "quit"}
	want := native(t, []byte(strings.Join(steps, "\n")+"\n"), bin)

	dir := t.TempDir()
	pidfile := filepath.Join(dir, "pid")
	trace := filepath.Join(dir, "run.lpt")
	exitJSON := filepath.Join(dir, "exit.json")
	cmd := exec.Command(lpBin, "run", "-o", trace, "--json", exitJSON, "--report", filepath.Join(dir, "exit.txt"), "--", bin)
	cmd.Env = testEnv("SNAPLOAD_PIDFILE=" + pidfile)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(stdout)
	var got bytes.Buffer
	step := func(s string) {
		t.Helper()
		io.WriteString(stdin, s+"\n")
		line, err := lines.ReadString('\n')
		got.WriteString(line)
		if err != nil || line != "ok "+s+"\n" {
			t.Fatalf("after %q the program said %q (%v); stderr:\n%s", s, line, err, errb.String())
		}
	}
	step(steps[0])
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	snap := func(name string) *snapDoc {
		t.Helper()
		path := filepath.Join(dir, name)
		out, serr, code := lp(t, "snapshot", "-o", path, pid)
		if code != 0 || !strings.Contains(out, "leakpath: snapshot: ") || !strings.Contains(serr, "written to "+path) {
			t.Fatalf("leakpath snapshot %s: exit %d\nstdout:\n%s\nstderr:\n%s", pid, code, out, serr)
		}
		d := readSnapDoc(t, path)
		if !d.Snapshot || strconv.Itoa(d.PID) != pid || d.Scan == nil {
			t.Fatalf("%s: snapshot %v, pid %d, scan %v; want a snapshot of pid %s with its scan", name, d.Snapshot, d.PID, d.Scan, pid)
		}
		t.Logf("%s: paused %.3f s for %d B of heap", name, d.Scan.PauseSeconds, d.Scan.HeapBytes)
		return d
	}
	s1 := snap("s1.json")
	step(steps[1])
	step(steps[2])
	s2 := snap("s2.json")
	io.WriteString(stdin, steps[3]+"\n")
	stdin.Close()
	rest, _ := io.ReadAll(lines)
	got.Write(rest)
	err = cmd.Wait()
	if code := exitCode(err, cmd.ProcessState); code != want.code || got.String() != string(want.stdout) {
		t.Fatalf("under leakpath: exit %d, stdout %q; natively: exit %d, stdout %q\nstderr:\n%s", code, got.String(), want.code, want.stdout, errb.String())
	}

	// Leaked blocks: 100, then 400. The latest one's address may linger
	// in a register or a dead stack slot of main (reachable or possible
	// then, as memcheck would say), so one may be spared.
	for _, c := range []struct {
		name      string
		d         *snapDoc
		leak, kep uint64
	}{{"s1", s1, 100, 0}, {"s2", s2, 400, 50}} {
		n, kinds := c.d.Site("leak_some")
		if n != c.leak || kinds["definite"] < c.leak-1 {
			t.Errorf("%s: leak_some has %d blocks %v; want %d, definite but for one at most", c.name, n, kinds, c.leak)
		}
		n, kinds = c.d.Site("keep_some")
		if n != c.kep || kinds["reachable"] != c.kep {
			t.Errorf("%s: keep_some has %d blocks %v; want %d reachable", c.name, n, kinds, c.kep)
		}
	}
	exit := readSnapDoc(t, exitJSON)
	if n, kinds := exit.Site("leak_some"); n != 400 || kinds["definite"] < 399 || exit.Snapshot {
		t.Errorf("at exit: leak_some has %d blocks %v (snapshot %v); want 400, definite", n, kinds, exit.Snapshot)
	}

	diff := func(a, b string) map[string][2]int64 {
		t.Helper()
		out, serr, code := lp(t, "diff", "--format", "json", a, b)
		if code != 0 {
			t.Fatalf("leakpath diff %s %s: exit %d\n%s", a, b, code, serr)
		}
		var d struct {
			Schema string `json:"schema"`
			Sites  []struct {
				Delta struct{ Bytes, Blocks int64 } `json:"delta"`
				Stack []jsonFrame                   `json:"stack"`
			} `json:"sites"`
		}
		if err := json.Unmarshal([]byte(out), &d); err != nil || d.Schema != "leakpath.diff/v1" {
			t.Fatalf("diff JSON (%v), schema %q:\n%s", err, d.Schema, out)
		}
		deltas := map[string][2]int64{}
		for _, s := range d.Sites {
			for _, fn := range []string{"leak_some", "keep_some"} {
				if stackHas(s.Stack, fn) {
					deltas[fn] = [2]int64{s.Delta.Bytes, s.Delta.Blocks}
				}
			}
		}
		return deltas
	}
	s1p, s2p := filepath.Join(dir, "s1.json"), filepath.Join(dir, "s2.json")
	if d := diff(s1p, s2p); d["leak_some"] != [2]int64{300 * 72, 300} || d["keep_some"] != [2]int64{50 * 88, 50} {
		t.Errorf("diff s1 s2: %v; want leak_some +21600 B in +300 blocks, keep_some +4400 B in +50", d)
	}
	// The trace ends after quit: the kept list was freed.
	if d := diff(s2p, trace); d["leak_some"] != [2]int64{0, 0} || d["keep_some"] != [2]int64{-50 * 88, -50} {
		t.Errorf("diff s2 trace: %v; want leak_some unchanged, keep_some -4400 B in -50 blocks", d)
	}
	text, _, _ := lp(t, "diff", s1p, s2p)
	if !strings.Contains(text, "GREW +21.6 kB in +300 blocks") || !strings.Contains(text, "leak_some") {
		t.Errorf("diff text lacks the grown site:\n%s", text)
	}
}

// TestSnapshotErrors: what cannot be snapshotted or diffed says why.
func TestSnapshotErrors(t *testing.T) {
	dir := t.TempDir()
	notReport := filepath.Join(dir, "x.json")
	os.WriteFile(notReport, []byte(`{"schema":"something/else"}`), 0o644)
	cut := filepath.Join(dir, "cut.json")
	os.WriteFile(cut, []byte(`{"schema":"leakpath.report/v1","leaks":[`), 0o644)
	binary := filepath.Join(dir, "x.bin")
	os.WriteFile(binary, []byte("\x7fELF"), 0o644)
	// A process that runs without leakpath: this test's own.
	self := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"snapshot"}, exitUsage, "want one PID"},
		{[]string{"snapshot", "abc"}, exitUsage, `"abc" is not a process id`},
		{[]string{"snapshot", "2147483647"}, 1, "no process with pid 2147483647"},
		{[]string{"snapshot", self}, 1, "is not recorded by leakpath"},
		{[]string{"root-cause"}, exitUsage, "want one PID"},
		{[]string{"root-cause", "0"}, exitUsage, `"0" is not a process id`},
		{[]string{"root-cause", "2147483647"}, 1, "no process with pid 2147483647"},
		{[]string{"root-cause", self}, 1, "is not recorded by leakpath"},
		{[]string{"run", "--root-cause-after", "soon", "--", "true"}, exitUsage, "want a duration (30s, 2m) or request"},
		{[]string{"diff", notReport}, exitUsage, "want two files"},
		{[]string{"diff", notReport, notReport}, 1, `schema "something/else"`},
		{[]string{"diff", cut, cut}, 1, "not a leakpath report"},
		{[]string{"diff", binary, binary}, 1, "not a leakpath snapshot, JSON report or trace"},
		{[]string{"diff", filepath.Join(dir, "absent"), binary}, 1, "no such file"},
		{[]string{"diff", "--kinds", "lost", cut, cut}, exitUsage, `unknown leak kind "lost"`},
	} {
		_, serr, code := lp(t, c.args...)
		if code != c.code || !strings.Contains(serr, c.want) || strings.Contains(serr, "panic") {
			t.Errorf("leakpath %v: exit %d, stderr %q; want exit %d saying %q", c.args, code, serr, c.code, c.want)
		}
	}
	entries, _ := filepath.Glob("leakpath.snapshot.*")
	if len(entries) > 0 {
		t.Errorf("failed snapshots left files behind: %v", entries)
	}
}
