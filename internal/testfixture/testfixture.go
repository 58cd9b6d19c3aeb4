// Package testfixture compiles the small C and C++ programs the tests run
// (under testdata), once per test binary and set of flags. Only tests
// import it.
package testfixture

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// Cache builds fixtures into a directory, each source and set of flags
// once (a failure too is kept: it is reported again, not retried).
type Cache struct {
	dir  string
	mu   sync.Mutex
	done map[string]built
}

type built struct {
	path string
	err  error
}

// NewCache keeps its builds in dir, made if missing.
func NewCache(dir string) (*Cache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Cache{dir: dir, done: map[string]built{}}, nil
}

// Build compiles src with flags (after the source, so that libraries
// come after it for the linker) and returns the program's path (a shared
// library's, with -shared): named after the source, with a hash of the
// flags. C sources go to cc, C++ (.cc, .cpp) to c++; a test without that
// compiler is skipped, one whose build fails fails with the compiler's
// output.
func (c *Cache) Build(tb testing.TB, src string, flags ...string) string {
	tb.Helper()
	ext := filepath.Ext(src)
	cc := "cc"
	if ext == ".cc" || ext == ".cpp" {
		cc = "c++"
	}
	if _, err := exec.LookPath(cc); err != nil {
		tb.Skipf("no %s on PATH: cannot build the fixture %s", cc, filepath.Base(src))
	}
	key := src + "\x00" + strings.Join(flags, "\x00")
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.done[key]
	if !ok {
		h := sha256.Sum256([]byte(key))
		b.path = filepath.Join(c.dir, strings.TrimSuffix(filepath.Base(src), ext)+"-"+hex.EncodeToString(h[:4]))
		if _, err := os.Stat(src); err != nil {
			b.err = err
		} else {
			b.err = Compile(cc, b.path, append([]string{src}, flags...)...)
		}
		c.done[key] = b
	}
	if b.err != nil {
		tb.Fatalf("building fixture %s: %v", filepath.Base(src), b.err)
	}
	return b.path
}
