// Package launch starts a program with the agent preloaded and accepts the
// agent's registrations: the program itself, its fork children and the
// images it execs all find the collector the same way.
//
// LD_PRELOAD names the agent library itself, at a path any user can open
// (see PreloadPath), and LEAKPATH_SESSION the private session directory
// that holds the collector's socket: a process that outlives the session
// (a daemon) or runs as another user (a privilege drop) still loads the
// agent silently, finds no collector it may reach, and takes the agent
// out of its environment; the agent holds no file descriptor once
// registered.
package launch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/wire"
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

// SessionEnv names the session directory in the program's environment;
// the agent registers on the socket in it.
const SessionEnv = control.SessionEnv

// OtherSocketName is the socket in the session directory on which the
// agent of a process running as another user (which the collector's socket
// refuses) says it cannot be recorded. Anyone may connect to it: it takes
// a hello and answers one byte, nothing else.
const OtherSocketName = "other-uid.sock"

// maxNotices bounds the processes named as unreachable in the report;
// maxNoticing the connections on OtherSocketName served at once (anyone
// may connect: the others are closed at once).
const (
	maxNotices  = 16
	maxNoticing = 8
)

// Session is a session directory with the collector's sockets.
type Session struct {
	Dir   string
	Agent string // the path to preload
	ln    *net.UnixListener
	other *net.UnixListener // OtherSocketName; nil: none (attach)
	reg   Registrar
	ctl   Controller
	wg    sync.WaitGroup
	errMu sync.Mutex
	errs  []error
	// notices: the processes of other users that could not register
	// (at most maxNotices, by pid); unnoticed counts the rest.
	notices   map[int32]bool
	unnoticed int
	swept     chan struct{} // closed when SweepStale is done; nil: not started
	lock      int           // the fd holding the directory's lock, or -1: none
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
//
// The directory may be searched by anyone (0711) so that a process that
// dropped privileges can say it cannot be recorded (OtherSocketName); the
// collector's own socket is its owner's only (0600). Both are made and
// their modes set while the directory is still 0700.
func NewSession(agentPath string, reg Registrar, ctl Controller) (*Session, error) {
	agent, err := PreloadPath(agentPath)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", sessionPattern())
	if err != nil {
		return nil, fmt.Errorf("session directory: %w", err)
	}
	if abs, err := filepath.Abs(dir); err == nil { // a relative $TMPDIR: the agent runs elsewhere
		dir = abs
	}
	lock, err := lockDir(dir) // held while the collector runs: see SweepStale
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("session directory: lock: %w", err)
	}
	s, err := newSession(dir, agent, reg, ctl)
	if err != nil {
		unix.Close(lock)
		return nil, err
	}
	s.lock = lock
	if err := s.openToOthers(); err != nil {
		s.Close(false)
		return nil, err
	}
	s.swept = make(chan struct{})
	go func() { // while the program starts; rarely finds any
		defer close(s.swept)
		SweepStale(filepath.Dir(dir))
	}()
	return s, nil
}

// openToOthers starts OtherSocketName and makes the directory searchable
// by other users.
func (s *Session) openToOthers() error {
	if err := os.Chmod(filepath.Join(s.Dir, control.SocketName), 0o600); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	sock := filepath.Join(s.Dir, OtherSocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("session: listen %s: %w", sock, err)
	}
	s.other = ln
	if err := os.Chmod(sock, 0o666); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if err := os.Chmod(s.Dir, 0o711); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	s.wg.Add(1)
	go s.serveOthers()
	return nil
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
	s := &Session{Dir: dir, Agent: agentPath, reg: reg, ctl: ctl, lock: -1, agentUID: -1}
	sock := filepath.Join(dir, control.SocketName)
	if len(filepath.Join(dir, OtherSocketName)) >= 108 {
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

// PreloadPath returns the path LD_PRELOAD is to name the agent by: the
// library itself, symbolic links resolved, when any user can open it
// (every directory above it searchable by all, the file readable by all),
// so that a process that drops privileges or outlives leakpath still
// loads it without the loader printing an error into its stderr.
// Otherwise a copy any user can read (agentCopy), or, when none can be
// made, the library's own path (then a process of another user that
// inherits LD_PRELOAD gets the loader's error line).
func PreloadPath(agent string) (string, error) {
	real, err := filepath.EvalSymlinks(agent)
	if err != nil {
		return "", fmt.Errorf("agent library: %w", err)
	}
	if !strings.ContainsAny(real, ": ") && publicPath(real) {
		return real, nil
	}
	if cp, err := agentCopy(real); err == nil {
		return cp, nil
	}
	if strings.ContainsAny(real, ": ") {
		return "", fmt.Errorf("agent library %s: a path with a colon or a space cannot be preloaded", real)
	}
	return real, nil
}

// publicPath reports whether any user can open the file at path (no
// symbolic link in it): every directory above it searchable by others,
// the file readable by others.
func publicPath(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o004 == 0 {
		return false
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == "/" || dir == "." {
			return true
		}
	}
}

// agentCopy returns a copy of the agent any user can read, in
// $TMPDIR/leakpath-agent-UID (0755, ours, no one else may write there),
// named by its content: made once for each build of the agent and never
// removed by leakpath, because a daemon may load it long after.
func agentCopy(real string) (string, error) {
	tmp := os.TempDir()
	if !publicDir(tmp) {
		return "", fmt.Errorf("%s is not searchable by other users", tmp)
	}
	data, err := os.ReadFile(real)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(tmp, fmt.Sprintf("leakpath-agent-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not ours alone", dir)
	}
	if st.Mode().Perm() != 0o755 {
		if err := os.Chmod(dir, 0o755); err != nil { // a umask
			return "", err
		}
	}
	name := filepath.Join(dir, "libleakpath-"+hex.EncodeToString(sum[:12])+".so")
	if st, err := os.Lstat(name); err == nil && st.Mode().IsRegular() && st.Size() == int64(len(data)) &&
		st.Mode().Perm() == 0o644 && st.Sys().(*syscall.Stat_t).Uid == uint32(os.Geteuid()) {
		return name, nil // ours: no one else may write in dir
	}
	f, err := os.CreateTemp(dir, ".agent-*")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	if err := f.Chmod(0o644); werr == nil {
		werr = err
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Rename(f.Name(), name)
	}
	if werr != nil {
		os.Remove(f.Name())
		return "", werr
	}
	if !publicPath(name) {
		return "", fmt.Errorf("%s is not readable by other users", name)
	}
	return name, nil
}

// publicDir reports whether others may search dir and every directory
// above it.
func publicDir(dir string) bool {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" || d == "." {
			return true
		}
	}
}

