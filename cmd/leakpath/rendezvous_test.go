package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAttachNotBlockedByOtherUser: another user making first every name
// in the shared temporary directory an attach could use (the old
// leakpath-attach.UID.PID, leakpath-attach-UID) and an XDG_RUNTIME_DIR of theirs
// blocks neither the attach nor its snapshot and detach.
func TestAttachNotBlockedByOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories as another user (uid 65534)")
	}
	tmp, err := os.MkdirTemp("", "leakpath-test-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o1777); err != nil { // like /tmp
		t.Fatal(err)
	}
	p := startReady(t, fixture(t, "idle.c")).pid()
	theirs := func(name string, mode os.FileMode) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		return d
	}
	theirs("leakpath-attach.0."+strconv.Itoa(p), 0o777)
	theirs("leakpath-attach-0", 0o777)
	xdg := theirs("xdg", 0o700)
	env := testEnv("TMPDIR="+tmp, "XDG_RUNTIME_DIR="+xdg)

	a := startAttachEnv(t, env, p)
	snap := filepath.Join(t.TempDir(), "s.json")
	cmd := exec.Command(lpBin, "snapshot", "--quiet", "-o", snap, strconv.Itoa(p))
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("snapshot: %v\n%s", err, out)
	} else if b, err := os.ReadFile(snap); err != nil || !bytes.Contains(b, []byte(`"attached":true`)) {
		t.Errorf("the snapshot file: %v\n%.300s", err, b)
	}
	cmd = exec.Command(lpBin, "detach", strconv.Itoa(p))
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	r, _ := a.wait(t)
	if !r.Attached || !r.Exit.Detached {
		t.Errorf("report: attached %v, detached %v; want both", r.Attached, r.Exit.Detached)
	}
}

// TestSnapshotRefusesOtherUsersCollector: a process whose LD_PRELOAD
// names a directory of another user's, where that user serves a socket,
// gets no snapshot from root: the forged answer is neither printed nor
// written.
func TestSnapshotRefusesOtherUsersCollector(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to serve a socket as another user (uid 65534)")
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 to play the other user's server")
	}
	dir, err := os.MkdirTemp("", "leakpath-test-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(py, filepath.Join(root, "testdata", "fixtures", "forged_server.py"), filepath.Join(dir, "ctl.sock"))
	srv.Dir = "/"
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	ready := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); ready <- l }()
	select {
	case l := <-ready:
		if l == "" {
			t.Fatal("the impostor ended before it listened")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the impostor never listened")
	}

	// The "target": its LD_PRELOAD names the impostor's directory (the
	// loader finds no library there and goes on).
	target := exec.Command("sleep", "120")
	target.Env = append(testEnv(), "LD_PRELOAD="+filepath.Join(dir, "libleakpath.so"))
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })

	file := filepath.Join(t.TempDir(), "s.json")
	snap := exec.Command(lpBin, "snapshot", "-o", file, strconv.Itoa(target.Process.Pid))
	var stdout, stderr bytes.Buffer
	snap.Stdout, snap.Stderr = &stdout, &stderr
	err = snap.Run()
	if err == nil || strings.Contains(stdout.String(), "FORGED") || !strings.Contains(stderr.String(), "belongs to uid 65534") {
		t.Errorf("snapshot of a process that names another user's collector: %v\nstdout %q\nstderr %q\nwant it refused, naming the owner", err, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(file); err == nil {
		t.Errorf("the forged snapshot was written to %s", file)
	}
	t.Logf("%s", stderr.String())
}
