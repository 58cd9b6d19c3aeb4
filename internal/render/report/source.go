package report

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// MaxSourceBytes bounds a source file the UI or a report shows lines of.
const MaxSourceBytes = 4 << 20

// ReadSource reads a source file a frame names. The name comes from the
// program's debug info, which its author chose (#line 1 "/etc/shadow"),
// so only a regular file, not a symbolic link, of at most MaxSourceBytes
// is read; and when leakpath runs as root, only one its invoking user
// could read too (see readableByInvoker).
func ReadSource(path string) ([]byte, error) {
	li, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if li.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s: a symbolic link: not served", path)
	}
	if !li.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file: not served", path)
	}
	// O_NONBLOCK: a FIFO put in its place meanwhile must not hang us.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || !os.SameFile(li, fi) {
		return nil, fmt.Errorf("%s: replaced while opened: not served", path)
	}
	if fi.Size() > MaxSourceBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d bytes a source file may have to be shown", path, fi.Size(), MaxSourceBytes)
	}
	if os.Geteuid() == 0 {
		if err := readableByInvoker(f, fi); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSourceBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSourceBytes {
		return nil, fmt.Errorf("%s: more than the %d bytes a source file may have to be shown", path, MaxSourceBytes)
	}
	return b, nil
}

// invokingUID is the user leakpath runs for: the real uid, or under sudo
// (real uid 0) SUDO_UID, else root itself.
func invokingUID() uint32 {
	if uid := os.Getuid(); uid != 0 {
		return uint32(uid)
	}
	if n, err := strconv.ParseUint(os.Getenv("SUDO_UID"), 10, 32); err == nil {
		return uint32(n)
	}
	return 0
}

// readableByInvoker says whether the invoking user could read the open
// file f by the ordinary permission bits, leaving groups out: the file
// readable by others or owned by that user and readable by its owner, and
// so each directory on its real path searchable. Root reads any file, so
// without this a user allowed to run leakpath with sudo could read
// /etc/shadow through the UI or a root cause's source lines.
func readableByInvoker(f *os.File, fi os.FileInfo) error {
	uid := invokingUID()
	may := func(fi os.FileInfo, other, owner os.FileMode) bool {
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && (fi.Mode().Perm()&other != 0 || st.Uid == uid && fi.Mode().Perm()&owner != 0)
	}
	if !may(fi, 0o004, 0o400) {
		return fmt.Errorf("not readable by others nor owned by uid %d, for whom leakpath runs as root: not served", uid)
	}
	resolved, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !filepath.IsAbs(resolved) {
		return errors.New("its path is unknown: not served")
	}
	for dir := filepath.Dir(resolved); ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !may(di, 0o001, 0o100) {
			return fmt.Errorf("directory %s is not searchable by others nor owned by uid %d, for whom leakpath runs as root: not served", dir, uid)
		}
		if dir == "/" {
			return nil
		}
	}
}
