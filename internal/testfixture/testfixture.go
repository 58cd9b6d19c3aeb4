// Package testfixture compiles the small C and C++ programs the tests run
// (under testdata, or written by the test), once per test binary and set
// of flags, and lets tests wait for what those programs say without
// guessing how long it takes. Only tests import it.
package testfixture

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Compile runs compiler cc to build out from args (sources and flags, in
// the order the compiler and linker are to see them). The error holds the
// compiler's output.
func Compile(cc, out string, args ...string) error {
	full := append([]string{"-o", out}, args...)
	if b, err := exec.Command(cc, full...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cc, strings.Join(full, " "), err, b)
	}
	return nil
}

// Cache builds fixtures into a directory, each compiler, source and set
// of flags once (a failure too is kept: it is reported again, not
// retried). Builds of different fixtures run concurrently, so parallel
// tests do not wait for each other's compilers.
type Cache struct {
	dir  string
	mu   sync.Mutex
	done map[string]*built
}

type built struct {
	once sync.Once
	path string
	err  error
}

// NewCache keeps its builds in dir, made if missing.
func NewCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Cache{dir: dir, done: map[string]*built{}}, nil
}

// Build compiles src with flags (after the source, so that libraries
// come after it for the linker) and returns the program's path (a shared
// library's, ending in .so, with -shared): named after the source, with a
// hash of the flags. C sources go to cc, C++ (.cc, .cpp) to c++; a test
// without that compiler is skipped, one whose build fails fails with the
// compiler's output.
func (c *Cache) Build(tb testing.TB, src string, flags ...string) string {
	tb.Helper()
	cc := "cc"
	if ext := filepath.Ext(src); ext == ".cc" || ext == ".cpp" {
		cc = "c++"
	}
	return c.BuildWith(tb, cc, src, flags...)
}

// BuildWith is Build with compiler cc (clang-19, mpicc, ...); a test is
// skipped when cc is not installed.
func (c *Cache) BuildWith(tb testing.TB, cc, src string, flags ...string) string {
	tb.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		tb.Skipf("no %s on PATH: cannot build the fixture %s", cc, filepath.Base(src))
	}
	key := cc + "\x00" + src + "\x00" + strings.Join(flags, "\x00")
	c.mu.Lock()
	b := c.done[key]
	if b == nil {
		b = new(built)
		c.done[key] = b
	}
	c.mu.Unlock()
	b.once.Do(func() {
		h := sha256.Sum256([]byte(key))
		b.path = filepath.Join(c.dir, strings.TrimSuffix(filepath.Base(src), filepath.Ext(src))+"-"+hex.EncodeToString(h[:4]))
		if slices.Contains(flags, "-shared") {
			b.path += ".so"
		}
		if _, err := os.Stat(src); err != nil {
			b.err = err
			return
		}
		b.err = Compile(cc, b.path, append([]string{src}, flags...)...)
	})
	if b.err != nil {
		tb.Fatalf("building fixture %s: %v", filepath.Base(src), b.err)
	}
	return b.path
}

// BuildSource builds a fixture whose source the test holds: code is
// written to a file called name (its extension picks the compiler, as
// for Build), kept apart from other sources of that name.
func (c *Cache) BuildSource(tb testing.TB, name, code string, flags ...string) string {
	tb.Helper()
	h := sha256.Sum256([]byte(code))
	dir := filepath.Join(c.dir, "src-"+hex.EncodeToString(h[:6]))
	src := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	// Written aside and renamed: a parallel test writing the same
	// source never leaves the compiler half a file.
	if _, err := os.Stat(src); err != nil {
		tmp, err := os.CreateTemp(dir, name+".tmp*")
		if err != nil {
			tb.Fatal(err)
		}
		_, werr := tmp.WriteString(code)
		if cerr := tmp.Close(); werr != nil || cerr != nil {
			tb.Fatalf("writing %s: %v %v", src, werr, cerr)
		}
		if err := os.Rename(tmp.Name(), src); err != nil {
			tb.Fatal(err)
		}
	}
	return c.Build(tb, src, flags...)
}

// StaticLibc reports whether cc can link static programs: without libc.a
// it prints the bare name instead of a path.
func StaticLibc() bool {
	out, err := exec.Command("cc", "-print-file-name=libc.a").Output()
	return err == nil && filepath.IsAbs(strings.TrimSpace(string(out)))
}
