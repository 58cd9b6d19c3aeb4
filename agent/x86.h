/*
 * x86.h - the x86-64 code the agent moves to patch a function's entry
 * (families.c): a length decoder, and the relocation of the first
 * instructions to a trampoline. Pure functions of the bytes, for the
 * agent and for the test that checks the decoder against objdump.
 */
#ifndef LP_X86_H
#define LP_X86_H

#include <stdint.h>
#include <string.h>

#define LP_JMP_LEN 5      /* jmp rel32: the bytes the entry gets */
#define LP_MOVED_MAX 32   /* the most bytes of an entry moved */

/* ---- moving the first instructions ---- */

/*
 * lp_x86 decodes the length of the x86-64 instruction at c (at most max
 * bytes readable): a table-driven length decoder, legacy, REX, VEX and
 * EVEX encodings. It fills what the patching needs to know of it; -1:
 * an instruction it does not know (the caller refuses the function).
 */
struct lp_insn {
	int len;
	int disp_at; /* offset of a displacement relative to the next instruction (ModRM), or -1 */
	int rel_at;  /* offset of a relative branch's operand, or -1 */
	int rel_len; /* its size: 1 or 4 */
	int flow;    /* a jump, call, return or other change of flow */
};

/* One-byte opcodes with a ModRM byte, as bits. */
static const uint32_t lp_modrm1[8] = {
	0x0f0f0f0f, /* 00-1f: 00-03 08-0b 10-13 18-1b */
	0x0f0f0f0f, /* 20-3f */
	0x00000000, /* 40-5f */
	0x00000a0c, /* 60-7f: 62 63 69 6b */
	0x00000000, /* 80-9f: see lp_has_modrm1 */
	0x00000000, /* a0-bf */
	0x00000000, /* c0-df: see lp_has_modrm1 */
	0xc0c00000, /* e0-ff: f6 f7 fe ff */
};

static int lp_has_modrm1(uint8_t op)
{
	if (op >= 0x80 && op <= 0x8f)
		return 1;
	if (op >= 0x90 && op <= 0x9f)
		return 0;
	if (op >= 0xc0 && op <= 0xdf)
		return op == 0xc0 || op == 0xc1 || (op >= 0xc4 && op <= 0xc7) || (op >= 0xd0 && op <= 0xd3) ||
		       op >= 0xd8;
	return lp_modrm1[op >> 5] >> (op & 31) & 1;
}

/* The 0F map's opcodes without a ModRM byte. */
static int lp_0f_no_modrm(uint8_t op)
{
	switch (op) {
	case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b: case 0x0e:
	case 0x30: case 0x31: case 0x32: case 0x33: case 0x34: case 0x35: case 0x37:
	case 0x77: case 0xa0: case 0xa1: case 0xa2: case 0xa8: case 0xa9: case 0xaa:
		return 1;
	}
	return (op >= 0x80 && op <= 0x8f) || (op >= 0xc8 && op <= 0xcf);
}

/* The 0F map's opcodes with an 8-bit immediate. */
static int lp_0f_imm8(uint8_t op)
{
	return (op >= 0x70 && op <= 0x73) || op == 0xa4 || op == 0xac || op == 0xba || op == 0xc2 ||
	       (op >= 0xc4 && op <= 0xc6);
}

static int lp_modrm_len(const uint8_t *c, int max, int i, struct lp_insn *in)
{
	if (i >= max)
		return -1;
	uint8_t m = c[i++];
	int mod = m >> 6, rm = m & 7;
	if (mod != 3 && rm == 4) {
		if (i >= max)
			return -1;
		uint8_t sib = c[i++];
		if (mod == 0 && (sib & 7) == 5)
			i += 4;
	}
	if (mod == 0 && rm == 5) {
		in->disp_at = i;
		i += 4;
	} else if (mod == 1) {
		i += 1;
	} else if (mod == 2) {
		i += 4;
	}
	return i;
}