// Env returns env with the agent added in front of any LD_PRELOAD and
// LEAKPATH_SESSION naming the session.
func (s *Session) Env(env []string) []string {
	out := make([]string, 0, len(env)+2)
	pre := s.Agent
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			if v != "" {
				pre += ":" + v
			}
			continue
		}
		if strings.HasPrefix(kv, SessionEnv+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+pre, SessionEnv+"="+s.Dir)
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

// Errors returns the registrations that failed so far, and the processes
// of other users that could not register.
func (s *Session) Errors() []error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	errs := append([]error(nil), s.errs...)
	if s.unnoticed > 0 {
		errs = append(errs, fmt.Errorf("%d more processes running as another user could not reach the collector and were not recorded", s.unnoticed))
	}
	return errs
}

// serveOthers answers the agents of processes that run as another user
// (OtherSocketName).
func (s *Session) serveOthers() {
	defer s.wg.Done()
	busy := make(chan struct{}, maxNoticing)
	for {
		c, err := s.other.AcceptUnix()
		if err != nil {
			return // closed
		}
		select {
		case busy <- struct{}{}:
		default:
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-busy }()
			s.notice(c)
		}()
	}
}

// notice reads the hello of a process that cannot register (it runs as
// another user) and names it among the session's errors, if its
// environment names this session: anyone may connect here, and only
// processes the program started count. The answer, one byte, comes after
// /proc/PID is read, while the process waits for it.
func (s *Session) notice(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b [wire.HelloSize]byte
	if _, err := readFull(c, b[:]); err != nil || binary.LittleEndian.Uint64(b[wire.OffHelloMagic:]) != wire.HelloMagic {
		return
	}
	defer c.Write([]byte{0}) // the agent waits for it
	cred, err := control.PeerCred(c)
	if err != nil || cred.Uid == uint32(os.Geteuid()) {
		return
	}
	proc := "/proc/" + strconv.Itoa(int(cred.Pid))
	if !fileMentions(proc+"/environ", SessionEnv+"="+s.Dir+"\x00") {
		return
	}
	cmd := commandLine(proc + "/cmdline")
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.notices[cred.Pid] {
		return
	}
	if len(s.notices) >= maxNotices {
		s.unnoticed++
		return
	}
	if s.notices == nil {
		s.notices = map[int32]bool{}
	}
	s.notices[cred.Pid] = true
	s.errs = append(s.errs, fmt.Errorf("pid %d (%s) runs as uid %d, not as leakpath (uid %d): it could not reach the collector and was not recorded, nor the programs it ran", cred.Pid, cmd, cred.Uid, os.Geteuid()))
}

// fileMentions reports whether the file at path (a /proc file, read up to
// 1 MiB) holds s.
func fileMentions(path, s string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return strings.Contains(string(b), s)
}

// commandLine reads a process's command line for a message: at most 200
// bytes, printable ASCII, arguments separated by spaces.
func commandLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 200))
	b = []byte(strings.TrimRight(string(b), "\x00"))
	for i, c := range b {
		switch {
		case c == 0:
			b[i] = ' '
		case c < 0x20 || c >= 0x7f:
			b[i] = '?'
		}
	}
	if len(b) == 0 {
		return "?"
	}
	return string(b)
}

// Close stops accepting agents and removes the session directory. Nothing
// in it is needed by a process that outlives the session: its agent was
// preloaded from its own path, finds no collector and takes itself out of
// the process's environment. keepLink is ignored (it kept the agent link
// that LD_PRELOAD named in the session directory before).
func (s *Session) Close(keepLink bool) error {
	err := s.ln.Close()
	if s.other != nil {
		s.other.Close()
	}
	s.wg.Wait()
	os.RemoveAll(s.Dir)
	if s.swept != nil {
		<-s.swept // not to leave a directory half removed
	}
	if s.lock >= 0 {
		unix.Close(s.lock)
	}
	return err
}
