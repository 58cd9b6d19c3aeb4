package steptrace

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFindVdso reads this process's vDSO: clock_gettime is among its
// functions, and the gadget is a system call.
func TestFindVdso(t *testing.T) {
	read := func(addr uint64, b []byte) (int, error) {
		return unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &b[0], Len: uint64(len(b))}},
			[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}, 0)
	}
	v, err := FindVdso(os.Getpid(), read)
	if err != nil || v == nil {
		t.Fatalf("FindVdso: %v, %v", v, err)
	}
	found := false
	for _, nr := range v.calls {
		found = found || nr == unix.SYS_CLOCK_GETTIME
	}
	if !found {
		t.Errorf("no clock_gettime among %v", v.calls)
	}
	g := make([]byte, 2)
	if n, err := read(v.gadget, g); n != 2 || !bytes.Equal(g, []byte{0x0f, 0x05}) {
		t.Errorf("gadget at %#x: % x (%v), want a syscall", v.gadget, g, err)
	}
	if _, err := parseVdso(0x1000, []byte("not an ELF")); err == nil {
		t.Error("a broken vDSO image was accepted")
	}
}

// FuzzParseVdso: any image read from a process gives a vDSO or an
// error, never a panic; a vDSO's gadget lies in its image.
func FuzzParseVdso(f *testing.F) {
	if img, err := os.ReadFile("/bin/true"); err == nil {
		f.Add(img[:min(len(img), 1<<16)])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, img []byte) {
		v, err := parseVdso(0x10000, img)
		if err == nil && (v.gadget < 0x10000 || v.gadget >= 0x10000+uint64(len(img))) {
			t.Errorf("gadget %#x outside the image", v.gadget)
		}
	})
}
