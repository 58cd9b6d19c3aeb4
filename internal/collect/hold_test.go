package collect

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/leakpath/leakpath/internal/procmaps"
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
	for range 100 { // until sleep has exec'd
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/maps")
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
	if n, err := threadCount(pid); err != nil || n != 1 {
		t.Fatalf("threadCount(sleep) = %d, %v; want 1", n, err)
	}
	r := heldAlone(pid, stack, 0x1234)
	if r == nil || r.Rsp != stack || r.Fs_base != 0x1234 {
		t.Errorf("heldAlone(sleep, its stack) = %+v, want Rsp %#x, Fs_base 0x1234", r, stack)
	}
	if r := heldAlone(pid, 0, 0); r != nil {
		t.Errorf("heldAlone with no stack pointer = %+v, want nil", r)
	}
	if r := heldAlone(pid, 0x1000, 0); r != nil {
		t.Errorf("heldAlone with an unreadable stack pointer = %+v, want nil", r)
	}
	// This test's own process has several threads (Go's runtime).
	self := int32(os.Getpid())
	if n, err := threadCount(self); err != nil || n < 2 {
		t.Fatalf("threadCount(self) = %d, %v; want at least 2", n, err)
	}
	var local uint64
	if r := heldAlone(self, uint64(uintptr(unsafe.Pointer(&local))), 0); r != nil {
		t.Errorf("heldAlone of a process of several threads = %+v, want nil", r)
	}
	if _, err := threadCount(1 << 30); err == nil {
		t.Error("threadCount of no process: no error")
	}
}
