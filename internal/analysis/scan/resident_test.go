package scan

import (
	"os"
	"reflect"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestResident maps private anonymous memory in this process, writes some
// of its pages, and checks that resident keeps exactly those (and leaves
// roots that are not zero-fill whole).
func TestResident(t *testing.T) {
	ps := uint64(os.Getpagesize())
	const pages = 256
	mem, err := unix.Mmap(-1, 0, pages*int(ps), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	// No huge page may fill the untouched ones in.
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	for _, p := range []uint64{3, 100, 101, pages - 1} {
		mem[p*ps+5] = 1
	}
	// Read-only access to a page maps the shared zero page: present, and
	// cheap to read again.
	if mem[50*ps] != 0 {
		t.Fatal("a page never written is not zero")
	}
	lo := base + 3*ps + 8 // an unaligned start, as a stack's
	roots := []span{
		{base, base + 2*ps, "small", true},
		{lo, base + pages*ps, "anonymous", true},
		{base, base + pages*ps, "/file", false},
	}
	got := resident(os.Getpid(), roots)
	want := []span{
		{base, base + 2*ps, "small", true}, // under residentMin: kept
		{lo, base + 4*ps, "anonymous", true},
		{base + 50*ps, base + 51*ps, "anonymous", true},
		{base + 100*ps, base + 102*ps, "anonymous", true},
		{base + (pages-1)*ps, base + pages*ps, "anonymous", true},
		{base, base + pages*ps, "/file", false},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resident =\n%#v\nwant\n%#v", got, want)
	}
	// A process that is gone: the roots stay whole.
	if got := resident(1<<30, roots); !reflect.DeepEqual(got, roots) {
		t.Errorf("resident of no process = %#v", got)
	}
}
