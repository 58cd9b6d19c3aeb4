// Package launch starts a program with the agent preloaded and accepts the
// agent's registrations: the program itself, its fork children and the
// images it execs all find the collector the same way.
//
// The agent is preloaded from a symlink inside a private session directory;
// the agent finds the collector's socket beside its own path. So the only
// trace leakpath leaves in the target's environment is LD_PRELOAD, and the
// agent holds no file descriptor once registered.
package launch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/control"
	"github.com/leakpath/leakpath/internal/wire"
)

// AgentName is the file name of the agent library.
const AgentName = control.AgentName

// Hello is what an agent says when it registers.
type Hello struct {
	PID, PPID int32
	ParentPID int32  // the process it forked from, or 0
	ForkID    uint64 // the parent's fork id, or 0 (a fresh image)
}

// Registrar decides about a registering process image: it returns the memfd
// of the region the agent shall write to, or an error to leave the image
// unrecorded. The fd stays owned by the Registrar.
type Registrar func(h Hello) (fd int, err error)

// Controller answers a control request (see package control); it may take
// long. nil: requests are refused.
type Controller func(req control.Request) control.Response

// Session is a session directory with the agent link and the socket.
type Session struct {
	Dir   string
	Agent string // the link to preload
	ln    *net.UnixListener
	reg   Registrar
	ctl   Controller
	wg    sync.WaitGroup
	errMu sync.Mutex
	errs  []error
	swept chan struct{} // closed when SweepStale is done; nil: not started
	lock  int           // the fd holding the directory's lock, or -1: none
	// agentUID is the uid an agent may register as besides ours and
	// root's (the attached process's), or -1.
	agentUID int
}

// FindAgent locates the agent library: explicit if given, else the
// LEAKPATH_AGENT environment variable, else beside the running executable
// (bin/leakpath → bin/libleakpath.so) or in ../lib/leakpath/.
func FindAgent(explicit string) (string, error) {
	var tried []string
	try := func(p string) (string, bool) {
		if p == "" {
			return "", false
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", false
		}
		tried = append(tried, abs)
		if st, err := os.Stat(abs); err == nil && st.Mode().IsRegular() {
			return abs, true
		}
		return "", false
	}
	if explicit != "" {
		if p, ok := try(explicit); ok {
			return p, nil
		}
		return "", fmt.Errorf("agent library %s: not found", explicit)
	}
	if p, ok := try(os.Getenv("LEAKPATH_AGENT")); ok {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := filepath.Dir(exe)
		for _, p := range []string{filepath.Join(dir, AgentName), filepath.Join(dir, "..", "lib", "leakpath", AgentName)} {
			if p, ok := try(p); ok {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("agent library %s not found (looked at %s); build it with `make` or pass --agent", AgentName, strings.Join(tried, ", "))
}

// NewSession creates the session directory and starts accepting agents
// and control requests. It also removes, in the background, the session
// directories that collectors killed before they could clean up left
// behind (SweepStale).
func NewSession(agentPath string, reg Registrar, ctl Controller) (*Session, error) {
	dir, err := os.MkdirTemp("", sessionPattern())
	if err != nil {
		return nil, fmt.Errorf("session directory: %w", err)
	}
	lock, err := lockDir(dir) // held while the collector runs: see SweepStale
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session directory: lock: %w", err)
	}
	s, err := newSession(dir, agentPath, reg, ctl)
	if err != nil {
		unix.Close(lock)
		return nil, err
	}
	s.lock = lock
	s.swept = make(chan struct{})
	go func() { // while the program starts; rarely finds any
		defer close(s.swept)
		SweepStale(filepath.Dir(dir))
	}()
	return s, nil
}

// NewAttachSession creates the session directory of an attach to pid
// (control.AttachDir: in a base directory only we may enter). A directory
// left by an attach that ended without cleaning up is replaced; one whose
// socket answers belongs to an attach in progress. Agents running as
// uid agentUID (the target's) may register besides ours and root's.
func NewAttachSession(pid, agentUID int, agentPath string, reg Registrar, ctl Controller) (*Session, error) {
	dir, err := control.AttachDir(pid)
	if err != nil {
		return nil, fmt.Errorf("attach to pid %d: %w", pid, err)
	}
	sock := filepath.Join(dir, control.SocketName)
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		return nil, fmt.Errorf("pid %d is being recorded already by another leakpath attach (%s)", pid, dir)
	}
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			return nil, fmt.Errorf("session directory %s exists and is not ours", dir)
		}
		os.RemoveAll(dir)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("session directory: %w", err)
	}
	// Which process the clients shall find serving the socket.
	if err := os.WriteFile(filepath.Join(dir, control.PIDName), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session directory: %w", err)
	}
	s, err := newSession(dir, agentPath, reg, ctl)
	if err != nil {
		return nil, err
	}
	s.agentUID = agentUID
	return s, nil
}

func newSession(dir, agentPath string, reg Registrar, ctl Controller) (*Session, error) {
	s := &Session{Dir: dir, Agent: filepath.Join(dir, AgentName), reg: reg, ctl: ctl, lock: -1, agentUID: -1}
	if err := os.Symlink(agentPath, s.Agent); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session: link agent: %w", err)
	}
	sock := filepath.Join(dir, control.SocketName)
	if len(sock) >= 108 {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session: socket path %s too long for a unix socket; set TMPDIR to a shorter directory", sock)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session: listen %s: %w", sock, err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Env returns env with the agent added in front of any LD_PRELOAD.
func (s *Session) Env(env []string) []string {
	out := make([]string, 0, len(env)+1)
	pre := s.Agent
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			if v != "" {
				pre += ":" + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+pre)
}

func (s *Session) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.handle(c); err != nil {
				s.errMu.Lock()
				s.errs = append(s.errs, err)
				s.errMu.Unlock()
			}
		}()
	}
}

