package collect

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
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
	time.Sleep(20 * time.Millisecond) // waitExit is likely waiting (if not, the test is only weaker)
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
