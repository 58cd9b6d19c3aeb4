package leak

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeSlice returns a zeroed slice of n Ts for the big arrays that lookups
// hit at random (spans, flags, rank bitmaps). Above a few MiB it maps them
// itself and asks for transparent huge pages: with 4 KiB pages nearly every
// lookup in a heap of hundreds of MB also misses the TLB (the Go heap does
// not ask for huge pages). The mapping is c's, unmapped by c.freeHuge;
// nothing may keep the slice after. If mapping fails, it is a Go slice.
func hugeSlice[T any](c *classifier, n int) []T {
	var z T
	size := n * int(unsafe.Sizeof(z))
	if size < 4<<20 {
		return make([]T, n)
	}
	const huge = 2 << 20
	size = (size + huge - 1) &^ (huge - 1)
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]T, n)
	}
	_ = unix.Madvise(m, unix.MADV_HUGEPAGE) // a hint; without it, 4 KiB pages
	c.huge = append(c.huge, m)
	return unsafe.Slice((*T)(unsafe.Pointer(&m[0])), n)
}

// freeHuge unmaps what hugeSlice mapped.
func (c *classifier) freeHuge() {
	for _, m := range c.huge {
		_ = unix.Munmap(m)
	}
	c.huge = nil
}