func (s *Session) handle(c *net.UnixConn) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// Who connected, whatever it says: only our user and root (and the
	// attached process's user, for an agent) may talk to the collector.
	cred, err := control.PeerCred(c)
	if err != nil {
		return fmt.Errorf("agent registration: cannot tell who connected: %w", err)
	}
	var b [wire.HelloSize]byte
	if _, err := readFull(c, b[:len(control.Magic)]); err != nil {
		return fmt.Errorf("agent registration: %w", err)
	}
	if string(b[:len(control.Magic)]) == control.Magic {
		return s.control(c, cred)
	}
	if _, err := readFull(c, b[len(control.Magic):]); err != nil {
		return fmt.Errorf("agent registration: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint64(b[wire.OffHelloMagic:]) != wire.HelloMagic {
		return errors.New("agent registration: bad magic")
	}
	welcome := make([]byte, wire.WelcomeSize)
	le.PutUint64(welcome, wire.HelloMagic)
	if v := le.Uint32(b[wire.OffHelloVersion:]); v != wire.Version {
		le.PutUint32(welcome[8:], 1)
		c.Write(welcome)
		return fmt.Errorf("agent registration: agent speaks wire version %d, collector %d (rebuild with `make`)", v, wire.Version)
	}
	h := Hello{
		PID:       int32(le.Uint32(b[wire.OffHelloPID:])),
		PPID:      int32(le.Uint32(b[wire.OffHelloPPID:])),
		ParentPID: int32(le.Uint32(b[wire.OffHelloParentPID:])),
		ForkID:    le.Uint64(b[wire.OffHelloForkID:]),
	}
	if cred.Pid != h.PID {
		le.PutUint32(welcome[8:], 1)
		c.Write(welcome)
		return fmt.Errorf("agent registration: pid %d claims to be %d", cred.Pid, h.PID)
	}
	if int(cred.Uid) != os.Geteuid() && cred.Uid != 0 && int(cred.Uid) != s.agentUID {
		le.PutUint32(welcome[8:], 1)
		c.Write(welcome)
		return fmt.Errorf("agent registration of pid %d refused: it runs as uid %d, not as this leakpath's user (uid %d), the recorded program's or root", cred.Pid, cred.Uid, os.Geteuid())
	}
	fd, err := s.reg(h)
	if err != nil {
		le.PutUint32(welcome[8:], 1)
		c.Write(welcome)
		return err
	}
	oob := unix.UnixRights(fd)
	if _, _, err := c.WriteMsgUnix(welcome, oob, nil); err != nil {
		return fmt.Errorf("agent registration of pid %d: %w", h.PID, err)
	}
	return nil
}

// control serves one control request of a client with credentials cred.
// Its errors go to the client, not into the session's.
func (s *Session) control(c *net.UnixConn, cred *unix.Ucred) error {
	var req control.Request
	if err := control.ReadMessage(c, &req, control.MaxRequest); err != nil {
		return nil // not a client worth a warning in the report
	}
	if int(cred.Uid) != os.Geteuid() && cred.Uid != 0 {
		// The directory keeps others out already; this holds should its
		// mode change, or a socket be passed on. (Read first: a socket
		// closed with a request unread would lose the answer.)
		_ = control.WriteMessage(c, nil, control.Response{Version: control.Version,
			Error: fmt.Sprintf("refused: uid %d may not ask this leakpath (uid %d) for anything", cred.Uid, os.Geteuid())}, control.MaxResponse)
		return nil
	}
	_ = c.SetDeadline(time.Time{}) // a scan may take long; the client decides
	resp := control.Response{Error: "this leakpath takes no control requests"}
	switch {
	case req.Version != control.Version:
		resp.Error = fmt.Sprintf("control request version %d; this leakpath speaks version %d", req.Version, control.Version)
	case s.ctl != nil:
		resp = s.ctl(req)
	}
	resp.Version = control.Version
	if err := control.WriteMessage(c, nil, resp, control.MaxResponse); errors.Is(err, control.ErrTooLong) {
		// Say so rather than send what the client would refuse.
		_ = control.WriteMessage(c, nil, control.Response{Version: control.Version,
			Error: fmt.Sprintf("the answer is too long: %v (a run's --json report has no bound)", err)}, control.MaxResponse)
	}
	return nil
}

func readFull(c *net.UnixConn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Errors returns the registrations that failed so far.
func (s *Session) Errors() []error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return append([]error(nil), s.errs...)
}

// Close stops accepting agents and removes the socket. keepLink leaves the
// agent link in place for processes that outlive the session: they still
// load it (an absent LD_PRELOAD file would make the loader print an error
// into their stderr), find no socket, and run unrecorded.
func (s *Session) Close(keepLink bool) error {
	err := s.ln.Close()
	s.wg.Wait()
	os.Remove(filepath.Join(s.Dir, control.SocketName))
	if !keepLink {
		os.RemoveAll(s.Dir)
	}
	if s.swept != nil {
		<-s.swept // not to leave a directory half removed
	}
	if s.lock >= 0 {
		unix.Close(s.lock)
	}
	return err
}
