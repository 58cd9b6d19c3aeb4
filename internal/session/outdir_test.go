package session

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// outTree makes the directories of an output-path test in a fresh
// temporary directory (root's or ours, mode 0755) and returns its path:
// secret, private, where no output may be sent by someone else's link;
// priv, private, with trusted links; open, writable by all, not sticky;
// tmp, writable by all and sticky, like /tmp.
func outTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for name, mode := range map[string]os.FileMode{"": 0o755, "secret": 0o700, "priv": 0o755, "open": 0o777, "tmp": 0o777 | os.ModeSticky} {
		d := filepath.Join(base, name)
		if name != "" {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

// symlink makes link pointing to target, owned by uid (-1: ours).
func symlink(t *testing.T, target, link string, uid int) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if uid >= 0 {
		if err := os.Lchown(link, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

// create calls createOutput and says whether a file was made at want
// (the path the output should land at).
func create(t *testing.T, path, want string) error {
	t.Helper()
	f, err := CreateOutput(path)
	if err != nil {
		if _, serr := os.Lstat(want); serr == nil {
			t.Errorf("CreateOutput(%s) failed (%v) but made %s", path, err, want)
		}
		return err
	}
	defer f.Close()
	if _, err := f.WriteString("x"); err != nil {
		t.Errorf("writing %s: %v", path, err)
	}
	st, serr := os.Lstat(want)
	if serr != nil || !st.Mode().IsRegular() || st.Size() != 1 || st.Mode().Perm() != 0o600 {
		t.Errorf("CreateOutput(%s): %v, want a file of mode 0600 with what was written at %s", path, serr, want)
	}
	return nil
}

// TestOutputThroughTrustedLinks: an output's directory may be reached
// through links that only root or we could have made or could replace
// (in a private directory, or our own in a sticky one), relative or
// absolute; a loop of links is an error, not a hang.
func TestOutputThroughTrustedLinks(t *testing.T) {
	t.Parallel()
	base := outTree(t)
	secret := filepath.Join(base, "secret")
	symlink(t, "../secret", filepath.Join(base, "priv", "rel"), -1)
	symlink(t, secret, filepath.Join(base, "priv", "abs"), -1)
	symlink(t, secret, filepath.Join(base, "tmp", "mine"), -1)
	symlink(t, "loop", filepath.Join(base, "priv", "loop"), -1)
	for _, c := range []struct{ via, name string }{{"priv/rel", "a"}, {"priv/abs", "b"}, {"tmp/mine", "c"}, {"priv/./abs/../secret", "d"}} {
		// Not filepath.Join: it would resolve ".." without the link.
		if err := create(t, base+"/"+c.via+"/"+c.name, filepath.Join(secret, c.name)); err != nil {
			t.Errorf("through %s: %v", c.via, err)
		}
	}
	if err := create(t, filepath.Join(base, "priv", "loop", "x"), filepath.Join(base, "priv", "x")); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Errorf("through a loop of links: %v, want too many levels of symbolic links", err)
	}
	// A link in a directory anyone may write to, not sticky, even ours.
	symlink(t, secret, filepath.Join(base, "open", "out"), -1)
	if err := create(t, filepath.Join(base, "open", "out", "e"), filepath.Join(secret, "e")); err == nil || !strings.Contains(err.Error(), "symbolic link in a directory others may write to") {
		t.Errorf("through a link in a directory writable by all: %v, want refused", err)
	}
}

// TestOutputRefusesOtherUsersLinks: leakpath running as root does not
// write through a directory link another user (uid 65534) made or may
// replace, in their own directory or in a sticky one, nor truncate a
// file with another name there; it does write in a real directory of
// theirs. (cmd/leakpath's TestRunRefusesOtherUsersLinks: `run` stops
// before the program starts.)
func TestOutputRefusesOtherUsersLinks(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files as another user (uid 65534)")
	}
	const nobody = 65534
	base := outTree(t)
	secret := filepath.Join(base, "secret")
	theirs := filepath.Join(base, "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	symlink(t, secret, filepath.Join(theirs, "out"), nobody)
	symlink(t, secret, filepath.Join(theirs, "rootlink"), -1) // root's link, in their directory
	symlink(t, secret, filepath.Join(base, "tmp", "out"), nobody)
	for _, c := range []struct{ via, msg string }{
		{"theirs/out", "symbolic link in a directory of uid 65534"},
		{"theirs/rootlink", "symbolic link in a directory of uid 65534"},
		{"tmp/out", "symbolic link of uid 65534 in a directory others may write to"},
	} {
		err := create(t, filepath.Join(base, c.via, "r.json"), filepath.Join(secret, "r.json"))
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.via) {
			t.Errorf("through %s: %v, want refused with %q", c.via, err, c.msg)
		}
	}
	// A real directory of theirs: the file is created there, ours.
	mine := filepath.Join(theirs, "mine.json")
	if err := create(t, mine, mine); err != nil {
		t.Errorf("in a directory of theirs: %v", err)
	} else if st, err := os.Stat(mine); err == nil && st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s belongs to uid %d, want root", mine, st.Sys().(*syscall.Stat_t).Uid)
	}
	// Our file with a second name there (a hard link they could make
	// to a file of root's) is not truncated.
	if err := os.Link(mine, filepath.Join(theirs, "second")); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateOutput(mine); err == nil || !strings.Contains(err.Error(), "not a file of ours") {
		t.Errorf("a file with two names in a directory of theirs: %v, want refused", err)
	}

	if names, _ := os.ReadDir(secret); len(names) != 0 {
		t.Errorf("files were written through their links: %v", names)
	}
}
