package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSweepStale lays out session directories of every kind and checks
// that only those whose collector is gone and that no process uses are
// removed.
func TestSweepStale(t *testing.T) {
	tmp := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(gone.Process.Pid) // reaped: no process has it (barring reuse in these few ms)
	mk := func(name string, mode os.FileMode, files ...string) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(d, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	killed := mk("leakpath-"+dead+"-11", 0o700, AgentName, "ctl.sock")
	closed := mk("leakpath-"+dead+"-12", 0o700, AgentName)
	running := mk("leakpath-"+strconv.Itoa(os.Getpid())+"-13", 0o700, AgentName, "ctl.sock")
	used := mk("leakpath-"+dead+"-14", 0o700, AgentName)
	foreign := mk("leakpath-"+dead+"-15", 0o700, AgentName, "notes.txt")
	open := mk("leakpath-"+dead+"-16", 0o755, AgentName)
	oldNew := mk("leakpath-123456789", 0o700, AgentName)
	oldOld := mk("leakpath-987654321", 0o700, AgentName, "ctl.sock")
	past := time.Now().Add(-2 * staleAge)
	if err := os.Chtimes(oldOld, past, past); err != nil {
		t.Fatal(err)
	}
	other := mk("leakpath-e2e-17", 0o700)
	// A collector whose pid this namespace does not see: its lock.
	locked := mk("leakpath-"+dead+"-18", 0o700, AgentName, "ctl.sock")
	lock, err := lockDir(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lock)
	attach := mk("leakpath-attach.0."+dead, 0o700, "ctl.sock")
	now := mk("leakpath-"+dead+"-19", 0o711, "ctl.sock", OtherSocketName)

	// A daemon the program left: its LD_PRELOAD names the link in used.
	daemon := exec.Command("sleep", "30")
	daemon.Env = append(os.Environ(), "LD_PRELOAD_NOT_HERE="+filepath.Join(used, AgentName))
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { daemon.Process.Kill(); daemon.Wait() }()

	removed := SweepStale(tmp)
	slices.Sort(removed)
	want := []string{killed, closed, oldOld, now}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, d := range []string{running, used, foreign, open, oldNew, other, attach, locked} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v (should stay)", filepath.Base(d), err)
		}
	}
	for _, d := range want {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", filepath.Base(d), err)
		}
	}
	if again := SweepStale(tmp); len(again) != 0 {
		t.Errorf("a second sweep removed %q", again)
	}
}

// TestNewSessionSweeps: a session holds its directory's lock while it
// runs, removes what a killed collector left (its pid in the name) by the
// time it is closed, and its own directory on Close.
func TestNewSessionSweeps(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(tmp, "leakpath-"+strconv.Itoa(gone.Process.Pid)+"-1")
	if err := os.Mkdir(left, 0o700); err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(tmp, "agent.so")
	os.WriteFile(agent, nil, 0o600)
	s, err := NewSession(agent, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(s.Dir) != tmp || !hasOurPID(filepath.Base(s.Dir)) {
		t.Errorf("session directory %s: not a pid-named directory in %s", s.Dir, tmp)
	}
	if fd, err := lockDir(s.Dir); err == nil {
		unix.Close(fd)
		t.Errorf("%s: not locked while the session runs", s.Dir)
	}
	if err := s.Close(false); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{left, s.Dir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there (%v)", d, err)
		}
	}
}

// hasOurPID: the name carries this process's pid.
func hasOurPID(name string) bool {
	p := sessionPattern()
	return len(name) > len(p) && name[:len(p)] == p
}

