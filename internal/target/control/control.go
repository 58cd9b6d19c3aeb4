// Package control is how `leakpath snapshot` asks the collector of a
// running `leakpath run` for something: a request on the session's socket
// (the one the agents register on), told apart from an agent's hello by
// its first 8 bytes, then one JSON request and one JSON response.
//
// The session directory is private to its user (mode 0700), so only that
// user (or root) can reach the socket; both ends check the other's
// credentials besides (SO_PEERCRED), and every message is bounded.
package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// Magic opens every control connection (an agent's hello opens with
// wire.HelloMagic instead).
const Magic = "LPCTRL\x00\x01"

// Version is the version of the request and response shapes.
const Version = 1

// SocketName is the socket's name in the session directory.
const SocketName = "ctl.sock"

// PIDName is the file, in an attach's session directory, that holds the
// collector's pid.
const PIDName = "collector.pid"

// AgentName is the agent library's name, found in a target's LD_PRELOAD.
const AgentName = "libleakpath.so"

// SessionEnv names, in the environment of a program under `leakpath run`,
// the session directory that holds the socket.
const SessionEnv = "LEAKPATH_SESSION"

// MaxRequest bounds a request read from the socket (a few fields), and
// MaxResponse an answer (a snapshot's JSON report and its text): what a
// peer sends cannot make the reader hold more.
const (
	MaxRequest  = 64 << 10
	MaxResponse = 64 << 20
)

// ErrTooLong is the error of a message over its bound.
var ErrTooLong = errors.New("message too long")

// Request is what a client asks.
type Request struct {
	Version int    `json:"version"`
	Op      string `json:"op"` // "snapshot", "root-cause"; the program's own also "leak-check"
	PID     int    `json:"pid"`
	// ShowReachable lists the still reachable groups in the text too.
	ShowReachable bool `json:"show_reachable,omitempty"`
	// Of a request the program made itself (leakpath_snapshot,
	// leakpath_leak_check): the thread that asked (0: not the program's
	// request) and the snapshot's label.
	TID   int    `json:"tid,omitempty"`
	Label string `json:"label,omitempty"`
}

// Response is the collector's answer.
type Response struct {
	Version int    `json:"version"`
	Error   string `json:"error,omitempty"`
	// Report is the snapshot as a leakpath.report/v1 JSON document;
	// Text is the same for people.
	Report json.RawMessage `json:"report,omitempty"`
	Text   string          `json:"text,omitempty"`
	// PauseSeconds is how long the program was stopped.
	PauseSeconds float64 `json:"pause_seconds,omitempty"`
	// LeakedBytes and LeakedBlocks: the leaks of the kinds `leakpath run
	// --check` fails on (suppressions applied), as a leak check counts
	// them.
	LeakedBytes  uint64 `json:"leaked_bytes,omitempty"`
	LeakedBlocks uint64 `json:"leaked_blocks,omitempty"`
}

// Endpoint is a collector's control socket, as Find found it.
type Endpoint struct {
	// Dir is the session directory: ours, and only we may change what
	// is in it (Ask checks again).
	Dir string
	// Collector is the collector's pid when the directory's name tells
	// it (a `leakpath run` session), else 0.
	Collector int
}

// Socket is the socket's path.
func (e Endpoint) Socket() string { return filepath.Join(e.Dir, SocketName) }

// Find returns the control socket of the `leakpath attach` to pid (in a
// rendezvous directory, see AttachDir), or of the `leakpath run` that
// records pid (in the session directory its LEAKPATH_SESSION names, while
// the agent is in its LD_PRELOAD). Either directory must be ours and only
// we may change what is in it: one another user made or can write to is
// refused.
func Find(pid int) (Endpoint, error) {
	if pid <= 0 {
		return Endpoint{}, fmt.Errorf("pid %d: want a positive process id", pid)
	}
	for _, dir := range AttachDirs(pid) {
		if privateDir(filepath.Dir(dir)) == nil && ownDir(dir) == nil && isSocket(filepath.Join(dir, SocketName)) {
			return Endpoint{Dir: dir, Collector: attachPID(dir)}, nil
		}
	}
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/environ")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Endpoint{}, fmt.Errorf("no process with pid %d", pid)
	case errors.Is(err, fs.ErrPermission):
		return Endpoint{}, fmt.Errorf("pid %d: cannot read its environment: permission denied (run as its user or root)", pid)
	case err != nil:
		return Endpoint{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	dir, session := "", ""
	for _, kv := range strings.Split(string(b), "\x00") {
		if v, ok := strings.CutPrefix(kv, SessionEnv+"="); ok && v != "" {
			session = v
		}
		v, ok := strings.CutPrefix(kv, "LD_PRELOAD=")
		if !ok {
			continue
		}
		// Before LEAKPATH_SESSION, LD_PRELOAD named a link to the agent
		// in the session directory.
		for _, lib := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' }) {
			if filepath.Base(lib) == AgentName {
				dir = filepath.Dir(lib)
			}
		}
	}
	if session != "" && dir != "" {
		dir = session
	}
	if dir == "" {
		return Endpoint{}, fmt.Errorf("pid %d is not recorded by leakpath (not under `leakpath run`: no %s in its LD_PRELOAD; no `leakpath attach` to it)", pid, AgentName)
	}
	if !filepath.IsAbs(dir) {
		return Endpoint{}, fmt.Errorf("pid %d: its session is in a relative directory (%s): not a leakpath session", pid, termsafe.String(dir))
	}
	if err := ownDir(dir); err != nil {
		return Endpoint{}, fmt.Errorf("pid %d: its leakpath session is not one to talk to: %w", pid, err)
	}
	if !isSocket(filepath.Join(dir, SocketName)) {
		return Endpoint{}, fmt.Errorf("pid %d: its leakpath session (%s) is over: the collector has exited", pid, termsafe.String(dir))
	}
	return Endpoint{Dir: dir, Collector: sessionPID(filepath.Base(dir))}, nil
}

