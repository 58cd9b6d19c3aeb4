// Package ctorsite reads the machine code after a call to operator new
// (x86-64) and finds the function the new object is passed to first as
// its `this` (rdi): at a `new T(...)` site, T's constructor.
//
// From the return address on, it follows where the result (rax) is
// copied by register moves (and spills to the stack frame and reloads,
// as -O0 code does), and stops at the first call: if rdi then holds the
// result, that call's target is returned. Another write to every copy,
// a jump or a return ends the search with nothing.
package ctorsite

import (
	"golang.org/x/arch/x86/x86asm"
)

// MaxInsts bounds the instructions decoded after the return address.
const MaxInsts = 24

// CodeBytes is how much code a caller should pass (MaxInsts of the
// longest instructions would be more; calls come sooner).
const CodeBytes = 128

// Target returns the absolute address of the call that receives
// operator new's result as its first argument, decoding code (the bytes
// at pc, the return address of the call to operator new).
func Target(code []byte, pc uint64) (uint64, bool) {
	holds := map[x86asm.Reg]bool{x86asm.RAX: true} // registers with the result
	slots := map[int64]bool{}                      // rbp/rsp-relative slots with it
	for n := 0; n < MaxInsts && len(code) > 0; n++ {
		in, err := x86asm.Decode(code, 64)
		if err != nil || in.Len == 0 {
			return 0, false
		}
		next := pc + uint64(in.Len)
		switch in.Op {
		case x86asm.CALL:
			rel, ok := in.Args[0].(x86asm.Rel)
			if !ok || !holds[x86asm.RDI] {
				return 0, false
			}
			return next + uint64(int64(rel)), true
		case x86asm.JMP, x86asm.RET, x86asm.JE, x86asm.JNE:
			// (A branch on the result being null comes before a
			// constructor at some sites: not followed.)
			return 0, false
		case x86asm.MOV:
			dst, src := in.Args[0], in.Args[1]
			has := false
			switch s := src.(type) {
			case x86asm.Reg:
				has = holds[s]
			case x86asm.Mem:
				has = slot(s) != nil && slots[*slot(s)]
			}
			switch d := dst.(type) {
			case x86asm.Reg:
				holds[full(d)] = has && d == full(d) // a narrower copy cuts the pointer
			case x86asm.Mem:
				if k := slot(d); k != nil {
					slots[*k] = has
				}
			}
		default:
			// Any other write to a register that held the result.
			if r, ok := in.Args[0].(x86asm.Reg); ok {
				holds[full(r)] = false
			}
		}
		pc, code = next, code[in.Len:]
	}
	return 0, false
}

// slot returns the frame offset of a 64-bit stack slot operand
// ([rbp+d], [rsp+d]), or nil.
func slot(m x86asm.Mem) *int64 {
	if m.Index != 0 || (m.Base != x86asm.RBP && m.Base != x86asm.RSP) {
		return nil
	}
	k := m.Disp
	if m.Base == x86asm.RSP {
		k += 1 << 40 // apart from rbp's
	}
	return &k
}

// full returns the 64-bit register a narrower one is part of (writing
// eax, ax or al changes rax).
func full(r x86asm.Reg) x86asm.Reg {
	switch {
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return x86asm.RAX + (r - x86asm.EAX)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return x86asm.RAX + (r - x86asm.AX)
	case r >= x86asm.AL && r <= x86asm.BL:
		return x86asm.RAX + (r - x86asm.AL)
	case r >= x86asm.AH && r <= x86asm.BH:
		return x86asm.RAX + (r - x86asm.AH)
	case r >= x86asm.SPB && r <= x86asm.DIB:
		return x86asm.RSP + (r - x86asm.SPB)
	case r >= x86asm.R8B && r <= x86asm.R15B:
		return x86asm.R8 + (r - x86asm.R8B)
	}
	return r
}
