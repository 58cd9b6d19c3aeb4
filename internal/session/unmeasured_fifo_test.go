package session

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOwnAllocatorFIFO: the executable's path comes from the trace or
// the loader, and a FIFO may stand there when the report is made: judging
// whether it defines its own malloc fails at once instead of hanging.
func TestOwnAllocatorFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "prog")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ownAllocator(fifo, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO was judged as an executable")
		}
	case <-time.After(2 * time.Minute): // a hang guard only
		t.Fatal("ownAllocator waits on a FIFO")
	}
}
