package launch

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// peerClient connects to the socket argv[1] and sends a control request
// (argv[2] "control") or an agent's hello for its own pid, then prints in
// hex what came back until the collector closed.
const peerClient = `
import os, socket, struct, sys
path, mode = sys.argv[1], sys.argv[2]
c = socket.socket(socket.AF_UNIX)
c.connect(path)
if mode == "control":
    c.sendall(bytes.fromhex(sys.argv[3]) + b'{"version":%d,"op":"snapshot","pid":1}\n' % int(sys.argv[4]))
else:
    m, v, off_pid, off_ppid, size = (int(a) for a in sys.argv[3:8])
    h = bytearray(size)
    struct.pack_into("<QI", h, 0, m, v)
    struct.pack_into("<i", h, off_pid, os.getpid())
    struct.pack_into("<i", h, off_ppid, os.getppid())
    c.sendall(bytes(h))
data = b""
while True:
    b = c.recv(65536)
    if not b:
        break
    data += b
print(data.hex())
`

// TestSessionRefusesOtherUser: a process of another user that reaches
// the session's socket (here through a directory opened to everyone) can
// neither ask the collector anything nor register as an agent.
func TestSessionRefusesOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as another user (uid 65534)")
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 to play the other user's process")
	}
	dir, err := os.MkdirTemp("", "leakpath-test-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var asked, registered atomic.Int32
	s, err := newSession(dir, "/nonexistent/"+AgentName,
		func(h Hello) (int, error) { registered.Add(1); return -1, fmt.Errorf("the test registers nobody") },
		func(req control.Request) control.Response {
			asked.Add(1)
			return control.Response{Text: "answered"}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(false)
	sock := filepath.Join(dir, control.SocketName)
	// What a mistaken mode would do: anyone may reach the socket.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, append([]string{"-c", peerClient, sock}, args...)...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the client of uid 65534: %v\n%s", err, out)
		}
		b, err := hex.DecodeString(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("the client's output %q: %v", out, err)
		}
		return b
	}

	answer := run("control", hex.EncodeToString([]byte(control.Magic)), fmt.Sprint(control.Version))
	if asked.Load() != 0 || !strings.Contains(string(answer), "refused: uid 65534") {
		t.Errorf("a control request of uid 65534: answered %q, the collector asked %d times; want it refused unasked", answer, asked.Load())
	}

	welcome := run("hello", fmt.Sprint(uint64(wire.HelloMagic)), fmt.Sprint(wire.Version),
		fmt.Sprint(wire.OffHelloPID), fmt.Sprint(wire.OffHelloPPID), fmt.Sprint(wire.HelloSize))
	if registered.Load() != 0 || len(welcome) < 12 || welcome[8] == 0 {
		t.Errorf("a hello of uid 65534: welcome %x, the registrar called %d times; want it refused unregistered", welcome, registered.Load())
	}
	// The handler notes the refusal after it answered: waited for.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		found := false
		for _, e := range s.Errors() {
			found = found || strings.Contains(e.Error(), "runs as uid 65534")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refused registration is not among the session's errors: %v", s.Errors())
		}
	}
}
