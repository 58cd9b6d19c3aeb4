package inject

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
)

// TestOwnLibc finds this process's libc and its dlopen the way an attach
// does, and checks the address against the one the dynamic loader bound
// (read from /proc/self/maps: the symbol lies in libc's text).
func TestOwnLibc(t *testing.T) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc")
	}
	m, err := findModule(os.Getpid(), procmaps.Parse(b), isLibc)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil {
		t.Skip("this test binary links no libc.so.6 (static Go binary)")
	}
	a, _, ok := m.symbol("malloc")
	if !ok || a < m.textLo || a >= m.textHi {
		t.Errorf("malloc at %#x (ok %v), libc text %#x-%#x", a, ok, m.textLo, m.textHi)
	}
}

func TestPrepareErrors(t *testing.T) {
	if _, err := prepare(-1); err == nil {
		t.Error("pid -1 accepted")
	}
	if _, err := prepare(1 << 30); err == nil {
		t.Error("a pid that cannot exist accepted")
	}
}

// TestModuleFIFO: a module's path is the process's, under its root: a
// FIFO put there (a container's root its user made) fails the load at
// once instead of hanging the attach.
func TestModuleFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "libc.so.6")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- (&module{path: fifo}).load(os.Getpid()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("loading a FIFO as a module: %v, want not a regular file", err)
		}
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("loading a FIFO as a module did not return")
	}
}
