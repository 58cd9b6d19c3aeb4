package symbolize

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// TestEmbeddedDWARF: a library compiled with -g carries its DWARF, one
// compiled without or stripped does not; a FIFO, a directory or a
// missing file is no ELF file with DWARF, and opening a FIFO does not
// wait for a writer.
func TestEmbeddedDWARF(t *testing.T) {
	cc, ok := compiler("gcc")
	if !ok {
		t.Skip("gcc is not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "x.c")
	if err := os.WriteFile(src, []byte("int x(int a) { return a + 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		flags []string
		want  bool
	}{
		{"libg.so", []string{"-g"}, true},
		{"libnog.so", nil, false},
		{"libstripped.so", []string{"-g", "-Wl,-s"}, false},
	} {
		out := filepath.Join(dir, c.name)
		if err := testfixture.Compile(cc, out, append([]string{"-shared", "-fPIC", src}, c.flags...)...); err != nil {
			t.Fatal(err)
		}
		if got := EmbeddedDWARF(out); got != c.want {
			t.Errorf("%s (%v): EmbeddedDWARF %v, want %v", c.name, c.flags, got, c.want)
		}
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() { done <- EmbeddedDWARF(fifo) }()
	select {
	case got := <-done:
		if got {
			t.Error("a FIFO has DWARF")
		}
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("EmbeddedDWARF waits on a FIFO")
	}
	for _, p := range []string{dir, filepath.Join(dir, "missing.so"), src} {
		if EmbeddedDWARF(p) {
			t.Errorf("%s: EmbeddedDWARF true", p)
		}
	}
}
