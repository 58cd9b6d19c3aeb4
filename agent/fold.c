/*
 * fold.c - folding short-lived allocations (see lp_wire.h).
 *
 * Most blocks die young, freed by the thread that made them. Writing two
 * records for each is what makes a collector the bottleneck; instead a
 * thread keeps its latest LP_PEND allocations pending, and a free of one of
 * them counts the pair in an aggregate (allocation stack, free stack,
 * functions, bytes, temporaries). A pending entry that is pushed out by
 * newer ones is written as an ALLOC_LATE record with its own timestamp.
 *
 * The pending FIFO and the aggregates live in the slot's fold area in the
 * shared region, so nothing is lost if the process dies: the collector
 * reads what is left there. The address index is private: only this
 * thread looks blocks up.
 */
#include "agent.h"

#include <string.h>

#define LP_PMASK (LP_PEND - 1)
#define LP_IMASK (LP_FIDX - 1)
/* Write aggregates at least this often: after so many folded pairs, or
 * when the oldest is this many ticks old (~10 ms of TSC, ~34 ms of ns). */
#define LP_FOLD_FLUSH_PAIRS 65536u
#define LP_FOLD_FLUSH_TICKS (1ull << 25)

static inline uint32_t lp_ihash(uint64_t a)
{
	a ^= a >> 33;
	a *= 0xff51afd7ed558ccdull;
	a ^= a >> 33;
	return (uint32_t)a & LP_IMASK;
}

static int lp_idx_find(struct lp_findex *ix, uint64_t addr)
{
	for (uint32_t i = lp_ihash(addr);; i = (i + 1) & LP_IMASK) {
		if (ix[i].addr == addr)
			return (int)ix[i].pos;
		if (ix[i].addr == 0)
			return -1;
	}
}

static void lp_idx_put(struct lp_findex *ix, uint64_t addr, uint32_t pos)
{
	for (uint32_t i = lp_ihash(addr);; i = (i + 1) & LP_IMASK) {
		if (ix[i].addr == addr || ix[i].addr == 0) {
			ix[i].addr = addr;
			ix[i].pos = pos;
			return;
		}
	}
}

/* lp_idx_del removes addr if it maps to pos, shifting back the entries
 * after it that would become unreachable. */
static void lp_idx_del(struct lp_findex *ix, uint64_t addr, uint32_t pos)
{
	uint32_t j = lp_ihash(addr);
	for (;; j = (j + 1) & LP_IMASK) {
		if (ix[j].addr == 0)
			return;
		if (ix[j].addr == addr)
			break;
	}
	if (ix[j].pos != pos)
		return; /* a newer block at the same address owns the entry */
	for (;;) {
		ix[j].addr = 0;
		uint32_t k = j;
		for (;;) {
			k = (k + 1) & LP_IMASK;
			if (ix[k].addr == 0)
				return;
			uint32_t home = lp_ihash(ix[k].addr);
			if ((k > j && (home <= j || home > k)) || (k < j && home <= j && home > k))
				break;
		}
		ix[j] = ix[k];
		j = k;
	}
}

void lp_fold_attach(struct lp_thread *t, struct lp_fold *f)
{
	t->fold = NULL;
	if (!f || !t->stacks)
		return;
	f->head = 0;
	f->count = 0;
	for (unsigned i = 0; i < LP_AGG; i++)
		f->agg[i].used = 0;
	memset(lp_tables_fidx(t), 0, LP_FIDX * sizeof(struct lp_findex));
	t->folded = 0;
	t->agg_oldest = 0;
	t->fold = f;
}

/* lp_commit writes pending entry e as an ALLOC_LATE record. */
static void lp_commit(struct lp_thread *t, struct lp_pending *e)
{
	uint64_t w[5] = {LP_HDR(LP_REC_ALLOC_LATE, e->fn, 5, e->stack), 0, e->addr, e->size, e->ts};
	lp_put(t, w, 5);
	e->live = 0;
}

/* lp_evict makes room: the oldest entry goes, written if still live. */
static void lp_evict(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	uint32_t pos = f->head;
	struct lp_pending *e = &f->pend[pos];
	if (e->live) {
		lp_idx_del(lp_tables_fidx(t), e->addr, pos);
		lp_commit(t, e);
	}
	f->head = (f->head + 1) & LP_PMASK;
	f->count--;
}

void lp_fold_alloc(struct lp_thread *t, unsigned fn, void *p, size_t n, uint32_t sid)
{
	struct lp_fold *f = t->fold;
	if (f->count == LP_PEND)
		lp_evict(t);
	uint32_t pos = (f->head + f->count) & LP_PMASK;
	struct lp_pending *e = &f->pend[pos];
	e->addr = (uint64_t)p;
	e->size = n;
	e->ts = lp_ts();
	e->stack = sid;
	e->fn = (uint8_t)fn;
	e->live = 1;
	f->count++;
	lp_idx_put(lp_tables_fidx(t), (uint64_t)p, pos);
	t->last_alloc = (uint64_t)p;
}

