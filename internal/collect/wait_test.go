package collect

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// hangGuard bounds the waits of these tests: long enough that a machine
// whose cores are all busy never reaches it, so it fails only a test that
// would otherwise hang.
const hangGuard = 3 * time.Minute

// TestWaitExitTakesNoStop stops and resumes a traced child many times
// while waitExit waits for it, as the scan at exit does: no stop may reach
// waitExit, and it still reaps the child with its status. The child exits
// when the test closes its stdin, after the stops, however slow they are.
func TestWaitExitTakesNoStop(t *testing.T) {
	var stolen atomic.Int32
	handStolen = func(int, unix.WaitStatus) bool { stolen.Add(1); return false }
	defer func() { handStolen = ptrace.Stolen }()
	cmd := exec.Command("sh", "-c", "read x; exit 7")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan waitResult, 1)
	go func() { waited <- waitExit(cmd.Process.Pid) }()
	testfixture.Poll(t, "waitExit blocked in poll or wait4", func() bool { return waitingFor(cmd.Process.Pid) })
	tr, err := ptrace.Seize(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
		err := tr.StopAll(ctx)
		cancel()
		if err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if err := tr.ResumeAll(); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
	}
	tr.Close()
	stdin.Close()
	var r waitResult
	select {
	case r = <-waited:
	case <-time.After(hangGuard):
		t.Fatalf("waitExit did not return %v after the child's stdin closed", hangGuard)
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("waitExit consumed %d ptrace stops", n)
	}
	if !r.ws.Exited() || r.ws.ExitStatus() != 7 {
		t.Errorf("waitExit: status %v, want exit 7", r.ws)
	}
}

// waitingFor reports whether a thread of this process is blocked as
// waitExit is: in poll(fds, 1, -1) or ppoll(fds, 1, NULL, ...) on the
// pidfd, or in wait4(pid, ...) where pidfds are missing (x86-64 numbers
// 7, 271, 61; the Go runtime itself waits in epoll and futex). The stops
// that follow then happen while waitExit waits.
func waitingFor(pid int) bool {
	files, _ := filepath.Glob("/proc/self/task/*/syscall")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		a := strings.Fields(string(b))
		if len(a) < 4 {
			continue
		}
		poll := a[2] == "0x1" && (a[0] == "7" && a[3] == "0xffffffffffffffff" || a[0] == "271" && a[3] == "0x0")
		if poll || a[0] == "61" && a[1] == "0x"+strconv.FormatInt(int64(pid), 16) {
			return true
		}
	}
	return false
}
