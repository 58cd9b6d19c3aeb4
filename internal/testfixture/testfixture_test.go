package testfixture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// TestBuildSource: a source the test holds is built, a shared library
// ends in .so, and the same name with other code is another program.
func TestBuildSource(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc on PATH")
	}
	c, err := NewCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	one := c.BuildSource(t, "p.c", "#include <stdio.h>\nint main(void) { puts(\"one\"); return 0; }\n")
	two := c.BuildSource(t, "p.c", "#include <stdio.h>\nint main(void) { puts(\"two\"); return 0; }\n")
	for path, want := range map[string]string{one: "one\n", two: "two\n"} {
		if out, err := exec.Command(path).Output(); err != nil || string(out) != want {
			t.Errorf("%s printed %q (%v), want %q", path, out, err, want)
		}
	}
	lib := c.BuildSource(t, "l.c", "int f(void) { return 1; }\n", "-shared", "-fPIC")
	if !strings.HasSuffix(lib, ".so") {
		t.Errorf("shared library %s does not end in .so", lib)
	}
}

// failNowTB records a Fatalf and ends the goroutine, as testing does.
type failNowTB struct {
	testing.TB
	failed chan string
}

func (f *failNowTB) Helper() {}
func (f *failNowTB) Fatalf(format string, args ...any) {
	f.failed <- fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestOutputAwait: a wait ends at the mark's count, whoever writes it
// when, and fails at once when the output ends without it.
func TestOutputAwait(t *testing.T) {
	var o Output
	done := make(chan struct{})
	waiter := &failNowTB{TB: t, failed: make(chan string, 1)}
	go func() {
		defer close(done)
		o.Await(waiter, "ready", 2)
	}()
	o.Write([]byte("ready\n"))
	select {
	case <-done:
		t.Fatal("Await returned after one ready of two")
	default:
	}
	o.Write([]byte("not yet\nready\n"))
	<-done // a hang here is the failure (HangGuard ends it)
	select {
	case msg := <-waiter.failed:
		t.Fatalf("Await failed: %s", msg)
	default:
	}
	if got := o.String(); got != "ready\nnot yet\nready\n" {
		t.Errorf("String() = %q", got)
	}

	f := &failNowTB{TB: t, failed: make(chan string, 1)}
	go func() { o.Await(f, "gone", 1) }()
	o.Close()
	if msg := <-f.failed; !strings.Contains(msg, "ended") {
		t.Errorf("an Await past the end failed with %q, want that the output ended", msg)
	}
}

// TestPoll: Poll returns once the condition holds.
func TestPoll(t *testing.T) {
	n := 0
	Poll(t, "three calls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("condition called %d times, want 3", n)
	}
}
