package collect

import "testing"

// TestEndDepth: the end point is the innermost function the allocation
// stack shares with every free stack (stacks innermost first, as return
// addresses).
func TestEndDepth(t *testing.T) {
	// main -> loop -> funcB -> funcA -> malloc: alloc stack
	// [in funcA, in funcB (call funcA), in loop, in main].
	alloc := []uint64{0xa1, 0xb1, 0x21, 0x11}
	for _, c := range []struct {
		name  string
		frees [][]uint64
		want  int
	}{
		{"freed in funcB (another call site in it)", [][]uint64{{0xb2, 0x21, 0x11}}, 1},
		{"freed by sub1 called from funcB", [][]uint64{{0xc1, 0xb3, 0x21, 0x11}}, 1},
		{"freed in funcA itself", [][]uint64{{0xa2, 0xb1, 0x21, 0x11}}, 0},
		{"freed in loop, and in funcB", [][]uint64{{0x22, 0x11}, {0xb2, 0x21, 0x11}}, 2},
		{"freed by another thread", [][]uint64{{0xd1, 0x99}}, -1},
		{"no free stack", nil, 0},
	} {
		if got := endDepth(alloc, c.frees); got != c.want {
			t.Errorf("%s: end depth %d, want %d", c.name, got, c.want)
		}
	}
}
