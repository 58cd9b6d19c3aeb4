package scan

import (
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSubtract(t *testing.T) {
	roots := []span{{0x1000, 0x5000, "a", true}, {0x8000, 0x9000, "b", false}}
	holes := []span{{lo: 0x4000, hi: 0x6000}, {lo: 0x2000, hi: 0x2100}, {lo: 0x8000, hi: 0x9000}}
	got := subtract(roots, holes)
	want := []span{{0x1000, 0x2000, "a", true}, {0x2100, 0x4000, "a", true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("subtract = %#v, want %#v", got, want)
	}
	if got := subtract(roots, nil); !reflect.DeepEqual(got, roots) {
		t.Errorf("subtract with no holes = %#v", got)
	}
}

func TestRootRanges(t *testing.T) {
	const arena = 0x7f0000000000 // 64 MiB aligned
	maps := []mapping{
		{lo: 0x400000, hi: 0x401000, perms: "r-xp", path: "/bin/prog", inode: 7}, // code: never
		{lo: 0x600000, hi: 0x601000, perms: "rw-p", path: "/bin/prog", inode: 7}, // data: root
		{lo: 0x602000, hi: 0x700000, perms: "rw-p", path: "[heap]"},              // brk heap: never
		{lo: arena, hi: arena + 0x21000, perms: "rw-p"},                          // arena heap
		{lo: arena + 0x21000, hi: arena + 64<<20, perms: "---p"},                 //   its reserve
		{lo: 0x7f1000000000, hi: 0x7f1000100000, perms: "rw-p"},                  // mmapped chunk (holds a block)
		{lo: 0x7f2000000000, hi: 0x7f2000010000, perms: "rw-s", path: "/memfd:leakpath-1 (deleted)"},
		{lo: 0x7f3000000000, hi: 0x7f3000002000, perms: "rw-p", path: "/x/libleakpath.so", inode: 9},
		{lo: 0x7ffd00000000, hi: 0x7ffd00100000, perms: "rw-p", path: "[stack]"}, // from SP
		{lo: 0x7f4000000000, hi: 0x7f4000001000, perms: "rw-p"},                  // anonymous: root
	}
	starts := []uint64{arena + 0x900, 0x7f1000000010} // none in [heap]: its own rule leaves it out
	sp := uint64(0x7ffd00080000)
	got := rootRanges(maps, starts, []threadStack{{sp, sp - redZone}}, nil)
	want := []span{
		{0x600000, 0x601000, "/bin/prog", false},
		{sp - redZone, 0x7ffd00100000, "stack", true},
		{0x7f4000000000, 0x7f4000001000, "anonymous", true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rootRanges =\n%#v\nwant\n%#v", got, want)
	}
	// An arena heap is recognized without a block in it too.
	a, p := isArenaHeap(maps, 3, maps[3].lo, maps[3].hi), isArenaHeap(maps, 9, maps[9].lo, maps[9].hi)
	if !a || p {
		t.Errorf("isArenaHeap: arena %v, plain anonymous %v", a, p)
	}
}

// TestStackOf: the red zone is live for a thread stopped in its own code,
// not for one in a system call.
func TestStackOf(t *testing.T) {
	const sp = 0x7ffd00080008
	user := unix.PtraceRegs{Rsp: sp, Orig_rax: ^uint64(0)}
	if got := stackOf(&user); got != (threadStack{sp, sp - redZone}) {
		t.Errorf("stopped in its code: %#x", got)
	}
	inCall := unix.PtraceRegs{Rsp: sp, Orig_rax: unix.SYS_FUTEX}
	if got := stackOf(&inCall); got != (threadStack{sp, sp}) {
		t.Errorf("stopped in futex: %#x", got)
	}
}
