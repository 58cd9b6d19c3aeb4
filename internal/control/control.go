// Package control is how `leakpath snapshot` asks the collector of a
// running `leakpath run` for something: a request on the session's socket
// (the one the agents register on), told apart from an agent's hello by
// its first 8 bytes, then one JSON request and one JSON response.
//
// The session directory is private to its user (mode 0700), so only that
// user (or root) can reach the socket.
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
)

// Magic opens every control connection (an agent's hello opens with
// wire.HelloMagic instead).
const Magic = "LPCTRL\x00\x01"

// Version is the version of the request and response shapes.
const Version = 1

// SocketName is the socket's name in the session directory.
const SocketName = "ctl.sock"

// AgentName is the agent library's name, found in a target's LD_PRELOAD.
const AgentName = "libleakpath.so"

// SessionEnv names, in the environment of a program under `leakpath run`,
// the session directory that holds the socket.
const SessionEnv = "LEAKPATH_SESSION"

// MaxMessage bounds a request or response read from the socket.
const MaxMessage = 1 << 30

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

// AttachDir is the session directory of `leakpath attach` to pid: a name
// derived from the pid (and the user), so that `leakpath snapshot` and
// `leakpath detach` find it without the target's environment.
func AttachDir(pid int) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("leakpath-attach.%d.%d", os.Geteuid(), pid))
}

// Find returns the control socket of the `leakpath run` that records pid
// (in the session directory its LEAKPATH_SESSION names, while the agent
// is in its LD_PRELOAD), or of the `leakpath attach` to pid (in
// AttachDir).
func Find(pid int) (string, error) {
	if pid > 0 {
		if sock := filepath.Join(AttachDir(pid), SocketName); isSocket(sock) {
			return sock, nil
		}
	}
	if pid <= 0 {
		return "", fmt.Errorf("pid %d: want a positive process id", pid)
	}
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/environ")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no process with pid %d", pid)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("pid %d: cannot read its environment: permission denied (run as its user or root)", pid)
	case err != nil:
		return "", fmt.Errorf("pid %d: %w", pid, err)
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
		return "", fmt.Errorf("pid %d is not recorded by leakpath (not under `leakpath run`: no %s in its LD_PRELOAD; no `leakpath attach` to it)", pid, AgentName)
	}
	sock := filepath.Join(dir, SocketName)
	if _, err := os.Stat(sock); err != nil {
		return "", fmt.Errorf("pid %d: its leakpath session (%s) is over: the collector has exited", pid, dir)
	}
	return sock, nil
}

func isSocket(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&fs.ModeSocket != 0
}

// Ask sends req on the socket at path and returns the response; an error
// the collector answered with is returned as an error.
func Ask(ctx context.Context, path string, req Request) (*Response, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("connect to the collector: %w", err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	// Stop waiting when ctx ends without a deadline (an interrupt).
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	req.Version = Version
	if err := WriteMessage(c, []byte(Magic), req); err != nil {
		return nil, fmt.Errorf("send the request: %w", err)
	}
	var resp Response
	if err := ReadMessage(bufio.NewReader(c), &resp); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no answer from the collector: %w", ctx.Err())
		}
		return nil, fmt.Errorf("read the answer: %w", err)
	}
	if resp.Error != "" {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}

// WriteMessage writes prefix, then v as one line of JSON.
func WriteMessage(w io.Writer, prefix []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(append(append([]byte(nil), prefix...), b...), '\n')
	_, err = w.Write(b)
	return err
}

// ReadMessage reads one line of JSON into v (at most MaxMessage bytes).
func ReadMessage(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxMessage {
			return fmt.Errorf("message longer than %d bytes", MaxMessage)
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
