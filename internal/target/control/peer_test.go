package control

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// forgedServer is the collector impostor of testdata/fixtures/forged_server.py.
func forgedServer(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "testdata", "fixtures", "forged_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startAs runs python3 code with args as uid (when not ours: needs root)
// and waits for its first line; it is killed at the end of the test.
func startAs(t *testing.T, uid int, code string, args ...string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if _, serr := os.Stat("/usr/bin/python3"); serr == nil {
		py, err = "/usr/bin/python3", nil // not one in root's home
	}
	if err != nil {
		t.Skip("no python3 to play the other user's process")
	}
	cmd := exec.Command(py, append([]string{"-c", code}, args...)...)
	cmd.Dir = "/"
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if l == "" {
			t.Fatal("the helper process ended before it was ready")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the helper process never got ready")
	}
}

// TestAskRefusesOtherUser: a socket another user serves, even found in a
// directory of ours, is refused by its credentials (SO_PEERCRED), and its
// answer never read.
func TestAskRefusesOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a server as another user (uid 65534)")
	}
	theirs, err := os.MkdirTemp("", "leakpath-test-nobody-") // t.TempDir's parent is closed to others
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(theirs) })
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	startAs(t, 65534, forgedServer(t), filepath.Join(theirs, "s.sock"))
	// The impostor's socket put where a collector of ours would be: only
	// its credentials tell it apart.
	ours := privateTemp(t)
	if err := os.Rename(filepath.Join(theirs, "s.sock"), filepath.Join(ours, SocketName)); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", filepath.Join(ours, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("x"))
	b, _ := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if !strings.Contains(b, "FORGED") {
		t.Fatalf("the impostor does not answer (%q): the test proves nothing", b)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := Ask(ctx, Endpoint{Dir: ours}, Request{Op: "snapshot", PID: 1})
	if err == nil || !strings.Contains(err.Error(), "served by uid 65534") {
		t.Errorf("Ask of a socket served by uid 65534: %+v, %v; want it refused", resp, err)
	}
}

