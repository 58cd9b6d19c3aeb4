package report

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSourceLineHostile: a root cause's source lines are read from files
// the program's debug info names (#line 1 "/dev/zero", a FIFO): a FIFO
// neither hangs the report nor a device makes it read for ever; neither,
// nor a symbolic link, shows a line; a regular file does.
func TestSourceLineHostile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "a.c")
	if err := os.WriteFile(src, []byte("int a;\n  if (x) \x1b[2J\nint c;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := sourceLine(src, 2); got != "if (x) \x1b[2J" {
		t.Errorf("line 2 of a regular file: %q", got)
	}
	if got := sourceLine(src, 9); got != "" {
		t.Errorf("line 9 of a 3-line file: %q", got)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.c")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero", link, dir} {
		done := make(chan string, 1)
		go func() { done <- sourceLine(p, 1) }()
		select {
		case got := <-done:
			if got != "" {
				t.Errorf("%s: line %q shown", p, got)
			}
		case <-time.After(2 * time.Minute): // a hang guard only
			t.Fatalf("sourceLine(%s) did not return", p)
		}
	}
}
