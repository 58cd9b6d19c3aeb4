package prefetch

import (
	"testing"
	"unsafe"
)

// TestLineNeverFaults: a prefetch of nil, of the end of a slice and of
// memory in use leaves the program running and the memory as it was.
func TestLineNeverFaults(t *testing.T) {
	b := make([]uint64, 1024)
	for i := range b {
		b[i] = uint64(i)
	}
	Line(nil)
	Line(unsafe.Pointer(&b[0]))
	Line(unsafe.Add(unsafe.Pointer(&b[0]), 1<<40)) // far past the slice: unmapped
	for i := range b {
		if b[i] != uint64(i) {
			t.Fatalf("b[%d] = %d after prefetching", i, b[i])
		}
	}
}