static int lp_x86(const uint8_t *c, int max, struct lp_insn *in)
{
	int i = 0, opsz = 0, adsz = 0, rexw = 0;
	in->disp_at = in->rel_at = -1;
	in->rel_len = in->flow = 0;
	for (;; i++) {
		if (i >= max || i > 14)
			return -1;
		uint8_t b = c[i];
		if (b == 0x66)
			opsz = 1;
		else if (b == 0x67)
			adsz = 1;
		else if (!(b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e || b == 0x36 || b == 0x3e ||
			   b == 0x26 || b == 0x64 || b == 0x65))
			break;
	}
	if ((c[i] & 0xf0) == 0x40) {
		rexw = c[i] & 8;
		if (++i >= max)
			return -1;
	}
	uint8_t op = c[i++];
	if (op == 0xc4 || op == 0xc5 || op == 0x62) { /* VEX, EVEX */
		int map;
		if (op == 0xc5) {
			map = 1;
			i += 1;
		} else if (op == 0xc4) {
			if (i >= max)
				return -1;
			map = c[i] & 0x1f;
			i += 2;
		} else {
			if (i >= max)
				return -1;
			map = c[i] & 0x07;
			i += 3;
		}
		if (map < 1 || map > 3 || i >= max)
			return -1;
		i++; /* the opcode */
		i = lp_modrm_len(c, max, i, in);
		if (i < 0)
			return -1;
		if (map == 3)
			i += 1;
		in->len = i;
		return i <= max ? i : -1;
	}
	if (op == 0x0f) {
		if (i >= max)
			return -1;
		uint8_t op2 = c[i++];
		if (op2 == 0x38 || op2 == 0x3a) {
			i++; /* the third byte */
			i = lp_modrm_len(c, max, i, in);
			if (i < 0)
				return -1;
			if (op2 == 0x3a)
				i += 1;
		} else if (op2 >= 0x80 && op2 <= 0x8f) {
			in->rel_at = i;
			in->rel_len = 4;
			in->flow = 1;
			i += 4;
		} else if (lp_0f_no_modrm(op2)) {
			if (op2 == 0x05 || op2 == 0x0b || op2 == 0x07)
				in->flow = 1; /* syscall, ud2, sysret */
		} else {
			i = lp_modrm_len(c, max, i, in);
			if (i < 0)
				return -1;
			if (lp_0f_imm8(op2))
				i += 1;
			if (op2 == 0x0f)
				i += 1; /* 3DNow!: its opcode after the operands */
		}
		in->len = i;
		return i <= max ? i : -1;
	}
	switch (op) {
	case 0x06: case 0x07: case 0x0e: case 0x16: case 0x17: case 0x1e: case 0x1f: case 0x27: case 0x2f:
	case 0x37: case 0x3f: case 0x60: case 0x61: case 0x82: case 0x9a: case 0xd4: case 0xd5: case 0xd6:
	case 0xea: case 0xce:
		return -1; /* not in 64-bit mode */
	}
	int imm = 0;
	if (lp_has_modrm1(op)) {
		int reg = i < max ? (c[i] >> 3 & 7) : 0;
		i = lp_modrm_len(c, max, i, in);
		if (i < 0)
			return -1;
		switch (op) {
		case 0x69: case 0x81: case 0xc7:
			imm = opsz ? 2 : 4;
			break;
		case 0x6b: case 0x80: case 0x83: case 0xc0: case 0xc1: case 0xc6:
			imm = 1;
			break;
		case 0xf6:
			imm = reg < 2 ? 1 : 0;
			break;
		case 0xf7:
			imm = reg < 2 ? (opsz ? 2 : 4) : 0;
			break;
		case 0xff:
			if (reg >= 2 && reg <= 5)
				in->flow = 1; /* call, jmp (indirect) */
			break;
		}
		i += imm;
		in->len = i;
		return i <= max ? i : -1;
	}
	if (op < 0x40 && (op & 7) == 4)
		imm = 1;
	else if (op < 0x40 && (op & 7) == 5)
		imm = opsz ? 2 : 4;
	else if ((op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3) || op == 0xeb) {
		in->rel_at = i;
		in->rel_len = 1;
		in->flow = 1;
		imm = 1;
	} else if (op == 0xe8 || op == 0xe9) {
		in->rel_at = i;
		in->rel_len = 4;
		in->flow = 1;
		imm = 4;
	} else if (op == 0x6a || op == 0xa8 || (op >= 0xb0 && op <= 0xb7) || op == 0xcd || (op >= 0xe4 && op <= 0xe7))
		imm = 1;
	else if (op == 0x68 || op == 0xa9)
		imm = opsz ? 2 : 4;
	else if (op >= 0xb8 && op <= 0xbf)
		imm = rexw ? 8 : opsz ? 2 : 4;
	else if (op >= 0xa0 && op <= 0xa3)
		imm = adsz ? 4 : 8;
	else if (op == 0xc2 || op == 0xca) {
		imm = 2;
		in->flow = 1;
	} else if (op == 0xc8)
		imm = 3;
	else if (op == 0xc3 || op == 0xcb || op == 0xcf || op == 0xcc || op == 0xf4)
		in->flow = 1;
	i += imm;
	in->len = i;
	return i <= max ? i : -1;
}

#define LP_ABS_JMP_LEN 14 /* jmp *0(%rip); .quad target */

/* lp_branches_into decodes the function at f (n bytes) from its start
 * and reports whether it may branch into (f, f + k), or could not be
 * decoded whole (then it may: refused). */
