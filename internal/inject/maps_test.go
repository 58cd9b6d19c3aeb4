package inject

import (
	"os"
	"testing"

	"github.com/leakpath/leakpath/internal/procmaps"
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
