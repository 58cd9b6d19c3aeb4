/*
 * fold.c - folding short-lived allocations (see lp_wire.h).
 *
 * Most blocks die young, freed by the thread that made them. Writing two
 * records for each is what makes a collector the bottleneck; instead a
 * thread keeps its latest LP_PEND allocations pending, and its free of one
 * of them counts the pair in an aggregate (allocation stack, free stack,
 * functions, bytes, temporaries). A pending entry that newer ones push out
 * is written as an ALLOC_LATE record with its own timestamp.
 *
 * The pending FIFO and the aggregates live in the slot's fold area in the
 * shared region, so nothing is lost if the process dies: the collector
 * reads what is left there. The pending map, also shared, says which
 * thread holds a pending address: a free by any other thread claims the
 * entry and writes the allocation itself, just before its FREE record. So
 * a block freed by another thread is never folded by its owner later, when
 * the address has been reused.
 */
#include "agent.h"

#include <string.h>

#define LP_PMASK (LP_PEND - 1)
#define LP_SMASK (LP_PMAP_SUB - 1)
/* Write aggregates at least this often: after so many folded pairs, or
 * when the oldest is this many ticks old (~10 ms of TSC, ~34 ms of ns). */
#define LP_FOLD_FLUSH_PAIRS 65536u
#define LP_FOLD_FLUSH_TICKS (1ull << 25)

#define lp_ahash lp_pmap_hash

static inline struct lp_stripe *lp_stripe_of(uint64_t addr, uint64_t h)
{
	(void)addr;
	struct lp_stripe *base = (struct lp_stripe *)((unsigned char *)lp_hdr + lp_hdr->pmap_offset);
	return &base[h & (LP_PMAP_STRIPES - 1)];
}

static inline void lp_stripe_lock(struct lp_stripe *s)
{
	while (__atomic_exchange_n(&s->lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&s->lock, __ATOMIC_RELAXED))
			__builtin_ia32_pause();
}

static inline void lp_stripe_unlock(struct lp_stripe *s)
{
	__atomic_store_n(&s->lock, 0, __ATOMIC_RELEASE);
}

/* lp_pm_find returns addr's index in stripe s (home h), or -1. */
static int lp_pm_find(struct lp_stripe *s, uint64_t addr, uint64_t h)
{
	uint32_t i = (uint32_t)(h >> 32) & LP_SMASK;
	for (uint32_t k = 0; k < LP_PMAP_SUB; k++, i = (i + 1) & LP_SMASK) {
		if (s->ent[i].addr == addr)
			return (int)i;
		if (s->ent[i].addr == 0)
			return -1;
	}
	return -1;
}

/* lp_pm_put maps addr to (slot, pos); returns -1 if the stripe is full. */
static int lp_pm_put(struct lp_stripe *s, uint64_t addr, uint64_t h, uint32_t slot, uint32_t pos)
{
	uint32_t i = (uint32_t)(h >> 32) & LP_SMASK;
	for (uint32_t k = 0; k < LP_PMAP_SUB - 1; k++, i = (i + 1) & LP_SMASK) {
		if (s->ent[i].addr == addr || s->ent[i].addr == 0) {
			s->ent[i] = (struct lp_pment){.addr = addr, .slot = slot, .pos = pos};
			return 0;
		}
	}
	return -1; /* keep one slot empty: probes always end */
}

/* lp_pm_del empties index i of stripe s, shifting back the entries after
 * it that would otherwise become unreachable. */
static void lp_pm_del(struct lp_stripe *s, uint32_t i)
{
	for (;;) {
		s->ent[i].addr = 0;
		uint32_t k = i;
		for (;;) {
			k = (k + 1) & LP_SMASK;
			if (s->ent[k].addr == 0)
				return;
			uint32_t home = (uint32_t)(lp_ahash(s->ent[k].addr) >> 32) & LP_SMASK;
			if ((k > i && (home <= i || home > k)) || (k < i && home <= i && home > k))
				break;
		}
		s->ent[i] = s->ent[k];
		i = k;
	}
}

static inline struct lp_fold *lp_fold_of(uint32_t slot)
{
	return (struct lp_fold *)((unsigned char *)lp_hdr + lp_hdr->fold_offset + (uint64_t)slot * LP_FOLD_SIZE);
}

void lp_fold_attach(struct lp_thread *t, struct lp_fold *f)
{
	t->fold = NULL;
	if (!f)
		return;
	f->head = 0;
	f->count = 0;
	for (unsigned i = 0; i < LP_AGG; i++)
		f->agg[i].used = 0;
	t->folded = 0;
	t->agg_oldest = 0;
	t->fold = f;
}

/* lp_commit writes a copy of a pending entry of the thread tid as an
 * ALLOC_LATE record, dated now (0: when written). */
static void lp_commit(struct lp_thread *t, const struct lp_pending *e, int tid, uint64_t now)
{
	uint64_t w[6] = {LP_HDR(LP_REC_ALLOC_LATE, e->fn, 6, e->stack), now, e->addr, e->size, e->ts,
			 (uint64_t)(uint32_t)tid};
	lp_put(t, w, 6);
}

