package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// The rendezvous of `leakpath attach` with `leakpath snapshot` and
// `leakpath detach`: a directory named after the target's pid (they find
// it without the target's environment, which an attach does not change),
// inside a base directory only its user can create and enter. A name in
// a world-writable directory such as /tmp could be made first by another
// user, to block the attach or to serve a forged socket; so the base is
// $XDG_RUNTIME_DIR/leakpath, /run/leakpath for root, the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache, then leakpath-attach: in a home
// directory nobody else may change, so nobody else can make the name
// first), or $TMPDIR/leakpath-attach-UID (a name SweepStale of package
// launch leaves alone), each used only if it is a directory of ours (not
// a symbolic link) that nobody else may enter.

// attachPrefix starts the name of an attach's directory in a base.
const attachPrefix = "attach."

// bases are the base directories an attach may use, the preferred first.
func bases() []string {
	var out []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) && privateDir(x) == nil {
		out = append(out, filepath.Join(x, "leakpath"))
	}
	if os.Geteuid() == 0 && rootOnly("/run") == nil {
		out = append(out, "/run/leakpath")
	}
	if c := cacheBase(); c != "" {
		out = append(out, c)
	}
	return append(out, filepath.Join(os.TempDir(), "leakpath-attach-"+strconv.Itoa(os.Geteuid())))
}

// maxBase bounds a base directory's length: a socket's path (the base,
// attach.PID, ctl.sock) must fit in sun_path's 108 bytes.
const maxBase = 80

// cacheBase is leakpath-attach in the user's cache directory, when that
// directory and its parent are ours and nobody else may change them (so
// nobody else can have made the name), or "".
func cacheBase() string {
	c, err := os.UserCacheDir()
	if err != nil || !filepath.IsAbs(c) || len(c)+len("/leakpath-attach") > maxBase {
		return ""
	}
	if ownDir(filepath.Dir(c)) != nil {
		return ""
	}
	if err := os.Mkdir(c, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return ""
	}
	if ownDir(c) != nil {
		return ""
	}
	return filepath.Join(c, "leakpath-attach")
}

// AttachDirs are the places the directory of an attach to pid may be in,
// the preferred first (none is created).
func AttachDirs(pid int) []string {
	var out []string
	for _, b := range bases() {
		out = append(out, filepath.Join(b, attachPrefix+strconv.Itoa(pid)))
	}
	return out
}

// AttachDir returns where the directory of an attach to pid goes: in the
// first base directory that is ours and private, made (mode 0700) if
// missing. It fails, naming each one, when none is.
func AttachDir(pid int) (string, error) {
	return attachDirIn(bases(), pid)
}

func attachDirIn(bases []string, pid int) (string, error) {
	var why []string
	for _, b := range bases {
		if err := makePrivate(b); err != nil {
			why = append(why, err.Error())
			continue
		}
		return filepath.Join(b, attachPrefix+strconv.Itoa(pid)), nil
	}
	return "", fmt.Errorf("no private directory for the attach's socket: %s (remove what is in the way, or set TMPDIR or XDG_RUNTIME_DIR to a directory only you may enter)", strings.Join(why, "; "))
}

// makePrivate makes directory dir (mode 0700) unless it exists, and
// checks that it is ours and private.
func makePrivate(dir string) error {
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		// Ours since the mkdir: a umask may have taken more than the
		// group's and others' bits.
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	return privateDir(dir)
}

// privateDir checks that dir is a directory (not a symbolic link to one)
// that we own and that nobody else may enter or change.
func privateDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: termsafe.String(dir), Err: err}
	}
	return checkPrivate(dir, &st)
}

func checkPrivate(dir string, st *unix.Stat_t) error {
	if err := checkOwn(dir, st); err != nil {
		return err
	}
	if st.Mode&0o077 != 0 {
		return fmt.Errorf("%s has mode %#o: others may enter it (want 0700)", termsafe.String(dir), st.Mode&0o777)
	}
	return nil
}

// ownDir checks that dir is a directory (not a symbolic link to one) that
// we own and in which nobody else may create, remove or rename a file: a
// session directory, whose socket nobody else can then replace. (Others
// may be let through it, to reach a socket of their own there.)
func ownDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: termsafe.String(dir), Err: err}
	}
	return checkOwn(dir, &st)
}

func checkOwn(dir string, st *unix.Stat_t) error {
	dir = termsafe.String(dir)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("%s is a symbolic link, not a directory of yours", dir)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d)", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %#o: others may change what is in it", dir, st.Mode&0o777)
	}
	return nil
}

// rootOnly checks that dir is a directory (not a symbolic link) of root's
// that only root may change.
func rootOnly(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is not a directory only root may change", dir)
	}
	return nil
}
