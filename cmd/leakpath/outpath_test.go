package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// TestTraceFileLifecycle: a trace named without the pid is made before
// the run (a bad path stops it from starting); a run that cannot start
// leaves no file, and one that records nothing leaves a trace that holds
// no events.
func TestTraceFileLifecycle(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	_, stderr, code := lp(t, "run", "-o", filepath.Join(dir, "nodir", "t.lpt"), "--", "touch", marker)
	if code == 0 || !strings.Contains(stderr, "nodir") {
		t.Errorf("trace in a missing directory: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran despite the trace's missing directory")
	}
	missing := filepath.Join(dir, "missing.lpt")
	if _, stderr, code = lp(t, "run", "-o", missing, "--", filepath.Join(dir, "no-such-program")); code != 127 {
		t.Errorf("missing program: exit %d, want 127 (stderr %q)", code, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("a run that could not start left its trace file")
	}
	// A static program loads no agent: nothing recorded, yet a trace.
	static := filepath.Join(dir, "static")
	src := filepath.Join(dir, "static.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := testfixture.Compile("gcc", static, "-static", src); err != nil {
		t.Skipf("no static binary here (%v)", err)
	}
	empty := filepath.Join(dir, "empty.lpt")
	if _, stderr, code = lp(t, "run", "-o", empty, "--", static); code != 0 || !strings.Contains(stderr, "nothing was recorded") {
		t.Errorf("static program: exit %d, stderr %q", code, stderr)
	}
	r, err := tracefile.Open(empty)
	if err != nil {
		t.Fatalf("the trace of a run that recorded nothing: %v", err)
	}
	defer r.Close()
	evs, err := r.Next(nil)
	if len(evs) != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("the trace of a run that recorded nothing: %d events, %v", len(evs), err)
	}
}