static inline int lp_family(unsigned fn)
{
	switch (fn) {
	case LP_FN_NEW:
	case LP_FN_DELETE:
		return 2;
	case LP_FN_NEW_ARRAY:
	case LP_FN_DELETE_ARRAY:
		return 3;
	}
	return 1;
}

/* lp_flush_aggs writes the aggregates as AGG records and empties them. */
static void lp_flush_aggs(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	for (unsigned i = 0; i < LP_AGG; i++) {
		struct lp_aggent *a = &f->agg[i];
		if (!a->used)
			continue;
		uint64_t w[7] = {LP_HDR(LP_REC_AGG, a->afn, 7, a->astack), 0,
				 (uint64_t)a->fstack | (uint64_t)a->ffn << 32,
				 a->pairs, a->bytes, a->temporary, a->first};
		lp_put(t, w, 7);
		a->used = 0;
	}
	t->folded = 0;
	t->agg_oldest = 0;
}

static void lp_agg_add(struct lp_thread *t, const struct lp_pending *e, uint32_t fstack, unsigned ffn,
		       int temporary)
{
	struct lp_fold *f = t->fold;
	uint32_t h = (e->stack * 0x9e3779b1u) ^ (fstack * 0x85ebca6bu) ^ e->fn ^ (ffn << 8);
	for (int tries = 0; tries < 2; tries++) {
		for (unsigned k = 0; k < LP_AGG; k++) {
			struct lp_aggent *a = &f->agg[(h + k) & (LP_AGG - 1)];
			if (!a->used) {
				*a = (struct lp_aggent){.astack = e->stack, .fstack = fstack, .afn = e->fn,
							.ffn = (uint8_t)ffn, .used = 1, .first = e->ts,
							.last = e->ts};
			} else if (a->astack != e->stack || a->fstack != fstack || a->afn != e->fn ||
				   a->ffn != ffn) {
				continue;
			}
			a->pairs++;
			a->bytes += e->size;
			a->temporary += (uint64_t)temporary;
			if (e->ts > a->last)
				a->last = e->ts;
			if (e->ts < a->first)
				a->first = e->ts;
			/* Blocks are freed in any order: the oldest pair is the
			 * smallest time, and ages are signed. */
			if (t->agg_oldest == 0 || e->ts < t->agg_oldest)
				t->agg_oldest = e->ts;
			if (++t->folded >= LP_FOLD_FLUSH_PAIRS ||
			    (int64_t)(e->ts - t->agg_oldest) > (int64_t)LP_FOLD_FLUSH_TICKS)
				lp_flush_aggs(t);
			return;
		}
		lp_flush_aggs(t); /* full: write them all, then there is room */
	}
}

int lp_fold_free(struct lp_thread *t, unsigned fn, void *p, void *fp)
{
	struct lp_fold *f = t->fold;
	struct lp_findex *ix = lp_tables_fidx(t);
	int pos = lp_idx_find(ix, (uint64_t)p);
	if (pos < 0)
		return 0;
	struct lp_pending *e = &f->pend[pos];
	if (!e->live || e->addr != (uint64_t)p)
		return 0;
	lp_idx_del(ix, e->addr, (uint32_t)pos);
	if (lp_family(e->fn) != lp_family(fn)) {
		/* A mismatched free: the collector must see both to say so. */
		lp_commit(t, e);
		return 0;
	}
	uint32_t fstack = lp_free_stacks ? lp_stack_id(t, fp) : 0;
	lp_agg_add(t, e, fstack, fn, t->last_alloc == (uint64_t)p);
	e->live = 0;
	if (t->last_alloc == (uint64_t)p)
		t->last_alloc = 0;
	/* The newest entry (the usual temporary) gives its place back. */
	if ((uint32_t)pos == ((f->head + f->count - 1) & LP_PMASK))
		f->count--;
	return 1;
}

void lp_fold_take(struct lp_thread *t, void *p)
{
	struct lp_findex *ix = lp_tables_fidx(t);
	int pos = lp_idx_find(ix, (uint64_t)p);
	if (pos < 0)
		return;
	struct lp_pending *e = &t->fold->pend[pos];
	if (!e->live || e->addr != (uint64_t)p)
		return;
	lp_idx_del(ix, e->addr, (uint32_t)pos);
	lp_commit(t, e);
}

void lp_fold_flush(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	if (!f)
		return;
	while (f->count > 0)
		lp_evict(t);
	lp_flush_aggs(t);
}
