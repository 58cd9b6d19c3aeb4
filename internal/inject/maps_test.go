package inject

import (
	"os"
	"testing"
)

func TestParseMaps(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 123 /usr/bin/prog\n" +
		"7f0000000000-7f0000026000 r-xp 00026000 fe:00 456 /usr/lib/x86_64-linux-gnu/libc.so.6\n" +
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n" +
		"garbage line\n" +
		"1000-0800 r--p 00000000 00:00 0\n" + // empty range: skipped
		"7f1000000000-7f1000001000 r--p 00000000 fe:00 9 /path with spaces/lib.so\n"
	ms := parseMaps([]byte(in))
	if len(ms) != 4 {
		t.Fatalf("%d mappings, want 4: %+v", len(ms), ms)
	}
	if m := ms[1]; m.lo != 0x7f0000000000 || m.hi != 0x7f0000026000 || m.off != 0x26000 || m.perms != "r-xp" || m.path != "/usr/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("libc line: %+v", m)
	}
	if ms[3].path != "/path with spaces/lib.so" {
		t.Errorf("path with spaces: %q", ms[3].path)
	}
}

// TestOwnLibc finds this process's libc and its dlopen the way an attach
// does, and checks the address against the one the dynamic loader bound
// (read from /proc/self/maps: the symbol lies in libc's text).
func TestOwnLibc(t *testing.T) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc")
	}
	m, err := findModule(os.Getpid(), parseMaps(b), isLibc)
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

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 123 /usr/bin/prog\n"))
	f.Add([]byte("0-1 rwxp 0 0:0 0\n-\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range parseMaps(b) {
			if m.hi <= m.lo {
				t.Fatalf("empty mapping %+v", m)
			}
		}
	})
}
