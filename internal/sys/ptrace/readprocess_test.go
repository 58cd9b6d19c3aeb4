package ptrace

import (
	"bytes"
	"os"
	"testing"
	"unsafe"
)

// TestReadProcess reads this process's own memory without a Tracer, and
// an empty buffer, which reads nothing.
func TestReadProcess(t *testing.T) {
	src := []byte("remote memory, read with process_vm_readv")
	dst := make([]byte, len(src))
	n, err := ReadProcess(os.Getpid(), uint64(uintptr(unsafe.Pointer(&src[0]))), dst)
	if err != nil || n != len(src) || !bytes.Equal(dst, src) {
		t.Fatalf("read %d bytes %q, %v; want %q", n, dst[:n], err, src)
	}
	if n, err := ReadProcess(os.Getpid(), 0x1000, nil); n != 0 || err != nil {
		t.Errorf("empty read: %d, %v", n, err)
	}
	if n, err := ReadProcess(os.Getpid(), 0, dst); err == nil {
		t.Errorf("read of address 0: %d bytes and no error", n)
	}
}