// TestSessionLayout: the session directory may be searched by anyone but
// its collector's socket is its owner's; the socket for other users is
// open to all; the environment names the agent and the session.
func TestSessionLayout(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	agent := filepath.Join(tmp, "agent.so")
	os.WriteFile(agent, nil, 0o644)
	s, err := NewSession(agent, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(false)
	for _, c := range []struct {
		path string
		perm os.FileMode
	}{{s.Dir, 0o711}, {filepath.Join(s.Dir, "ctl.sock"), 0o600}, {filepath.Join(s.Dir, OtherSocketName), 0o666}} {
		st, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != c.perm {
			t.Errorf("%s: mode %o, want %o", c.path, st.Mode().Perm(), c.perm)
		}
	}
	env := s.Env([]string{"A=1", "LD_PRELOAD=/x/other.so", SessionEnv + "=/stale"})
	want := []string{"A=1", "LD_PRELOAD=" + s.Agent + ":/x/other.so", SessionEnv + "=" + s.Dir}
	if !slices.Equal(env, want) {
		t.Errorf("Env: %q, want %q", env, want)
	}
}

// TestPreloadPath: an agent any user can open is preloaded from where it
// is; one in a private directory from a copy any user can read, the same
// copy each time.
func TestPreloadPath(t *testing.T) {
	public, err := os.MkdirTemp("", "leakpath-preload-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(public)
	if err := os.Chmod(public, 0o755); err != nil {
		t.Fatal(err)
	}
	if !publicDir(public) {
		t.Skipf("%s is not searchable by others (a private TMPDIR)", public)
	}
	t.Setenv("TMPDIR", public)
	lib := filepath.Join(public, "libleakpath.so")
	if err := os.WriteFile(lib, []byte("agent v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.so")
	if err := os.Symlink(lib, link); err != nil {
		t.Fatal(err)
	}
	if p, err := PreloadPath(link); err != nil || p != lib {
		t.Errorf("public agent through a link: %q, %v; want %s", p, err, lib)
	}

	private := filepath.Join(t.TempDir(), "libleakpath.so") // t.TempDir is 0700
	if err := os.WriteFile(private, []byte("agent v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := PreloadPath(private)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != filepath.Join(public, "leakpath-agent-"+strconv.Itoa(os.Geteuid())) || !publicPath(p) {
		t.Errorf("private agent preloaded from %s: not a public copy in %s", p, public)
	}
	if b, _ := os.ReadFile(p); string(b) != "agent v2" {
		t.Errorf("copy holds %q", b)
	}
	if again, err := PreloadPath(private); err != nil || again != p {
		t.Errorf("second time: %q, %v; want %s", again, err, p)
	}
	if SweepStale(public); !fileExists(p) {
		t.Error("a sweep removed the agent's copy")
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestOtherUserNamed: a process of another user that says on
// OtherSocketName that it cannot register is named among the session's
// errors when its environment names the session, and not otherwise
// (anyone may connect there).
func TestOtherUserNamed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	py := "/usr/bin/python3" // not a shim in root's home: another user runs it
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 to connect as another user")
	}
	tmp, err := os.MkdirTemp("", "leakpath-launch-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chmod(tmp, 0o755)
	t.Setenv("TMPDIR", tmp)
	agent := filepath.Join(tmp, "agent.so")
	os.WriteFile(agent, nil, 0o644)
	s, err := NewSession(agent, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's hello: magic, version, pid; then it waits for a byte.
	script := `import socket, struct, sys
c = socket.socket(socket.AF_UNIX)
c.connect(sys.argv[2])
c.sendall(struct.pack("<QI", 0x4f4c4c4548504c, 0) + bytes(20))
sys.exit(0 if c.recv(1) == b"\0" else 1)
`
	file := filepath.Join(tmp, "say.py")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	say := func(name string, env []string) {
		cmd := exec.Command(py, file, name, filepath.Join(s.Dir, OtherSocketName))
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	say("stranger", []string{"PATH=/usr/bin:/bin"})
	say("dropped", []string{"PATH=/usr/bin:/bin", SessionEnv + "=" + s.Dir})
	s.Close(false)
	errs := s.Errors()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "dropped") || !strings.Contains(errs[0].Error(), "uid 65534") ||
		strings.Contains(errs[0].Error(), "stranger") {
		t.Errorf("errors %q: want one naming the dropped process as uid 65534", errs)
	}
}
