package session

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// An output's directory is reached one component at a time (openat with
// O_NOFOLLOW from / or the working directory), so that no component can
// be swapped for a symbolic link between the check and the use: each
// directory, once opened, is the one the next step starts from. A
// symbolic link on the way is followed only when nobody but root or
// leakpath's user could have put it there or could replace it (see
// untrustedLink); otherwise the output is refused. leakpath often runs as
// root, and without this a user could point root's `-o
// /home/alice/out/report.json` anywhere by making `out` a link
// (fs.protected_symlinks covers only sticky directories).

// maxLinks bounds the symbolic links followed on one path, as the kernel
// does (ELOOP after 40).
const maxLinks = 40

// openOutputDir opens dir (O_PATH) for creating an output in, and
// returns its descriptor and its status.
func openOutputDir(dir string) (int, *unix.Stat_t, error) {
	start := "."
	if filepath.IsAbs(dir) {
		start = "/"
	}
	cur, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, &fs.PathError{Op: "open", Path: start, Err: err}
	}
	var curSt unix.Stat_t
	if err := unix.Fstat(cur, &curSt); err != nil {
		unix.Close(cur)
		return -1, nil, &fs.PathError{Op: "stat", Path: start, Err: err}
	}
	shown := start // the path walked so far, for messages
	todo := strings.Split(dir, "/")
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == "" || name == "." {
			continue
		}
		next, err := unix.Openat(cur, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		here := filepath.Join(shown, name)
		if err != nil {
			unix.Close(cur)
			return -1, nil, &fs.PathError{Op: "open", Path: here, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			unix.Close(cur)
			return -1, nil, &fs.PathError{Op: "stat", Path: here, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			unix.Close(cur)
			cur, curSt, shown = next, st, here
			continue
		case unix.S_IFLNK:
		default:
			unix.Close(next)
			unix.Close(cur)
			return -1, nil, &fs.PathError{Op: "open", Path: here, Err: unix.ENOTDIR}
		}
		// A symbolic link: followed only if trusted, its target's
		// components walked as the rest.
		target, err := readLinkFD(next)
		unix.Close(next)
		if why := untrustedLink(&curSt, &st); err == nil && why != "" {
			err = fmt.Errorf("%s: leakpath does not write through it (name the directory it points to)", why)
		}
		if links++; err == nil && links > maxLinks {
			err = unix.ELOOP
		}
		if err != nil {
			unix.Close(cur)
			return -1, nil, fmt.Errorf("%s: %w", here, err)
		}
		todo = append(strings.Split(target, "/"), todo...)
		if filepath.IsAbs(target) {
			unix.Close(cur)
			if cur, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return -1, nil, &fs.PathError{Op: "open", Path: "/", Err: err}
			}
			if err := unix.Fstat(cur, &curSt); err != nil {
				unix.Close(cur)
				return -1, nil, &fs.PathError{Op: "stat", Path: "/", Err: err}
			}
			shown = "/"
		}
	}
	return cur, &curSt, nil
}

// readLinkFD reads the target of the symbolic link fd (opened O_PATH).
func readLinkFD(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// ours reports whether uid is root or leakpath's effective user: the
// users whose files leakpath may trust.
func ours(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// untrustedLink says why a symbolic link (status link) in its directory
// (status dir) may have been made or may be replaced by someone other
// than root or leakpath's user; "" when it may not: the directory is
// theirs and nobody else may write to it, or it is sticky (like /tmp)
// and the link is theirs too.
func untrustedLink(dir, link *unix.Stat_t) string {
	switch {
	case !ours(dir.Uid):
		return fmt.Sprintf("a symbolic link in a directory of uid %d", dir.Uid)
	case dir.Mode&0o022 == 0:
		return ""
	case dir.Mode&unix.S_ISVTX == 0:
		return "a symbolic link in a directory others may write to"
	case !ours(link.Uid):
		return fmt.Sprintf("a symbolic link of uid %d in a directory others may write to", link.Uid)
	}
	return ""
}

// privateStat reports whether only the directory's owner, root or us,
// may create or replace files in it.
func privateStat(st *unix.Stat_t) bool { return ours(st.Uid) && st.Mode&0o022 == 0 }
