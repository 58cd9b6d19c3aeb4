package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesOtherUsersLinks: `leakpath run` as root refuses an output
// (-o, --json, --report, named by %p or not) whose directory is reached
// through a link another user (uid 65534) made in their directory, before
// the program starts, and writes nothing where the link points. The
// cases of the rule are internal/session's TestOutput* tests.
func TestRunRefusesOtherUsersLinks(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files as another user (uid 65534)")
	}
	const nobody = 65534
	base := t.TempDir()
	secret := filepath.Join(base, "secret")
	theirs := filepath.Join(base, "theirs")
	for _, d := range []string{secret, theirs} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(theirs, "out")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(base, "ran")
	for _, out := range [][]string{{"-o", "r.lpt"}, {"-o", "r.%p.lpt"}, {"--json", "r.json"}, {"--report", "r.%p.txt"}} {
		_, stderr, code := lp(t, "run", out[0], filepath.Join(link, out[1]), "--", "touch", marker)
		if code == 0 || !strings.Contains(stderr, "symbolic link in a directory of uid 65534") {
			t.Errorf("run %s through their link: exit %d, stderr %q; want refused", out, code, stderr)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the program ran although its output was refused")
	}
	if names, _ := os.ReadDir(secret); len(names) != 0 {
		t.Errorf("files were written through their link: %v", names)
	}
}
