package ctorsite

import (
	"encoding/binary"
	"testing"
)

// call returns a call rel32 to target from the instruction at pc.
func call(pc, target uint64) []byte {
	return binary.LittleEndian.AppendUint32([]byte{0xe8}, uint32(int32(target-(pc+5))))
}

func TestTarget(t *testing.T) {
	const pc, ctor = 0x401000, 0x401800
	seq := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return append(b, call(pc+uint64(len(b)), ctor)...)
	}
	movRbxRax := []byte{0x48, 0x89, 0xc3}    // mov rbx, rax
	movRdiRbx := []byte{0x48, 0x89, 0xdf}    // mov rdi, rbx
	movRdiRax := []byte{0x48, 0x89, 0xc7}    // mov rdi, rax
	spill := []byte{0x48, 0x89, 0x45, 0xe8}  // mov [rbp-0x18], rax
	reload := []byte{0x48, 0x8b, 0x45, 0xe8} // mov rax, [rbp-0x18]
	movEdi1 := []byte{0xbf, 1, 0, 0, 0}      // mov edi, 1
	xorEax := []byte{0x31, 0xc0}             // xor eax, eax
	movRaxRbx := []byte{0x48, 0x89, 0xd8}    // mov rax, rbx
	for _, c := range []struct {
		name string
		code []byte
		ok   bool
	}{
		{"-O0: via rbx", seq(movRbxRax, movRdiRbx), true},
		{"-O2: straight", seq(movRdiRax), true},
		{"-O0: spilled and reloaded", seq(spill, xorEax, reload, movRdiRax), true},
		{"rdi holds something else", seq(movRbxRax, movEdi1), false},
		{"rdi overwritten after", seq(movRdiRax, movEdi1), false},
		{"the copy clobbered first", seq(movRbxRax, xorEax, movRaxRbx, movRdiRax), true},
		{"nothing copied to rdi", seq(), false},
		{"a jump first", append([]byte{0xeb, 0x00}, seq(movRdiRax)...), false},
		{"cut short", []byte{0x48, 0x89}, false},
	} {
		got, ok := Target(c.code, pc)
		if ok != c.ok || (ok && got != ctor) {
			t.Errorf("%s: %#x %v, want %v", c.name, got, ok, c.ok)
		}
	}
}

// FuzzTarget: any bytes give an answer, never a panic.
func FuzzTarget(f *testing.F) {
	f.Add([]byte{0x48, 0x89, 0xc7, 0xe8, 0, 0, 0, 0}, uint64(0x401000))
	f.Fuzz(func(t *testing.T, code []byte, pc uint64) {
		Target(code, pc)
	})
}
