package steptrace

import (
	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"
)

// Data dependence: whether a conditional branch's flags come from data
// loaded out of given blocks (Options.Blocks). A branch that tests a
// block's own fields is a decision about that block; one that tests a
// random number or a counter is not, however well it predicts the
// block's fate. Within the branch's basic block, a register loaded from a
// block (or computed from one that was) is tainted, and so are the flags
// an instruction sets from a tainted operand or a load from a block.
// Anything not understood clears the taint: a doubt claims nothing.

// regFamily returns the 64-bit register (0 RAX ... 15 R15 in encoding
// order) an x86asm general register is part of, or -1.
func regFamily(r x86asm.Reg) int {
	switch {
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX)
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX)
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX)
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL)
	case r >= x86asm.AH && r <= x86asm.BH:
		return int(r - x86asm.AH)
	case r >= x86asm.SPB && r <= x86asm.R15B:
		return int(r-x86asm.SPB) + 4
	}
	return -1
}

// regValue returns a register's 64-bit value in regs.
func regValue(regs *unix.PtraceRegs, fam int) uint64 {
	return [16]uint64{regs.Rax, regs.Rcx, regs.Rdx, regs.Rbx, regs.Rsp, regs.Rbp, regs.Rsi, regs.Rdi,
		regs.R8, regs.R9, regs.R10, regs.R11, regs.R12, regs.R13, regs.R14, regs.R15}[fam]
}

// implicitWrites lists the registers instructions write without naming
// them (a conservative list: any other instruction writes only its
// first operand, if that is a register).
var implicitWrites = map[x86asm.Op][]int{
	x86asm.PUSH: {4}, x86asm.POP: {4}, x86asm.LEAVE: {4, 5},
	x86asm.MUL: {0, 2}, x86asm.IMUL: {0, 2}, x86asm.DIV: {0, 2}, x86asm.IDIV: {0, 2},
	x86asm.CQO: {2}, x86asm.CDQ: {2}, x86asm.CWD: {2}, x86asm.CDQE: {0}, x86asm.CWDE: {0}, x86asm.CBW: {0},
	x86asm.CPUID: {0, 1, 2, 3}, x86asm.RDTSC: {0, 2}, x86asm.RDTSCP: {0, 1, 2}, x86asm.SYSCALL: {0, 1, 11},
	x86asm.MOVSB: {1, 6, 7}, x86asm.MOVSW: {1, 6, 7}, x86asm.MOVSD: {1, 6, 7}, x86asm.MOVSQ: {1, 6, 7},
	x86asm.STOSB: {1, 7}, x86asm.STOSW: {1, 7}, x86asm.STOSD: {1, 7}, x86asm.STOSQ: {1, 7},
	x86asm.LODSB: {0, 1, 6}, x86asm.LODSW: {0, 1, 6}, x86asm.LODSD: {0, 1, 6}, x86asm.LODSQ: {0, 1, 6},
	x86asm.SCASB: {1, 7}, x86asm.SCASW: {1, 7}, x86asm.SCASD: {1, 7}, x86asm.SCASQ: {1, 7},
	x86asm.CMPSB: {1, 6, 7}, x86asm.CMPSW: {1, 6, 7}, x86asm.CMPSD: {1, 6, 7}, x86asm.CMPSQ: {1, 6, 7},
	x86asm.CMPXCHG: {0}, x86asm.XCHG: {}, x86asm.XADD: {},
}

// writes returns the registers inst writes (conservatively: more, not
// fewer).
func writes(inst x86asm.Inst) []int {
	var w []int
	switch inst.Op {
	case x86asm.CMP, x86asm.TEST, x86asm.NOP, x86asm.PUSH:
	case x86asm.XCHG, x86asm.XADD:
		for _, a := range inst.Args {
			if r, ok := a.(x86asm.Reg); ok && regFamily(r) >= 0 {
				w = append(w, regFamily(r))
			}
		}
	default:
		if r, ok := inst.Args[0].(x86asm.Reg); ok && regFamily(r) >= 0 {
			w = append(w, regFamily(r))
		}
	}
	return append(w, implicitWrites[inst.Op]...)
}