// sessionPID is the collector's pid in the name of a `leakpath run`
// session directory (leakpath-PID-RANDOM, package launch), else 0.
func sessionPID(name string) int {
	rest, ok := strings.CutPrefix(name, "leakpath-")
	if !ok {
		return 0
	}
	digits, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0
	}
	pid, err := strconv.Atoi(digits)
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// attachPID is the collector's pid an attach's directory records, else 0.
func attachPID(dir string) int {
	f, err := os.OpenFile(filepath.Join(dir, PIDName), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	b := make([]byte, 16)
	n, _ := io.ReadFull(f, b)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func isSocket(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode()&fs.ModeSocket != 0
}

// Ask sends req to the collector at e and returns the response; an error
// the collector answered with is returned as an error. The directory is
// opened without following a symbolic link and checked to be ours and
// closed to others' changes, the socket is reached through that open directory (it cannot
// be swapped meanwhile), and the peer must run as us or root (and be the
// collector e names, when it names one): a socket another user serves
// is refused, whatever path led to it.
func Ask(ctx context.Context, e Endpoint, req Request) (*Response, error) {
	dfd, err := unix.Open(e.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connect to the collector: session directory %s: %w", termsafe.String(e.Dir), err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, fmt.Errorf("connect to the collector: %w", err)
	}
	if err := checkOwn(e.Dir, &st); err != nil {
		return nil, fmt.Errorf("connect to the collector: %w", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dfd, SocketName))
	if err != nil {
		return nil, fmt.Errorf("connect to the collector (%s): %w", termsafe.String(e.Socket()), err)
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("connect to the collector: not a unix socket")
	}
	if err := checkServer(uc, e.Collector); err != nil {
		return nil, fmt.Errorf("connect to the collector (%s): %w", termsafe.String(e.Socket()), err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// Stop waiting when ctx ends without a deadline (an interrupt).
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	req.Version = Version
	if err := WriteMessage(c, []byte(Magic), req, MaxRequest); err != nil {
		return nil, fmt.Errorf("send the request: %w", err)
	}
	var resp Response
	if err := ReadMessage(c, &resp, MaxResponse); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer from the collector: %w", ctx.Err())
		}
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.Error != "" {
		return &resp, errors.New(termsafe.String(resp.Error))
	}
	return &resp, nil
}

// checkServer refuses a collector that runs as another user than us or
// root, or, when pid is known, is another process than pid (if it is in
// our pid namespace: pids of another one cannot be compared).
func checkServer(c *net.UnixConn, pid int) error {
	cred, err := PeerCred(c)
	if err != nil {
		return fmt.Errorf("cannot tell who serves it: %w", err)
	}
	if int(cred.Uid) != os.Geteuid() && cred.Uid != 0 {
		return fmt.Errorf("it is served by uid %d (pid %d), neither you (uid %d) nor root: refused", cred.Uid, cred.Pid, os.Geteuid())
	}
	if pid > 0 && int(cred.Pid) != pid && samePIDNamespace(int(cred.Pid)) {
		return fmt.Errorf("it is served by pid %d, not by its collector, pid %d: refused", cred.Pid, pid)
	}
	return nil
}

// PeerCred returns the credentials of the process at the other end of c
// (SO_PEERCRED: as it was when it connected, or listened).
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	return cred, nil
}

// samePIDNamespace reports whether pid is known to live in our pid
// namespace.
func samePIDNamespace(pid int) bool {
	a, err1 := os.Readlink("/proc/self/ns/pid")
	b, err2 := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	return err1 == nil && err2 == nil && a == b
}

// WriteMessage writes prefix, then v as one line of JSON; ErrTooLong
// (and nothing written) if that is over limit bytes.
func WriteMessage(w io.Writer, prefix []byte, v any, limit int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b)+1 > limit {
		return fmt.Errorf("%w: %s, over the %s a control message may have", ErrTooLong, mib(len(b)+1), mib(limit))
	}
	b = append(append(append([]byte(nil), prefix...), b...), '\n')
	_, err = w.Write(b)
	return err
}

// ReadMessage reads one line of JSON into v; a line over limit bytes is
// refused with ErrTooLong, once limit bytes and one more were read.
func ReadMessage(r io.Reader, v any, limit int) error {
	br := bufio.NewReader(io.LimitReader(r, int64(limit)+1))
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return fmt.Errorf("%w: over the %s a control message may have", ErrTooLong, mib(limit))
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return errors.New("message cut short")
		}
		if err != nil {
			return err
		}
		break
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("bad message: %w", err)
	}
	return nil
}

// mib formats a size for an error message.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
