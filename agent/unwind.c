/*
 * unwind.c - call stacks of the target's threads, fast and without help
 * from the code being unwound.
 *
 * For each return address the rule that recovers the caller's frame (where
 * the CFA is, where the return address and the saved rbp are) is computed
 * once from the module's .eh_frame (through .eh_frame_hdr's sorted table)
 * and kept in a per-thread direct-mapped cache. Code built with frame
 * pointers and code without them cost the same once cached. Code without
 * unwind tables (JIT, some assembly) falls back to the frame-pointer chain.
 *
 * Every stack read is bounds-checked against the thread's stack, and each
 * step must move the stack pointer up: a broken frame ends the stack, it
 * never faults.
 */
#include "agent.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

/* A rule packed in 64 bits: how to get from a frame to its caller's. */
enum {
	LP_CFA_RSP = 0,       /* CFA = rsp + cfa_off */
	LP_CFA_RBP = 1,       /* CFA = rbp + cfa_off */
	LP_CFA_DEREF_RBP = 2, /* CFA = *(rbp + cfa_off) (gcc's stack realignment) */
	LP_RBP_SAME = 0 << 2,
	LP_RBP_AT_CFA = 1 << 2,  /* caller's rbp = *(CFA + rbp_off) */
	LP_RBP_AT_RBP = 2 << 2,  /* caller's rbp = *(rbp + rbp_off) */
	LP_RBP_LOST = 3 << 2,
	LP_R_VALID = 1 << 4,
	LP_R_END = 1 << 5,       /* outermost frame: the return address is undefined */
	LP_R_FP = 1 << 6,        /* no unwind info: follow the frame-pointer chain */
};

struct lp_rule {
	int32_t cfa_off;
	int16_t rbp_off;
	int8_t ra_off;
	uint8_t how;
};

#define LP_UC_BITS 12
#define LP_UC_SIZE (1u << LP_UC_BITS)

struct lp_ucent {
	uintptr_t pc;
	struct lp_rule r;
};

struct lp_ucache {
	uint64_t modgen;
	struct lp_ucent e[LP_UC_SIZE];
};

struct lp_ucache *lp_ucache_new(void)
{
	return lp_mmap(sizeof(struct lp_ucache));
}

/* ---- reading .eh_frame ---- */

struct lp_rd {
	const uint8_t *p, *end;
	int bad;
};

static uint64_t lp_uleb(struct lp_rd *r)
{
	uint64_t v = 0;
	unsigned shift = 0;
	while (r->p < r->end) {
		uint8_t b = *r->p++;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80))
			return v;
	}
	r->bad = 1;
	return 0;
}

static int64_t lp_sleb(struct lp_rd *r)
{
	int64_t v = 0;
	unsigned shift = 0;
	uint8_t b = 0;
	while (r->p < r->end) {
		b = *r->p++;
		if (shift < 64)
			v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				v |= -((int64_t)1 << shift);
			return v;
		}
	}
	r->bad = 1;
	return 0;
}

static uint64_t lp_fixed(struct lp_rd *r, unsigned n)
{
	if ((size_t)(r->end - r->p) < n) {
		r->bad = 1;
		return 0;
	}
	uint64_t v = 0;
	memcpy(&v, r->p, n); /* little endian */
	r->p += n;
	return v;
}

enum {
	DW_EH_PE_omit = 0xff,
	DW_EH_PE_pcrel = 0x10,
	DW_EH_PE_datarel = 0x30,
	DW_EH_PE_indirect = 0x80,
};

/* lp_enc reads a pointer in DWARF EH encoding enc. datarel is the base of
 * DW_EH_PE_datarel (the start of .eh_frame_hdr). */
