package symbolize

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// TestHostileDebugFiles: the files the symbolizer opens are named by the
// target (its module paths, its .gnu_debuglink name, its build id) or sit
// in a directory its author chose. A FIFO or a device there must not hang
// the symbolizer nor make it read for ever: each lookup ends, as for a
// missing file.
func TestHostileDebugFiles(t *testing.T) {
	cc, ok := compiler("gcc")
	if !ok {
		t.Skip("gcc is not installed")
	}
	for _, tool := range []string{"objcopy", "strip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "x.c")
	if err := os.WriteFile(src, []byte("int x(int a) { return a + 1; }\nint main(void) { return x(1); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	dbg := filepath.Join(dir, "prog.dbg")
	for _, args := range [][]string{
		{cc, "-g", "-Wl,--build-id", "-o", prog, src},
		{"objcopy", "--only-keep-debug", prog, dbg},
		{"strip", "-g", prog},
		{"objcopy", "--add-gnu-debuglink=" + dbg, prog},
	} {
		if b, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b)
		}
	}
	f, err := openELF(prog)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f.File)
	f.Close()
	if len(id) < 2 {
		t.Fatal("the fixture has no build id")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	debugDir := filepath.Join(dir, "debug")
	h := hex.EncodeToString(id)
	byID := filepath.Join(debugDir, ".build-id", h[:2], h[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(byID), 0o755); err != nil {
		t.Fatal(err)
	}

	// lookup symbolizes an address of prog, or the FIFO itself, under a
	// hang guard.
	lookup := func(name, path string) {
		t.Helper()
		s := New(Options{QuietMissing: true, DebugDirs: []string{debugDir}})
		done := make(chan error, 1)
		go func() {
			_, err := s.Lookup(path, id, 0x1000)
			done <- err
		}()
		select {
		case <-done:
			s.Close() // not on a hang: Close waits for the lookup's lock
		case <-time.After(2 * time.Minute): // a hang guard only
			t.Fatalf("%s: Lookup(%s) did not return", name, path)
		}
	}
	lookup("a FIFO as the module", fifo)

	if err := os.Remove(dbg); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(dbg, 0o600); err != nil {
		t.Fatal(err)
	}
	lookup("a FIFO as the debug link", prog)
	os.Remove(dbg)
	if err := os.Symlink("/dev/zero", dbg); err != nil {
		t.Fatal(err)
	}
	lookup("/dev/zero as the debug link", prog)
	os.Remove(dbg)

	if err := unix.Mkfifo(byID, 0o600); err != nil {
		t.Fatal(err)
	}
	lookup("a FIFO as the build-id file", prog)
	os.Remove(byID)
	if err := os.Symlink("/dev/zero", byID); err != nil {
		t.Fatal(err)
	}
	lookup("/dev/zero as the build-id file", prog)
}

// TestCacheDirOthersMayWrite: a cache directory others may write in
// (LEAKPATH_CACHE_DIR=/tmp/x made by someone else, or chmod 777) is not
// used: nothing is read from it (a FIFO planted under the program's build
// id would hang the lookup; a planted frame cache would name its frames)
// and nothing is written to it, and a warning says why.
func TestCacheDirOthersMayWrite(t *testing.T) {
	cc, ok := compiler("gcc")
	if !ok {
		t.Skip("gcc is not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "x.c")
	if err := os.WriteFile(src, []byte("int x(int a) { return a + 1; }\nint main(void) { return x(1); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if err := testfixture.Compile(cc, prog, "-g", "-Wl,--build-id", src); err != nil {
		t.Fatal(err)
	}
	f, err := openELF(prog)
	if err != nil {
		t.Fatal(err)
	}
	id := buildID(f.File)
	f.Close()
	cache := filepath.Join(dir, "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cache, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".frames", ".dwarf"} {
		if err := unix.Mkfifo(filepath.Join(cache, hex.EncodeToString(id)+ext), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	var warned []string
	s := New(Options{QuietMissing: true, DWARFCache: cache, Warn: func(m string) { warned = append(warned, m) }})
	done := make(chan error, 1)
	go func() {
		_, err := s.Lookup(prog, id, 0x1000)
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("Lookup opened a FIFO planted in a cache directory others may write in")
	}
	s.SaveFrames()
	s.Close()
	ents, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the cache directory others may write in holds %v: leakpath wrote there", names)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "others may write") {
		t.Errorf("warnings %q, want one saying others may write in the cache", warned)
	}

	// The same directory made private is used: the frames are kept there.
	if err := os.Chmod(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".frames", ".dwarf"} {
		os.Remove(filepath.Join(cache, hex.EncodeToString(id)+ext))
	}
	warned = nil
	s = New(Options{QuietMissing: true, DWARFCache: cache, Warn: func(m string) { warned = append(warned, m) }})
	if _, err := s.Lookup(prog, id, 0x1000); err != nil {
		t.Fatal(err)
	}
	s.SaveFrames()
	s.Close()
	if _, err := os.Stat(filepath.Join(cache, hex.EncodeToString(id)+".frames")); err != nil {
		t.Errorf("a private cache directory is not used: %v (warnings %q)", err, warned)
	}
}