// flagOps set the flags from their operands (and write the result to
// the first, but for CMP and TEST).
var flagOps = map[x86asm.Op]bool{
	x86asm.CMP: true, x86asm.TEST: true, x86asm.ADD: true, x86asm.SUB: true, x86asm.AND: true,
	x86asm.OR: true, x86asm.XOR: true, x86asm.ADC: true, x86asm.SBB: true, x86asm.INC: true,
	x86asm.DEC: true, x86asm.NEG: true, x86asm.SHL: true, x86asm.SHR: true, x86asm.SAR: true,
}

// dataMask returns, for the instructions insts (at pcs, the last the
// conditional branch, the thread standing on it with regs), the set of
// blocks (bit k: blocks[k]) the branch's flags were computed from.
func dataMask(insts []x86asm.Inst, pcs []uint64, regs *unix.PtraceRegs, blocks [][2]uint64) uint8 {
	n := len(insts) - 1 // the branch
	if n < 0 || len(blocks) == 0 {
		return 0
	}
	// writtenAfter[i]: registers written by the instructions after i,
	// before the branch: an address through them cannot be computed from
	// the registers at the branch.
	writtenAfter := make([]uint16, n+1)
	for i := n - 1; i >= 0; i-- {
		writtenAfter[i] = writtenAfter[i+1]
		for _, f := range writes(insts[i+1]) {
			writtenAfter[i] |= 1 << f
		}
	}
	var taint [16]uint8
	var flags uint8
	operand := func(i int, a x86asm.Arg) uint8 {
		switch a := a.(type) {
		case x86asm.Reg:
			if f := regFamily(a); f >= 0 {
				return taint[f]
			}
		case x86asm.Mem:
			return memMask(a, insts[i], pcs[i], regs, writtenAfter[i], blocks)
		}
		return 0
	}
	for i := 0; i < n; i++ {
		inst := insts[i]
		var dst = -1
		if r, ok := inst.Args[0].(x86asm.Reg); ok {
			dst = regFamily(r)
		}
		switch op := inst.Op; {
		case op == x86asm.MOV || op == x86asm.MOVZX || op == x86asm.MOVSX || op == x86asm.MOVSXD:
			if dst >= 0 {
				taint[dst] = operand(i, inst.Args[1])
			}
		case op == x86asm.LEA:
			if dst >= 0 {
				m, _ := inst.Args[1].(x86asm.Mem)
				taint[dst] = operand(i, m.Base) | operand(i, m.Index)
			}
		case flagOps[op]:
			var m uint8
			for _, a := range inst.Args {
				if a != nil {
					m |= operand(i, a)
				}
			}
			if (op == x86asm.XOR || op == x86asm.SUB) && inst.Args[0] == inst.Args[1] {
				m = 0 // zeroing
			}
			flags = m
			if dst >= 0 && op != x86asm.CMP && op != x86asm.TEST {
				taint[dst] = m
			}
		case op == x86asm.NOP || op == x86asm.PUSH || op == x86asm.POP:
			// The flags stay.
			for _, f := range writes(inst) {
				taint[f] = 0
			}
		default:
			for _, f := range writes(inst) {
				taint[f] = 0
			}
			flags = 0
		}
	}
	return flags
}

// memMask returns the blocks a memory operand of inst (at pc) reads
// from, its address computed from the registers at the branch (none if
// a register it uses changes before the branch).
func memMask(m x86asm.Mem, inst x86asm.Inst, pc uint64, regs *unix.PtraceRegs, changed uint16, blocks [][2]uint64) uint8 {
	if m.Segment != 0 && m.Segment != x86asm.DS && m.Segment != x86asm.SS || inst.AddrSize != 64 {
		return 0
	}
	addr := uint64(m.Disp)
	for _, r := range []x86asm.Reg{m.Base, m.Index} {
		if r == 0 {
			continue
		}
		if r == x86asm.RIP {
			addr += pc + uint64(inst.Len)
			continue
		}
		f := regFamily(r)
		if f < 0 || changed&(1<<f) != 0 {
			return 0
		}
		v := regValue(regs, f)
		if r == m.Index {
			v *= uint64(m.Scale)
		}
		addr += v
	}
	var mask uint8
	for k, b := range blocks {
		if k < 8 && addr >= b[0] && addr < b[1] {
			mask |= 1 << k
		}
	}
	return mask
}