static uintptr_t lp_enc(struct lp_rd *r, uint8_t enc, uintptr_t datarel)
{
	if (enc == DW_EH_PE_omit)
		return 0;
	uintptr_t base = 0;
	switch (enc & 0x70) {
	case 0:
		break;
	case DW_EH_PE_pcrel:
		base = (uintptr_t)r->p;
		break;
	case DW_EH_PE_datarel:
		base = datarel;
		break;
	default:
		r->bad = 1;
		return 0;
	}
	uint64_t v;
	switch (enc & 0x0f) {
	case 0x00: v = lp_fixed(r, 8); break;
	case 0x01: v = lp_uleb(r); break;
	case 0x02: v = lp_fixed(r, 2); break;
	case 0x03: v = lp_fixed(r, 4); break;
	case 0x04: v = lp_fixed(r, 8); break;
	case 0x09: v = (uint64_t)lp_sleb(r); break;
	case 0x0a: v = (uint64_t)(int64_t)(int16_t)lp_fixed(r, 2); break;
	case 0x0b: v = (uint64_t)(int64_t)(int32_t)lp_fixed(r, 4); break;
	case 0x0c: v = lp_fixed(r, 8); break;
	default:
		r->bad = 1;
		return 0;
	}
	v += base;
	if ((enc & DW_EH_PE_indirect) && v)
		v = *(const uintptr_t *)v;
	return (uintptr_t)v;
}

/* lp_skip_enc skips a pointer in encoding enc without reading through it
 * (a personality routine's address, which we never need). */
static void lp_skip_enc(struct lp_rd *r, uint8_t enc)
{
	if (enc == DW_EH_PE_omit)
		return;
	if ((enc & 0x70) == 0x50) /* DW_EH_PE_aligned */
		r->p = (const uint8_t *)(((uintptr_t)r->p + 7) & ~(uintptr_t)7);
	switch (enc & 0x0f) {
	case 0x01: lp_uleb(r); break;
	case 0x09: lp_sleb(r); break;
	case 0x02: case 0x0a: lp_fixed(r, 2); break;
	case 0x03: case 0x0b: lp_fixed(r, 4); break;
	case 0x00: case 0x04: case 0x0c: lp_fixed(r, 8); break;
	default: r->bad = 1;
	}
}

/* A register rule while interpreting call frame instructions. */
enum { R_UNDEF, R_SAME, R_OFFSET, R_AT_RBP, R_OTHER };

struct lp_regrule {
	uint8_t kind;
	int64_t off;
};

struct lp_cfstate {
	uint64_t cfa_reg;
	int64_t cfa_off;
	int cfa_deref_rbp; /* CFA = *(rbp + cfa_off) */
	int cfa_bad;       /* an expression we do not follow */
	struct lp_regrule rbp, ra;
	struct lp_regrule cs[5]; /* rbx, r12-r15: only lp_ctx_unwind uses them */
};

#define LP_REMEMBER 8

struct lp_cie {
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	int has_aug;
	const uint8_t *insns, *insns_end;
};

static struct lp_regrule *lp_reg(struct lp_cfstate *s, uint64_t reg, struct lp_regrule *scratch)
{
	if (reg == 6)
		return &s->rbp;
	if (reg == 16)
		return &s->ra;
	if (reg == 3)
		return &s->cs[0];
	if (reg >= 12 && reg <= 15)
		return &s->cs[reg - 11];
	return scratch;
}

/* lp_parse_expr recognises the expressions gcc emits for stack
 * realignment: "DW_OP_breg6 N" and "DW_OP_breg6 N; DW_OP_deref". */
static int lp_parse_expr(const uint8_t *p, uint64_t len, int64_t *off, int *deref)
{
	struct lp_rd r = {.p = p, .end = p + len};
	if (len < 2 || *r.p++ != 0x76) /* DW_OP_breg6 */
		return -1;
	*off = lp_sleb(&r);
	*deref = 0;
	if (r.p < r.end && *r.p == 0x06) { /* DW_OP_deref */
		r.p++;
		*deref = 1;
	}
	return r.bad || r.p != r.end ? -1 : 0;
}

/*
 * lp_run executes call frame instructions from [p, end) until the location
 * passes target; init is the state after the CIE's initial instructions
 * (for DW_CFA_restore), or NULL while running those.
 */
