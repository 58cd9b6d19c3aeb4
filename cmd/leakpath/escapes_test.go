package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestEscapesInReport: escape sequences in a program's command line, its
// thread name, a symbol and a source file name reach the text report as
// visible escapes, never as raw control characters a terminal would obey;
// the JSON report keeps them exactly.
func TestEscapesInReport(t *testing.T) {
	t.Parallel()
	bin := fixture(t, "escapes.c")
	dir := t.TempDir()
	link := filepath.Join(dir, "run\x1b[35mlink")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	// A copy whose leaking function has an escape in its symbol name (and
	// no debug info, for the symbol table to name it).
	renamed := filepath.Join(dir, "renamed")
	if out, err := exec.Command("objcopy", "--strip-debug", "--redefine-sym", "evil=evil\x1b[32msym", bin, renamed).CombinedOutput(); err != nil {
		t.Skipf("objcopy cannot rename the symbol: %v\n%s", err, out)
	}

	r := leakpath(t, []string{"--by", "thread"}, nil, link)
	r2 := leakpath(t, nil, nil, renamed)
	for _, c := range []struct {
		name string
		out  []byte
		want []string
	}{
		{"text report", []byte(r.text), []string{`run\x1b[35mlink`, `esc\x1b[33mfile.c`, `\x1b[31mthr`}},
		{"stderr", r.stderr, nil},
		{"text report of the renamed copy", []byte(r2.text), []string{`evil\x1b[32msym`}},
	} {
		if i := bytes.IndexByte(c.out, 0x1b); i >= 0 {
			t.Errorf("%s has a raw escape character at byte %d: %q", c.name, i, c.out[max(0, i-40):min(len(c.out), i+40)])
		}
		var missing []string
		for _, w := range c.want {
			if !bytes.Contains(c.out, []byte(w)) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s does not show %s:\n%q", c.name, strings.Join(missing, ", "), c.out)
		}
	}
	// JSON escapes by itself and keeps the names exact.
	im := r.image(t, "run\x1b[35mlink")
	if !hasFrame(im, "evil", "esc\x1b[33mfile.c") {
		t.Errorf("the JSON report does not have evil at esc\\x1b[33mfile.c exactly: %+v", im.Leaks)
	}
	if !hasFrame(r2.image(t, "renamed"), "evil\x1b[32msym", "") {
		t.Errorf("the JSON report of the renamed copy does not name evil\\x1b[32msym exactly: %+v", r2.report.Leaks)
	}
}

// hasFrame says whether a leak of im has a frame of function fn in a file
// ending in file.
func hasFrame(im jsonImage, fn, file string) bool {
	for _, l := range im.Leaks {
		for _, f := range l.Stack {
			if f.Function == fn && strings.HasSuffix(f.File, file) {
				return true
			}
		}
	}
	return false
}

// TestEscapesInSnapshot: `leakpath snapshot` prints the report it gets
// with the program's escape sequences made visible.
func TestEscapesInSnapshot(t *testing.T) {
	t.Parallel()
	bin := fixture(t, "escapes.c")
	cmd := exec.Command(lpBin, "run", "--quiet", "--", bin, "wait")
	cmd.Env = testEnv()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := startWatched(t, cmd)
	pid := programUnder(t, cmd.Process.Pid, bin)
	w.stdout.Await(t, "ready", 1)
	snap := exec.Command(lpBin, "snapshot", "-o", filepath.Join(t.TempDir(), "s.json"), strconv.Itoa(pid))
	var out, errb bytes.Buffer
	snap.Stdout, snap.Stderr = &out, &errb
	if err := snap.Run(); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, errb.String())
	}
	stdin.Close()
	if code := w.wait(t); code != 0 {
		t.Errorf("the program exited %d under leakpath after the snapshot, want 0:\n%s", code, w.stderr)
	}
	if i := bytes.IndexByte(out.Bytes(), 0x1b); i >= 0 {
		t.Errorf("the snapshot's text has a raw escape character: %q", out.String())
	}
	if !strings.Contains(out.String(), `esc\x1b[33mfile.c`) {
		t.Errorf("the snapshot's text does not show the file name escaped:\n%s", out.String())
	}
}
