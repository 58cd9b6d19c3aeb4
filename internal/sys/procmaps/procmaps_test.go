package procmaps

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	in := "55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 123 /usr/bin/prog\n" +
		"7f0000000000-7f0000026000 r-xp 00026000 fe:00 456 /usr/lib/x86_64-linux-gnu/libc.so.6\n" +
		"7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n" +
		"garbage line\n" +
		"1000-0800 r--p 00000000 00:00 0\n" + // empty range: skipped
		"7f1000000000-7f1000001000 r--p 00000000 fe:00 9 /path with spaces/lib.so\n"
	ms := Parse([]byte(in))
	if len(ms) != 4 {
		t.Fatalf("%d mappings, want 4: %+v", len(ms), ms)
	}
	if m := ms[1]; m.Lo != 0x7f0000000000 || m.Hi != 0x7f0000026000 || m.Offset != 0x26000 || m.Perms != "r-xp" || m.Path != "/usr/lib/x86_64-linux-gnu/libc.so.6" {
		t.Errorf("libc line: %+v", m)
	}
	if ms[3].Path != "/path with spaces/lib.so" {
		t.Errorf("path with spaces: %q", ms[3].Path)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 123 /usr/bin/prog\n"))
	f.Add([]byte("0-1 rwxp 0 0:0 0\n-\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range Parse(b) {
			if m.Hi <= m.Lo {
				t.Fatalf("empty mapping %+v", m)
			}
		}
	})
}

// TestReadBig reads maps longer than Read's first buffer: every one of
// thousands of mappings is there, each line whole.
func TestReadBig(t *testing.T) {
	const pages = 3000
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, pages*page, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// Every other page another protection: a mapping each.
	for i := 0; i < pages; i += 2 {
		if err := unix.Mprotect(mem[i*page:(i+1)*page], unix.PROT_NONE); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) <= 64<<10 || b[len(b)-1] != '\n' {
		t.Fatalf("read %d bytes (last %q), want more than 64 KiB ending in a newline", len(b), b[len(b)-1:])
	}
	lo := uint64(uintptr(unsafe.Pointer(&mem[0])))
	hi := lo + pages*uint64(page)
	n := 0
	for _, m := range Parse(b) {
		if m.Lo >= lo && m.Hi <= hi {
			n++
		}
	}
	if n != pages {
		t.Errorf("%d mappings of the %d pages, want %d", n, pages, pages)
	}
	if _, err := Read(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read of no process: %v, want not exist", err)
	}
}
