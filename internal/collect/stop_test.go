package collect

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
)

// TestHeldAlone checks when an exit scan may skip ptrace: a process of one
// thread whose stack can be read, and no other.
func TestHeldAlone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := int32(cmd.Process.Pid)
	var stack uint64
	for deadline := time.Now().Add(hangGuard); time.Now().Before(deadline); { // until sleep has exec'd
		b, err := procmaps.Read(int(pid))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "sleep") {
			for _, m := range procmaps.Parse(b) {
				if m.Path == "[stack]" {
					stack = m.Hi - 8
				}
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stack == 0 {
		t.Fatal("no [stack] in sleep's maps")
	}
	tr, r := heldAlone(pid, stack, 0x1234)
	if r == nil || r.Rsp != stack || r.Fs_base != 0x1234 {
		t.Fatalf("heldAlone(sleep, its stack) = %+v, want Rsp %#x, Fs_base 0x1234", r, stack)
	}
	var b [8]byte
	if n, err := tr.ReadMemory(stack, b[:]); n != 8 || err != nil {
		t.Errorf("its tracer read %d bytes of the stack: %v", n, err)
	}
	if tr, r := heldAlone(pid, 0, 0); tr != nil || r != nil {
		t.Errorf("heldAlone with no stack pointer = %v, %+v, want nil", tr, r)
	}
	if tr, r := heldAlone(pid, 0x1000, 0); tr != nil || r != nil {
		t.Errorf("heldAlone with an unreadable stack pointer = %v, %+v, want nil", tr, r)
	}
	// This test's own process has several threads (Go's runtime).
	var local uint64
	if tr, r := heldAlone(int32(os.Getpid()), uint64(uintptr(unsafe.Pointer(&local))), 0); tr != nil || r != nil {
		t.Errorf("heldAlone of a process of several threads = %v, %+v, want nil", tr, r)
	}
}