/* lp_evict makes room: the oldest entry goes, written if still live. */
static void lp_evict(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	uint32_t pos = f->head;
	struct lp_pending *e = &f->pend[pos];
	f->head = (f->head + 1) & LP_PMASK;
	f->count--;
	if (!e->live)
		return;
	uint64_t h = lp_ahash(e->addr);
	struct lp_stripe *s = lp_stripe_of(e->addr, h);
	lp_stripe_lock(s);
	int live = e->live; /* another thread may have claimed it meanwhile */
	struct lp_pending copy = *e;
	e->live = 0;
	int i = lp_pm_find(s, copy.addr, h);
	if (i >= 0 && s->ent[i].slot == t->slot_index && s->ent[i].pos == pos)
		lp_pm_del(s, (uint32_t)i);
	/* Dated before another thread can miss the entry and write its free:
	 * the collector puts frees after the record's time. */
	uint64_t now = live ? lp_ts() : 0;
	lp_stripe_unlock(s);
	if (live)
		lp_commit(t, &copy, t->tid, now);
}

void lp_fold_alloc(struct lp_thread *t, unsigned fn, void *p, size_t n, uint32_t sid)
{
	struct lp_fold *f = t->fold;
	if (f->count == LP_PEND)
		lp_evict(t);
	uint32_t pos = (f->head + f->count) & LP_PMASK;
	struct lp_pending *e = &f->pend[pos];
	uint64_t a = (uint64_t)p, h = lp_ahash(a);
	struct lp_stripe *s = lp_stripe_of(a, h);
	*e = (struct lp_pending){.addr = a, .size = n, .ts = lp_ts_pending(), .stack = sid, .fn = (uint8_t)fn};
	lp_stripe_lock(s);
	int full = lp_pm_put(s, a, h, t->slot_index, pos);
	if (!full)
		e->live = 1;
	lp_stripe_unlock(s);
	t->last_alloc = a;
	if (full) {
		/* No room in the map: this one is written at once. */
		lp_commit(t, e, t->tid, 0);
		return;
	}
	f->count++;
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

/*
 * lp_take finds p's pending entry, of any thread, and takes it out of the
 * map and the FIFO, copying it to *out. Returns 1 when it was this
 * thread's own, 2 another thread's, 0 when p is not pending.
 */
static int lp_take(struct lp_thread *t, uint64_t p, struct lp_pending *out, int *owner)
{
	uint64_t h = lp_ahash(p);
	struct lp_stripe *s = lp_stripe_of(p, h);
	lp_stripe_lock(s);
	int i = lp_pm_find(s, p, h);
	if (i < 0) {
		lp_stripe_unlock(s);
		return 0;
	}
	struct lp_pment m = s->ent[i];
	lp_pm_del(s, (uint32_t)i);
	*owner = ((struct lp_slot *)((unsigned char *)lp_hdr + LP_HEADER_SIZE))[m.slot].tid;
	struct lp_pending *e = &lp_fold_of(m.slot)->pend[m.pos & LP_PMASK];
	int found = e->live && e->addr == p;
	*out = *e;
	if (found)
		e->live = 0;
	lp_stripe_unlock(s);
	if (!found)
		return 0;
	return m.slot == t->slot_index ? 1 : 2;
}

int lp_fold_free(struct lp_thread *t, unsigned fn, void *p, void *fp)
{
	struct lp_pending e;
	int owner;
	int whose = lp_take(t, (uint64_t)p, &e, &owner);
	if (whose == 0)
		return 0;
	if (whose == 2 || lp_family(e.fn) != lp_family(fn)) {
		/* Another thread's block, or a mismatched free: the collector
		 * must see both, the allocation first. */
		lp_commit(t, &e, owner, 0);
		return 0;
	}
	/* A folded pair's free is proper: its stack would only ever be shown
	 * to find root causes. */
	uint32_t fstack = lp_fold_free_stacks ? lp_stack_id(t, fp) : 0;
	int temporary = t->last_alloc == (uint64_t)p;
	lp_agg_add(t, &e, fstack, fn, temporary);
	if (temporary)
		t->last_alloc = 0;
	/* The newest entry (the usual temporary) gives its place back. */
	struct lp_fold *f = t->fold;
	if (f->count > 0 && !f->pend[(f->head + f->count - 1) & LP_PMASK].live)
		f->count--;
	return 1;
}

void lp_fold_take(struct lp_thread *t, void *p)
{
	struct lp_pending e;
	int owner;
	if (lp_take(t, (uint64_t)p, &e, &owner))
		lp_commit(t, &e, owner, 0);
}

void lp_fold_flush(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	if (!f || (f->count == 0 && t->folded == 0))
		return; /* nothing pending, no aggregate in use */
	while (f->count > 0)
		lp_evict(t);
	lp_flush_aggs(t);
}
