package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

	// A daemon the program left: its LD_PRELOAD names the link in used.
	daemon := exec.Command("sleep", "30")
	daemon.Env = append(os.Environ(), "LD_PRELOAD_NOT_HERE="+filepath.Join(used, AgentName))
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { daemon.Process.Kill(); daemon.Wait() }()

	removed := SweepStale(tmp)
	slices.Sort(removed)
	want := []string{killed, closed, oldOld}
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