// TestAskChecksCollectorPID: an endpoint that names its collector's pid
// accepts that process only.
func TestAskChecksCollectorPID(t *testing.T) {
	dir := privateTemp(t)
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go answer(ln, `{"version":1,"text":"ok"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Ask(ctx, Endpoint{Dir: dir, Collector: os.Getpid()}, Request{Op: "snapshot"}); err != nil {
		t.Errorf("Ask of the collector named: %v", err)
	}
	if _, err := Ask(ctx, Endpoint{Dir: dir, Collector: os.Getppid()}, Request{Op: "snapshot"}); err == nil || !strings.Contains(err.Error(), "not by its collector") {
		t.Errorf("Ask of a socket served by another pid than the collector named: %v; want it refused", err)
	}
}

// answer answers every connection to ln with line.
func answer(ln net.Listener, line string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.Read(make([]byte, 4096))
			c.Write([]byte(line + "\n"))
		}()
	}
}

// TestAnswerBound: an answer of MaxResponse bytes is read, one byte more
// is refused with a clear error; a collector cannot send one either.
func TestAnswerBound(t *testing.T) {
	dir := privateTemp(t)
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 4096))
			c.Write([]byte(<-lines))
			c.Close()
		}
	}()
	// {"version":1,"text":"xxx…"}\n of n bytes in all.
	reply := func(n int) string {
		head, tail := `{"version":1,"text":"`, "\"}\n"
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lines <- reply(MaxResponse)
	if resp, err := Ask(ctx, Endpoint{Dir: dir}, Request{}); err != nil || len(resp.Text) != MaxResponse-len(`{"version":1,"text":""}`)-1 {
		t.Errorf("an answer of exactly %d bytes: %v", MaxResponse, err)
	}
	lines <- reply(MaxResponse + 1)
	_, err = Ask(ctx, Endpoint{Dir: dir}, Request{})
	if !errors.Is(err, ErrTooLong) || !strings.Contains(err.Error(), "64.0 MiB") {
		t.Errorf("an answer of %d bytes: %v; want it refused as over 64.0 MiB", MaxResponse+1, err)
	}
	if err := WriteMessage(&strings.Builder{}, nil, Response{Text: strings.Repeat("x", MaxResponse)}, MaxResponse); !errors.Is(err, ErrTooLong) {
		t.Errorf("WriteMessage of an answer over the bound: %v", err)
	}
}

// TestAttachDirSkipsOthers: a base directory that is not ours and private
// (another user's, a symbolic link, open to others, not a directory) is
// passed over for the next; with none left, the error names each.
func TestAttachDirSkipsOthers(t *testing.T) {
	tmp := t.TempDir()
	mine := privateTemp(t)
	bad := map[string]func(p string) error{
		"link":   func(p string) error { return os.Symlink(mine, p) },
		"open":   func(p string) error { os.Mkdir(p, 0o700); return os.Chmod(p, 0o777) },
		"file":   func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"nobody": func(p string) error { os.Mkdir(p, 0o700); return os.Chown(p, 65534, 65534) },
	}
	want := map[string]string{"link": "symbolic link", "open": "mode 0777", "file": "not a directory", "nobody": "belongs to uid 65534"}
	var all []string
	for name, mk := range bad {
		if name == "nobody" && os.Geteuid() != 0 {
			t.Log("not root: no directory of another user to test with")
			continue
		}
		p := filepath.Join(tmp, name)
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
		next := filepath.Join(tmp, "next-"+name)
		got, err := attachDirIn([]string{p, next}, 42)
		if err != nil || got != filepath.Join(next, "attach.42") {
			t.Errorf("base %s (%s) then a free name: %q, %v; want the second", name, want[name], got, err)
		}
		if st, err := os.Lstat(next); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("the base made: %v, %v; want a directory of mode 0700", st, err)
		}
	}
	_, err := attachDirIn(all, 42)
	if err == nil {
		t.Fatal("no usable base, yet no error")
	}
	for _, p := range all {
		if !strings.Contains(err.Error(), p+" ") || !strings.Contains(err.Error(), want[filepath.Base(p)]) {
			t.Errorf("the error does not say what is wrong with %s (%s): %v", p, want[filepath.Base(p)], err)
		}
	}
}

// TestFindAttach: an attach's directory is found in the first base, with
// the collector's pid it records, which Ask then holds the server to.
func TestFindAttach(t *testing.T) {
	xdg := privateTemp(t)
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	const target = 1 // any pid: the attach is not asked about it
	dir, err := AttachDir(target)
	if err != nil || dir != filepath.Join(xdg, "leakpath", "attach.1") {
		t.Fatalf("AttachDir: %q, %v; want it in $XDG_RUNTIME_DIR/leakpath", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go answer(ln, `{"version":1,"text":"ok"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		pid int
		ok  bool
	}{{os.Getpid(), true}, {os.Getppid(), false}} {
		if err := os.WriteFile(filepath.Join(dir, PIDName), []byte(strconv.Itoa(c.pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		e, err := Find(target)
		if err != nil || e.Dir != dir || e.Collector != c.pid {
			t.Fatalf("Find: %+v, %v; want %s, collector %d", e, err, dir, c.pid)
		}
		if _, err := Ask(ctx, e, Request{Op: "snapshot"}); (err == nil) != c.ok {
			t.Errorf("Ask with the collector recorded as pid %d (the server is pid %d): %v", c.pid, os.Getpid(), err)
		}
	}
}

// TestCacheBase: the cache directory is a base only when its parent is
// ours alone; a base in it comes before the one in TMPDIR.
func TestCacheBase(t *testing.T) {
	home := privateTemp(t)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, "cache"))
	want := filepath.Join(home, "cache", "leakpath-attach")
	if got := cacheBase(); got != want {
		t.Fatalf("cacheBase in a private home: %q, want %q", got, want)
	}
	b := bases()
	if i, j := slices.Index(b, want), len(b)-1; i < 0 || i >= j {
		t.Errorf("bases %q: the cache's before TMPDIR's", b)
	}
	if err := os.Chmod(home, 0o777); err != nil {
		t.Fatal(err)
	}
	if got := cacheBase(); got != "" {
		t.Errorf("cacheBase under a directory others may change: %q, want none", got)
	}
	t.Setenv("XDG_CACHE_HOME", "/"+strings.Repeat("x", maxBase))
	if got := cacheBase(); got != "" {
		t.Errorf("cacheBase too long for a socket's path: %q, want none", got)
	}
}
