package steptrace

import (
	"testing"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

// TestDataMask: a branch on a field of the block (compared in memory, or
// loaded into a register first: gcc -O1 and -O2 of `if (e->timed_out)`)
// depends on it; one on a value from elsewhere, on a load whose address
// register changed before the branch, or on a register zeroed since, does
// not.
func TestDataMask(t *testing.T) {
	const blk = 0x5000
	regs := unix.PtraceRegs{Rdi: blk, Rsi: 0x9000, Rax: 0}
	blocks := [][2]uint64{{0x7000, 0x7010}, {blk, blk + 16}}
	for _, c := range []struct {
		name string
		code []byte
		want uint8
	}{
		{"cmpl $0,0xc(%rdi); je", []byte{0x83, 0x7f, 0x0c, 0x00, 0x74, 0x09}, 2},
		{"mov 0xc(%rdi),%eax; test %eax,%eax; je", []byte{0x8b, 0x47, 0x0c, 0x85, 0xc0, 0x74, 0x09}, 2},
		{"mov 0xc(%rdi),%eax; add $1,%eax; mov %eax,%edx; cmp $3,%edx; jne", []byte{0x8b, 0x47, 0x0c, 0x83, 0xc0, 0x01, 0x89, 0xc2, 0x83, 0xfa, 0x03, 0x75, 0x05}, 2},
		{"test $7,%al; jne (a value from elsewhere)", []byte{0xa8, 0x07, 0x75, 0x05}, 0},
		{"cmpl $0,0x40(%rdi); je (past the block)", []byte{0x83, 0x7f, 0x40, 0x00, 0x74, 0x09}, 0},
		{"mov 0xc(%rdi),%eax; mov %rsi,%rdi; test %eax,%eax; je (address changed)", []byte{0x8b, 0x47, 0x0c, 0x48, 0x89, 0xf7, 0x85, 0xc0, 0x74, 0x09}, 0},
		{"mov 0xc(%rdi),%eax; xor %eax,%eax; test %eax,%eax; je (zeroed)", []byte{0x8b, 0x47, 0x0c, 0x31, 0xc0, 0x85, 0xc0, 0x74, 0x09}, 0},
		{"cmpl $0,0xc(%rdi); mov $1,%ecx; je (the flags stay)", []byte{0x83, 0x7f, 0x0c, 0x00, 0xb9, 0x01, 0x00, 0x00, 0x00, 0x74, 0x09}, 2},
		{"cmpl $0,0xc(%rdi); cpuid; je (not understood)", []byte{0x83, 0x7f, 0x0c, 0x00, 0x0f, 0xa2, 0x74, 0x09}, 0},
	} {
		var insts []x86asm.Inst
		var pcs []uint64
		for off := 0; off < len(c.code); {
			inst, err := x86asm.Decode(c.code[off:], 64)
			if err != nil {
				t.Fatalf("%s: decode at %d: %v", c.name, off, err)
			}
			insts, pcs = append(insts, inst), append(pcs, 0x1000+uint64(off))
			off += inst.Len
		}
		if !isCond(insts[len(insts)-1].Op) {
			t.Fatalf("%s: does not end in a conditional branch", c.name)
		}
		if got := dataMask(insts, pcs, &regs, blocks); got != c.want {
			t.Errorf("%s: data mask %b, want %b", c.name, got, c.want)
		}
	}
}