static int lp_run(const struct lp_cie *c, const uint8_t *p, const uint8_t *end, uintptr_t loc,
		  uintptr_t target, struct lp_cfstate *s, const struct lp_cfstate *init)
{
	struct lp_rd r = {.p = p, .end = end};
	struct lp_cfstate stack[LP_REMEMBER];
	int sp = 0;
	struct lp_regrule scratch;
	while (r.p < r.end && !r.bad) {
		uint8_t op = *r.p++;
		uint8_t hi = op & 0xc0, low = op & 0x3f;
		uint64_t reg, delta;
		int64_t off;
		struct lp_regrule *rr;
		if (hi == 0x40) { /* advance_loc */
			delta = low * c->code_align;
			if (loc + delta > target)
				return 0;
			loc += delta;
			continue;
		}
		if (hi == 0x80) { /* offset */
			rr = lp_reg(s, low, &scratch);
			rr->kind = R_OFFSET;
			rr->off = (int64_t)lp_uleb(&r) * c->data_align;
			continue;
		}
		if (hi == 0xc0) { /* restore */
			if (init)
				*lp_reg(s, low, &scratch) = *lp_reg((struct lp_cfstate *)init, low, &scratch);
			continue;
		}
		switch (op) {
		case 0x00: /* nop */
			break;
		case 0x01: /* set_loc */
			loc = lp_enc(&r, c->fde_enc, 0);
			if (loc > target)
				return 0;
			break;
		case 0x02:
		case 0x03:
		case 0x04: /* advance_loc1/2/4 */
			delta = lp_fixed(&r, op == 0x02 ? 1 : op == 0x03 ? 2 : 4) * c->code_align;
			if (loc + delta > target)
				return 0;
			loc += delta;
			break;
		case 0x05: /* offset_extended */
			reg = lp_uleb(&r);
			rr = lp_reg(s, reg, &scratch);
			rr->kind = R_OFFSET;
			rr->off = (int64_t)lp_uleb(&r) * c->data_align;
			break;
		case 0x06: /* restore_extended */
			reg = lp_uleb(&r);
			if (init)
				*lp_reg(s, reg, &scratch) = *lp_reg((struct lp_cfstate *)init, reg, &scratch);
			break;
		case 0x07: /* undefined */
			lp_reg(s, lp_uleb(&r), &scratch)->kind = R_UNDEF;
			break;
		case 0x08: /* same_value */
			lp_reg(s, lp_uleb(&r), &scratch)->kind = R_SAME;
			break;
		case 0x09: /* register */
			reg = lp_uleb(&r);
			lp_uleb(&r);
			lp_reg(s, reg, &scratch)->kind = R_OTHER;
			break;
		case 0x0a: /* remember_state */
			if (sp >= LP_REMEMBER)
				return -1;
			stack[sp++] = *s;
			break;
		case 0x0b: /* restore_state */
			if (sp <= 0)
				return -1;
			*s = stack[--sp];
			break;
		case 0x0c: /* def_cfa */
			s->cfa_reg = lp_uleb(&r);
			s->cfa_off = (int64_t)lp_uleb(&r);
			s->cfa_deref_rbp = s->cfa_bad = 0;
			break;
		case 0x0d: /* def_cfa_register */
			s->cfa_reg = lp_uleb(&r);
			s->cfa_deref_rbp = s->cfa_bad = 0;
			break;
		case 0x0e: /* def_cfa_offset */
			s->cfa_off = (int64_t)lp_uleb(&r);
			break;
		case 0x0f: { /* def_cfa_expression */
			uint64_t len = lp_uleb(&r);
			if (len > (uint64_t)(r.end - r.p))
				return -1;
			int deref;
			if (lp_parse_expr(r.p, len, &off, &deref) == 0 && deref) {
				s->cfa_deref_rbp = 1;
				s->cfa_off = off;
				s->cfa_bad = 0;
			} else {
				s->cfa_bad = 1;
			}
			r.p += len;
			break;
		}
		case 0x10:   /* expression */
		case 0x16: { /* val_expression */
			reg = lp_uleb(&r);
			uint64_t len = lp_uleb(&r);
			if (len > (uint64_t)(r.end - r.p))
				return -1;
			int deref;
			rr = lp_reg(s, reg, &scratch);
			if (op == 0x10 && lp_parse_expr(r.p, len, &off, &deref) == 0 && !deref) {
				rr->kind = R_AT_RBP;
				rr->off = off;
			} else {
				rr->kind = R_OTHER;
			}
			r.p += len;
			break;
		}
		case 0x11: /* offset_extended_sf */
			reg = lp_uleb(&r);
			rr = lp_reg(s, reg, &scratch);
			rr->kind = R_OFFSET;
			rr->off = lp_sleb(&r) * c->data_align;
			break;
		case 0x12: /* def_cfa_sf */
			s->cfa_reg = lp_uleb(&r);
			s->cfa_off = lp_sleb(&r) * c->data_align;
			s->cfa_deref_rbp = s->cfa_bad = 0;
			break;
		case 0x13: /* def_cfa_offset_sf */
			s->cfa_off = lp_sleb(&r) * c->data_align;
			break;
		case 0x14: /* val_offset */
		case 0x15: /* val_offset_sf */
			reg = lp_uleb(&r);
			if (op == 0x14)
				lp_uleb(&r);
			else
				lp_sleb(&r);
			lp_reg(s, reg, &scratch)->kind = R_OTHER;
			break;
		case 0x2e: /* GNU_args_size */
			lp_uleb(&r);
			break;
		case 0x2f: /* GNU_negative_offset_extended */
			reg = lp_uleb(&r);
			rr = lp_reg(s, reg, &scratch);
			rr->kind = R_OFFSET;
			rr->off = -(int64_t)lp_uleb(&r) * c->data_align;
			break;
		default:
			return -1;
		}
	}
	return r.bad ? -1 : 0;
}