static int lp_branches_into(const uint8_t *f, size_t n, int k)
{
	size_t i = 0;
	while (i < n) {
		struct lp_insn in;
		int max = (int)(n - i < 15 ? n - i : 15);
		if (lp_x86(f + i, max, &in) <= 0)
			return 1;
		if (in.rel_at >= 0) {
			int64_t rel;
			if (in.rel_len == 1) {
				rel = (int8_t)f[i + (size_t)in.rel_at];
			} else {
				int32_t r32;
				memcpy(&r32, f + i + (size_t)in.rel_at, 4);
				rel = r32;
			}
			int64_t target = (int64_t)i + in.len + rel;
			if (target > 0 && target < k)
				return 1;
		}
		i += (size_t)in.len;
	}
	return 0;
}

/*
 * lp_relocate writes to out (room for LP_TRAMP_MAX bytes) the
 * instructions of entry that the jump overwrites, to run at address at:
 * displacements relative to the instruction pointer are relocated, a
 * relative jump or call is rewritten with a 32-bit offset to its same
 * target. Returns the bytes written, and in *moved the bytes of entry
 * they replace; -1 when they cannot be moved (an instruction this file
 * does not decode, a loop or jrcxz, a branch into the moved bytes, a
 * target out of reach). at 0: only judge.
 */
#define LP_TRAMP_MAX 96

static int lp_rel32(uintptr_t end, uintptr_t target, int32_t *out)
{
	intptr_t d = (intptr_t)(target - end);
	if (d < INT32_MIN || d > INT32_MAX)
		return -1;
	*out = (int32_t)d;
	return 0;
}

static int lp_relocate(const uint8_t *entry, size_t size, uintptr_t at, uint8_t *out, int *moved)
{
	int k = 0, o = 0, nt = 0;
	uintptr_t targets[8];
	while (k < LP_JMP_LEN) {
		struct lp_insn in;
		int max = (int)(size - (size_t)k < 15 ? size - (size_t)k : 15);
		if (max <= 0 || lp_x86(entry + k, max, &in) <= 0)
			return -1;
		const uint8_t *c = entry + k;
		uintptr_t end = (uintptr_t)entry + (uintptr_t)k + (uintptr_t)in.len;
		if (o + 16 > LP_TRAMP_MAX)
			return -1;
		if (in.rel_at >= 0) {
			int64_t rel;
			if (in.rel_len == 1) {
				rel = (int8_t)c[in.rel_at];
			} else {
				int32_t r32;
				memcpy(&r32, c + in.rel_at, 4);
				rel = r32;
			}
			uintptr_t target = end + (uintptr_t)rel;
			if (target - (uintptr_t)entry < LP_MOVED_MAX && nt < 8)
				targets[nt++] = target; /* judged once the moved bytes are known */
			uint8_t op = c[in.rel_at - 1];
			int32_t r;
			if (in.rel_len == 1 && op >= 0x70 && op <= 0x7f) {
				out[o] = 0x0f;
				out[o + 1] = (uint8_t)(0x80 + (op - 0x70));
				if (at && lp_rel32(at + (uintptr_t)o + 6, target, &r) != 0)
					return -1;
				if (at)
					memcpy(out + o + 2, &r, 4);
				o += 6;
			} else if (in.rel_len == 1 && op == 0xeb) {
				out[o] = 0xe9;
				if (at && lp_rel32(at + (uintptr_t)o + 5, target, &r) != 0)
					return -1;
				if (at)
					memcpy(out + o + 1, &r, 4);
				o += 5;
			} else if (in.rel_len == 4 && in.rel_at + 4 == in.len) {
				/* jmp, call, jcc rel32: the same bytes, a new offset */
				memcpy(out + o, c, (size_t)in.len);
				if (at && lp_rel32(at + (uintptr_t)o + (uintptr_t)in.len, target, &r) != 0)
					return -1;
				if (at)
					memcpy(out + o + in.rel_at, &r, 4);
				o += in.len;
			} else {
				return -1; /* loop, jrcxz */
			}
		} else {
			memcpy(out + o, c, (size_t)in.len);
			if (in.disp_at >= 0) {
				int32_t d, r;
				memcpy(&d, c + in.disp_at, 4);
				uintptr_t target = end + (uintptr_t)(intptr_t)d;
				if (at && lp_rel32(at + (uintptr_t)o + (uintptr_t)in.len, target, &r) != 0)
					return -1;
				if (at)
					memcpy(out + o + in.disp_at, &r, 4);
			}
			o += in.len;
		}
		k += in.len;
	}
	if (k > LP_MOVED_MAX)
		return -1;
	for (int i = 0; i < nt; i++)
		if (targets[i] - (uintptr_t)entry < (uintptr_t)k)
			return -1; /* into the bytes being moved */
	*moved = k;
	return o;
}

/* lp_patchable says whether the function at entry (size bytes) can be
 * patched: 0, or -1. */
static int lp_patchable(const uint8_t *entry, size_t size)
{
	uint8_t buf[LP_TRAMP_MAX];
	int k;
	if (size < LP_JMP_LEN || lp_relocate(entry, size, 0, buf, &k) < 0)
		return -1;
	return lp_branches_into(entry, size, k) ? -1 : 0;
}

#endif
