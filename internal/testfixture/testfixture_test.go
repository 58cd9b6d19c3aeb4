package testfixture

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// failTB records a Fatalf instead of ending the test.
type failTB struct {
	testing.TB
	failed string
}

func (f *failTB) Helper() {}
func (f *failTB) Fatalf(format string, args ...any) {
	f.failed = format
}

// TestBuild: a fixture is built once per set of flags, runs, and a build
// that fails says so, once, without building again.
func TestBuild(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc on PATH")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "hello.c")
	if err := os.WriteFile(src, []byte("#include <stdio.h>\nint main(void) { printf(\"hello %d\\n\", X); return 0; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	one := c.Build(t, src, "-DX=1")
	two := c.Build(t, src, "-DX=2")
	if one == two || !strings.HasPrefix(filepath.Base(one), "hello-") {
		t.Fatalf("builds %s and %s: want two, named after the source", one, two)
	}
	for path, want := range map[string]string{one: "hello 1\n", two: "hello 2\n"} {
		if out, err := exec.Command(path).Output(); err != nil || string(out) != want {
			t.Errorf("%s printed %q (%v), want %q", path, out, err, want)
		}
	}
	// Built once: a second Build of the same flags does not compile
	// again (the source, broken now, would fail).
	if err := os.WriteFile(src, []byte("not C\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if again := c.Build(t, src, "-DX=1"); again != one {
		t.Errorf("the same build again gave %s, first %s", again, one)
	}
	f := &failTB{TB: t}
	c.Build(f, src, "-DX=3")
	if f.failed == "" {
		t.Fatal("a source that does not compile did not fail the test")
	}
	if err := Compile("cc", filepath.Join(dir, "bad"), src); err == nil || !strings.Contains(err.Error(), "not C") && !strings.Contains(err.Error(), "error") {
		t.Errorf("Compile of a broken source: %v, want the compiler's complaint", err)
	}
}