/* lp_read_cie parses the CIE at p; returns 0 on success. */
static int lp_read_cie(const uint8_t *p, struct lp_cie *c)
{
	struct lp_rd r = {.p = p, .end = p + 16};
	uint64_t len = lp_fixed(&r, 4);
	if (len == 0 || len == 0xffffffffu)
		return -1;
	r.end = r.p + len;
	if (lp_fixed(&r, 4) != 0) /* CIE id */
		return -1;
	uint8_t version = (uint8_t)lp_fixed(&r, 1);
	if (version != 1 && version != 3)
		return -1;
	const char *aug = (const char *)r.p;
	size_t alen = strnlen(aug, (size_t)(r.end - r.p));
	if (alen == (size_t)(r.end - r.p))
		return -1;
	r.p += alen + 1;
	if (aug[0] == 'e' && aug[1] == 'h')
		return -1;
	c->code_align = lp_uleb(&r);
	c->data_align = lp_sleb(&r);
	c->ra_reg = version == 1 ? lp_fixed(&r, 1) : lp_uleb(&r);
	c->fde_enc = 0; /* absptr */
	c->has_aug = aug[0] == 'z';
	if (c->has_aug) {
		uint64_t l = lp_uleb(&r);
		const uint8_t *aend = r.p + l;
		int stop = 0;
		for (const char *a = aug + 1; *a && !r.bad && !stop; a++) {
			switch (*a) {
			case 'R':
				c->fde_enc = (uint8_t)lp_fixed(&r, 1);
				break;
			case 'L':
				lp_fixed(&r, 1);
				break;
			case 'P':
				lp_skip_enc(&r, (uint8_t)lp_fixed(&r, 1));
				break;
			case 'S':
			case 'B':
			case 'G':
				break;
			default:
				/* Unknown: the augmentation length lets us skip the
				 * rest, but an R after it would be lost. */
				stop = 1;
				break;
			}
		}
		if (aend > r.end)
			return -1;
		r.p = aend;
	}
	if (r.bad || c->ra_reg != 16)
		return -1;
	c->insns = r.p;
	c->insns_end = r.end;
	return 0;
}

