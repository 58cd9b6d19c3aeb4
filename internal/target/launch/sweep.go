package launch

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/target/control"
)

// sessionPrefix starts the name of every session directory; the
// collector's pid follows it, so that a later session can tell a directory
// whose collector died (SIGKILL, a crash, the machine's OOM killer) from
// one in use.
const sessionPrefix = "leakpath-"

// staleAge is how old a session directory without a pid in its name (made
// by a leakpath before the pid was put there) must be before it counts as
// left behind.
const staleAge = time.Hour

// sessionPattern is the os.MkdirTemp pattern of this process's session
// directory.
func sessionPattern() string {
	return sessionPrefix + strconv.Itoa(os.Getpid()) + "-"
}

// SweepStale removes the session directories in tmp that a collector left
// behind: ours (owner and mode), their collector gone (its pid no longer
// runs, and nobody holds the directory's lock), and named by no living
// process of ours in its environment. The last condition is for the
// directories of older versions, whose LD_PRELOAD named an agent link
// inside: a child a daemon execs would make the loader complain into its
// stderr if the link were gone. (Now LEAKPATH_SESSION names it, and an
// agent that finds no collector there runs unrecorded, silently.) It returns
// the directories removed; it is best effort and reports no error (a
// directory it cannot judge or remove stays).
func SweepStale(tmp string) []string {
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var cands []string
	for _, e := range ents {
		if e.IsDir() && isLeftSession(tmp, e.Name()) {
			cands = append(cands, filepath.Join(tmp, e.Name()))
		}
	}
	if len(cands) == 0 {
		return nil
	}
	inUse := environmentsMentioning(cands)
	var removed []string
	for _, d := range cands {
		if inUse[d] {
			continue
		}
		// The lock also keeps two sweeps from removing one directory,
		// and sees a collector in another pid namespace.
		lock, err := lockDir(d)
		if err != nil {
			continue // a collector holds it
		}
		if os.RemoveAll(d) == nil {
			removed = append(removed, d)
		}
		unix.Close(lock)
	}
	return removed
}

// lockDir takes the lock a collector holds on its session directory for
// as long as it runs (flock: released when the collector dies, however
// it dies): the fd holding it, or an error if another holds it.
func lockDir(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// isLeftSession reports whether tmp/name is a session directory of ours
// whose collector is gone: its pid named in it no longer runs, or, for a
// name without a pid, it is older than staleAge.
func isLeftSession(tmp, name string) bool {
	rest, ok := strings.CutPrefix(name, sessionPrefix)
	if !ok {
		return false
	}
	digits, _, withPID := strings.Cut(rest, "-")
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return false // leakpath-e2e-…, leakpath-bench-…, leakpath-attach.…
	}
	var st syscall.Stat_t
	if syscall.Lstat(filepath.Join(tmp, name), &st) != nil ||
		st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o777 != 0o700 && st.Mode&0o777 != 0o711 {
		return false
	}
	if !onlySessionFiles(filepath.Join(tmp, name)) {
		return false
	}
	if !withPID {
		return time.Since(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)) > staleAge
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

// onlySessionFiles reports whether dir holds nothing but what a session
// puts there (the sockets, and the agent link of older versions):
// anything else is not ours to remove.
func onlySessionFiles(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if n := e.Name(); n != AgentName && n != control.SocketName && n != OtherSocketName {
			return false
		}
	}
	return true
}

// environmentsMentioning returns which of dirs the environment of a living
// process of ours names (LD_PRELOAD, mostly). A process whose environment
// cannot be read is not ours to worry about: it could not load the agent
// from a directory only we may enter.
func environmentsMentioning(dirs []string) map[string]bool {
	used := map[string]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		for _, d := range dirs { // cannot tell: keep them all
			used[d] = true
		}
		return used
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", p.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, d := range dirs {
			if bytes.Contains(env, []byte(d+"/")) || bytes.Contains(env, []byte(SessionEnv+"="+d+"\x00")) {
				used[d] = true
			}
		}
	}
	return used
}