/* lp_find_fde looks pc up in .eh_frame_hdr's binary search table. */
static const uint8_t *lp_find_fde(const uint8_t *hdr, uintptr_t pc)
{
	if (hdr[0] != 1)
		return NULL;
	uint8_t fde_count_enc = hdr[2], table_enc = hdr[3];
	struct lp_rd r = {.p = hdr + 4, .end = hdr + 4 + 16};
	lp_enc(&r, hdr[1], (uintptr_t)hdr); /* eh_frame_ptr */
	uintptr_t count = lp_enc(&r, fde_count_enc, (uintptr_t)hdr);
	if (r.bad || table_enc != (DW_EH_PE_datarel | 0x0b) || count == 0)
		return NULL;
	const int32_t *tab = (const int32_t *)r.p;
	uintptr_t lo = 0, hi = count;
	while (lo < hi) {
		uintptr_t mid = (lo + hi) / 2;
		if ((uintptr_t)hdr + tab[2 * mid] <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	return hdr + tab[2 * (lo - 1) + 1];
}

/* lp_cfi computes the call frame state s at return address pc (the call
 * is at pc-1) from its module's .eh_frame. Returns 0, or -1 when pc has
 * no unwind information we follow. */
static int lp_cfi(struct lp_thread *t, uintptr_t pc, struct lp_cfstate *s)
{
	uintptr_t target = pc - 1;
	const struct lp_module *m = lp_module_of(target);
	if (!m && t->state == 1) {
		lp_modules_refresh(t, 0);
		m = lp_module_of(target);
	}
	if (!m || !m->eh_hdr)
		return -1;
	const uint8_t *fde = lp_find_fde(m->eh_hdr, target);
	if (!fde)
		return -1;
	struct lp_rd r = {.p = fde, .end = fde + 8};
	uint64_t len = lp_fixed(&r, 4);
	if (len == 0 || len == 0xffffffffu)
		return -1;
	r.end = r.p + len;
	const uint8_t *idp = r.p;
	uint32_t cie_off = (uint32_t)lp_fixed(&r, 4);
	struct lp_cie c;
	if (cie_off == 0 || lp_read_cie(idp - cie_off, &c) != 0)
		return -1;
	uintptr_t start = lp_enc(&r, c.fde_enc, 0);
	uintptr_t range = lp_enc(&r, (uint8_t)(c.fde_enc & 0x0f), 0);
	if (r.bad || target < start || target >= start + range)
		return -1;
	if (c.has_aug) {
		uint64_t l = lp_uleb(&r);
		r.p += l;
		if (r.p > r.end)
			return -1;
	}
	struct lp_cfstate init = {.cfa_reg = 7, .cfa_off = 8, .rbp = {R_SAME, 0}, .ra = {R_OFFSET, -8}};
	for (int i = 0; i < 5; i++)
		init.cs[i].kind = R_SAME;
	if (lp_run(&c, c.insns, c.insns_end, start, target, &init, NULL) != 0)
		return -1;
	*s = init;
	if (lp_run(&c, r.p, r.end, start, target, s, &init) != 0)
		return -1;
	return 0;
}

/* lp_compute finds the rule for return address pc (the call is at pc-1). */
static struct lp_rule lp_compute(struct lp_thread *t, uintptr_t pc)
{
	struct lp_rule bad = {.how = LP_R_VALID | LP_R_FP};
	struct lp_cfstate s;
	if (lp_cfi(t, pc, &s) != 0)
		return bad;

	struct lp_rule out = {0};
	if (s.ra.kind == R_UNDEF) {
		out.how = LP_R_VALID | LP_R_END;
		return out;
	}
	if (s.cfa_bad || s.ra.kind != R_OFFSET || s.ra.off < -128 || s.ra.off > 127)
		return (struct lp_rule){.how = LP_R_VALID | LP_R_END};
	if (s.cfa_deref_rbp)
		out.how = LP_CFA_DEREF_RBP;
	else if (s.cfa_reg == 7)
		out.how = LP_CFA_RSP;
	else if (s.cfa_reg == 6)
		out.how = LP_CFA_RBP;
	else
		return (struct lp_rule){.how = LP_R_VALID | LP_R_END};
	if (s.cfa_off < INT32_MIN || s.cfa_off > INT32_MAX)
		return (struct lp_rule){.how = LP_R_VALID | LP_R_END};
	out.cfa_off = (int32_t)s.cfa_off;
	out.ra_off = (int8_t)s.ra.off;
	switch (s.rbp.kind) {
	case R_UNDEF:
	case R_SAME:
		out.how |= LP_RBP_SAME;
		break;
	case R_OFFSET:
		if (s.rbp.off < INT16_MIN || s.rbp.off > INT16_MAX)
			out.how |= LP_RBP_LOST;
		else {
			out.how |= LP_RBP_AT_CFA;
			out.rbp_off = (int16_t)s.rbp.off;
		}
		break;
	case R_AT_RBP:
		if (s.rbp.off < INT16_MIN || s.rbp.off > INT16_MAX)
			out.how |= LP_RBP_LOST;
		else {
			out.how |= LP_RBP_AT_RBP;
			out.rbp_off = (int16_t)s.rbp.off;
		}
		break;
	default:
		out.how |= LP_RBP_LOST;
	}
	out.how |= LP_R_VALID;
	return out;
}

static inline struct lp_rule lp_rule_for(struct lp_thread *t, struct lp_ucache *uc, uintptr_t pc,
					 int nocache)
{
	if (LP_UNLIKELY(!uc))
		return lp_compute(t, pc); /* an exiting thread: no cache */
	uint32_t i = (uint32_t)(((uint64_t)pc * 0x9e3779b97f4a7c15ull) >> (64 - LP_UC_BITS));
	struct lp_ucent *e = &uc->e[i];
	if (LP_LIKELY(e->pc == pc))
		return e->r;
	struct lp_rule r = lp_compute(t, pc);
	if (nocache)
		return r;
	e->pc = pc;
	e->r = r;
	return r;
}

/*
 * lp_unwind writes the return addresses of the calling thread's stack into
 * out, innermost first, starting with the caller of the hook whose frame is
 * fp. Returns how many it wrote. nocache: read the rule cache but do not
 * write it (a signal handler interrupted this thread inside it).
 */
/* lp_note adds slot a, holding v, to the trail. */
static inline void lp_note(struct lp_trail *tr, uintptr_t a, uintptr_t v)
{
	if (tr && tr->n >= 0) {
		if (tr->n < LP_TRAIL_MAX) {
			tr->addr[tr->n] = a;
			tr->val[tr->n] = v;
			tr->n++;
		} else {
			tr->n = -1;
		}
	}
}

/* lp_read reads stack slot a, noting it in the trail. */
static inline uintptr_t lp_read(struct lp_trail *tr, uintptr_t a)
{
	uintptr_t v = *(const uintptr_t *)a;
	lp_note(tr, a, v);
	return v;
}

int lp_unwind(struct lp_thread *t, void *fp, uintptr_t *out, int max, int nocache,
	      struct lp_trail *tr)
{
	uintptr_t lo = t->stack_lo, hi = t->stack_hi;
	uintptr_t f = (uintptr_t)fp;
	if (max <= 0)
		return 0;
	if (tr)
		tr->n = 0;
	/* rbp is often an ordinary register whose value the unwind only
	 * carries along: it joins the trail only when a rule consumes it.
	 * rbp_at is the stack slot it was loaded from (0: none). */
	uintptr_t rbp_at = f, rbp = *(const uintptr_t *)f; /* fp is the hook's own frame */
	int rbp_noted = 0;
#define LP_USE_RBP()                                   \
	do {                                           \
		if (!rbp_noted && rbp_at) {            \
			lp_note(tr, rbp_at, rbp);      \
			rbp_noted = 1;                 \
		}                                      \
	} while (0)
	uintptr_t pc = lp_read(tr, f + 8);
	uintptr_t sp = f + 16;
	if (f < lo || sp > hi) {
		/* Not on the thread's known stack (sigaltstack, coroutines):
		 * only the caller is certain. */
		out[0] = pc;
		return 1;
	}
	struct lp_ucache *uc = t->ucache;
	if (LP_UNLIKELY(uc && uc->modgen != lp_modules_gen() && !nocache)) {
		memset(uc->e, 0, sizeof uc->e);
		uc->modgen = lp_modules_gen();
	}
	int n = 0;
	while (n < max && pc >= 4096) {
		out[n++] = pc;
		struct lp_rule r = lp_rule_for(t, uc, pc, nocache);
		uintptr_t cfa, nrbp, nrbp_at;
		if (r.how & LP_R_END)
			break;
		if (r.how & LP_R_FP) {
			LP_USE_RBP();
			if (rbp <= sp || rbp > hi - 16 || (rbp & 7))
				break;
			pc = lp_read(tr, rbp + 8);
			sp = rbp + 16;
			rbp_at = rbp;
			rbp = *(const uintptr_t *)rbp_at;
			rbp_noted = 0;
			continue;
		}
		switch (r.how & 3) {
		case LP_CFA_RSP:
			cfa = sp + (intptr_t)r.cfa_off;
			break;
		case LP_CFA_RBP:
			LP_USE_RBP();
			cfa = rbp + (intptr_t)r.cfa_off;
			break;
		default: {
			LP_USE_RBP();
			uintptr_t a = rbp + (intptr_t)r.cfa_off;
			if (a < sp || a > hi - 8 || (a & 7))
				return n;
			cfa = lp_read(tr, a);
			break;
		}
		}
		if (cfa <= sp || cfa > hi || (cfa & 7))
			break;
		uintptr_t ra_at = cfa + (intptr_t)r.ra_off;
		if (ra_at < sp || ra_at > hi - 8)
			break;
		switch (r.how & 0xc) {
		case LP_RBP_SAME:
			nrbp = rbp;
			nrbp_at = rbp_at;
			break;
		case LP_RBP_AT_CFA: {
			uintptr_t a = cfa + (intptr_t)r.rbp_off;
			if (a < sp || a > hi - 8)
				return n;
			nrbp = *(const uintptr_t *)a;
			nrbp_at = a;
			break;
		}
		case LP_RBP_AT_RBP: {
			LP_USE_RBP();
			uintptr_t a = rbp + (intptr_t)r.rbp_off;
			if (a < sp || a > hi - 8)
				return n;
			nrbp = *(const uintptr_t *)a;
			nrbp_at = a;
			break;
		}
		default:
			nrbp = 0; /* unknown: a later rbp-based CFA fails the checks */
			nrbp_at = 0;
		}
		pc = lp_read(tr, ra_at);
		sp = cfa;
		if (nrbp_at != rbp_at)
			rbp_noted = 0;
		rbp = nrbp;
		rbp_at = nrbp_at;
	}
#undef LP_USE_RBP
	return n;
}

/*
 * lp_ctx_unwind moves c, a state of the calling thread (lp_ctx_here), out
 * through the frames of its callers until it has left the frame of the
 * function at [lo, hi): c is then the state of that function's caller at
 * the call (its stack pointer past the return address, its callee-saved
 * registers). Only the callee-saved registers the unwind information
 * tracks are followed; one it cannot recover becomes 0. Every read is
 * bounds-checked against the thread's stack. Returns 0, or -1 (c
 * undefined) when the unwind fails or the function is not on the stack
 * within a few frames. With lo and hi 0, it goes out to the outermost
 * frame (whose return address is undefined: clone's) and leaves c the
 * state of the frame it called (a thread's start_thread).
 */
LP_HIDDEN int lp_ctx_unwind(struct lp_thread *t, struct lp_ctx *c, uintptr_t lo, uintptr_t hi)
{
	uintptr_t slo = t->stack_lo, shi = t->stack_hi;
	if (!slo || c->sp < slo || c->sp >= shi)
		return -1;
	struct lp_ctx prev = *c;
	for (int depth = 0; depth < 64; depth++) {
		uintptr_t pc = c->pc, sp = c->sp, cfa;
		struct lp_cfstate s;
		if (pc < 4096 || lp_cfi(t, pc, &s) != 0)
			return -1;
		if (lo == 0 && hi == 0 && s.ra.kind == R_UNDEF) {
			/* The outermost frame (clone's): its callee's state. */
			if (depth == 0)
				return -1;
			*c = prev;
			return 0;
		}
		if (s.cfa_bad)
			return -1;
		prev = *c;
		if (s.cfa_deref_rbp) {
			uintptr_t a = c->regs[LP_CTX_RBP] + (intptr_t)s.cfa_off;
			if (a < sp || a > shi - 8 || (a & 7))
				return -1;
			cfa = *(const uintptr_t *)a;
		} else if (s.cfa_reg == 7) {
			cfa = sp + (intptr_t)s.cfa_off;
		} else if (s.cfa_reg == 6) {
			cfa = c->regs[LP_CTX_RBP] + (intptr_t)s.cfa_off;
		} else {
			return -1;
		}
		if (cfa <= sp || cfa > shi || (cfa & 7) || s.ra.kind != R_OFFSET)
			return -1;
		struct lp_regrule *rules[6] = {&s.cs[0], &s.rbp, &s.cs[1], &s.cs[2], &s.cs[3], &s.cs[4]};
		uint64_t next[6];
		for (int i = 0; i < 6; i++) {
			struct lp_regrule *rr = rules[i];
			uintptr_t a;
			switch (rr->kind) {
			case R_UNDEF:
			case R_SAME:
				next[i] = c->regs[i];
				break;
			case R_OFFSET:
			case R_AT_RBP:
				a = (rr->kind == R_OFFSET ? cfa : c->regs[LP_CTX_RBP]) + (intptr_t)rr->off;
				if (a < sp || a > shi - 8)
					return -1;
				next[i] = *(const uint64_t *)a;
				break;
			default:
				next[i] = 0;
			}
		}
		uintptr_t ra_at = cfa + (intptr_t)s.ra.off;
		if (ra_at < sp || ra_at > shi - 8)
			return -1;
		for (int i = 0; i < 6; i++)
			c->regs[i] = next[i];
		c->pc = *(const uintptr_t *)ra_at;
		c->sp = cfa;
		/* The frame just left was at pc-1 (pc a return address). */
		if (pc - 1 >= lo && pc - 1 < hi)
			return 0;
	}
	return -1;
}

#if defined(__x86_64__)
/* At entry the callee-saved registers are the caller's, and the return
 * address is at rsp: the caller's state right after the call. */
__asm__(".text\n"
	".globl lp_ctx_here\n"
	".hidden lp_ctx_here\n"
	".type lp_ctx_here, @function\n"
	"lp_ctx_here:\n"
	".cfi_startproc\n"
	"\tmov %rbx, 0(%rdi)\n"
	"\tmov %rbp, 8(%rdi)\n"
	"\tmov %r12, 16(%rdi)\n"
	"\tmov %r13, 24(%rdi)\n"
	"\tmov %r14, 32(%rdi)\n"
	"\tmov %r15, 40(%rdi)\n"
	"\tlea 8(%rsp), %rax\n"
	"\tmov %rax, 48(%rdi)\n"
	"\tmov (%rsp), %rax\n"
	"\tmov %rax, 56(%rdi)\n"
	"\tret\n"
	".cfi_endproc\n"
	".size lp_ctx_here, .-lp_ctx_here\n");

/* The extents of the functions lp_caller_ctx unwinds out of, found at
 * start: a fork child at its exit may not take the loader's lock (another
 * thread of its parent held it at the fork), which dladdr1 does. */
#define LP_CALLER_FNS 8
static struct {
	uintptr_t lo, hi;
} lp_caller_fns[LP_CALLER_FNS];

/* lp_caller_fn notes fn's extent (its dynamic symbol's), for
 * lp_caller_ctx. At start only, single-threaded. */
LP_HIDDEN void lp_caller_fn(const void *fn)
{
	Dl_info info;
	const ElfW(Sym) *sym = NULL;
	if (!fn || !dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !info.dli_saddr ||
	    sym->st_size == 0 || (uintptr_t)info.dli_saddr != (uintptr_t)fn)
		return;
	for (int i = 0; i < LP_CALLER_FNS; i++) {
		if (lp_caller_fns[i].lo == 0 || lp_caller_fns[i].lo == (uintptr_t)fn) {
			lp_caller_fns[i].hi = (uintptr_t)fn + sym->st_size;
			lp_caller_fns[i].lo = (uintptr_t)fn;
			return;
		}
	}
}

/*
 * lp_caller_ctx fills c with the state of the calling thread where the
 * program called fn (a function of the agent's or of libc's that is on the
 * stack of the caller of lp_caller_ctx, noted by lp_caller_fn): what the
 * program's frames hold, without the frames of the calls it made into the
 * agent or libc, which hold stale copies of what those calls handled.
 * Returns 0, or -1 when that cannot be told.
 */
LP_HIDDEN __attribute__((noinline)) int lp_caller_ctx(struct lp_thread *t, struct lp_ctx *c, const void *fn)
{
	for (int i = 0; i < LP_CALLER_FNS; i++) {
		if (lp_caller_fns[i].lo != 0 && lp_caller_fns[i].lo == (uintptr_t)fn) {
			lp_ctx_here(c);
			return lp_ctx_unwind(t, c, lp_caller_fns[i].lo, lp_caller_fns[i].hi);
		}
	}
	return -1;
}

/* lp_outer_ctx fills c with the state of the calling thread's outermost
 * frame but one (see lp_ctx_unwind). */
LP_HIDDEN __attribute__((noinline)) int lp_outer_ctx(struct lp_thread *t, struct lp_ctx *c)
{
	lp_ctx_here(c);
	return lp_ctx_unwind(t, c, 0, 0);
}
#else
LP_HIDDEN int lp_outer_ctx(struct lp_thread *t, struct lp_ctx *c)
{
	(void)t;
	memset(c, 0, sizeof *c);
	return -1;
}

LP_HIDDEN void lp_ctx_here(struct lp_ctx *c)
{
	memset(c, 0, sizeof *c);
}

LP_HIDDEN void lp_caller_fn(const void *fn)
{
	(void)fn;
}

LP_HIDDEN int lp_caller_ctx(struct lp_thread *t, struct lp_ctx *c, const void *fn)
{
	(void)t;
	(void)fn;
	memset(c, 0, sizeof *c);
	return -1;
}
#endif
