/*
 * stacktab.c - per-thread deduplication of call stacks into small ids.
 *
 * Each thread keeps its own table, so lookups take no lock and share no
 * cache line. Ids come from one process-wide counter in the region header;
 * the first time a thread meets a stack it writes a STACK record defining
 * the id into its own ring, before any record that uses it. Two threads
 * meeting the same stack define two ids; the collector merges them.
 * Entries are verified frame by frame: a hash collision never merges stacks.
 */
#include "agent.h"

#include <sched.h>
#include <string.h>
#include <sys/mman.h>

struct lp_stent {
	uint64_t hash;
	uint32_t id;
	uint16_t depth;
	uint16_t gen;
	uint64_t off; /* index of the first frame in the arena */
};

/* lp_recent is the last stack seen from one hook frame (see lp_trail):
 * none while fp is 0. Every one holds for the table's generation and its
 * modgen; a new one of either empties them all. */
struct lp_recent {
	uintptr_t fp;
	uint32_t id;
	struct lp_trail trail;
};

#define LP_RECENT_SETS 16 /* recent stacks: sets by call site... */
#define LP_RECENT_WAYS 4  /* ...of this many, replaced in turn */
#define LP_RECENT (LP_RECENT_SETS * LP_RECENT_WAYS)

struct lp_stacktab {
	struct lp_recent recent[LP_RECENT];
	uint8_t recent_next[LP_RECENT_SETS]; /* per set: the way to replace next */
	struct lp_recent *recent_set[LP_RECENT_SETS]; /* per set: its first way (a load, not a multiply) */
	struct lp_stent *ents;
	uint32_t cap;   /* power of two */
	uint32_t count;
	uint16_t gen;   /* entries of another generation are empty */
	uint64_t modgen; /* lp_modules_gen of the recent stacks */
	uint64_t recent_used; /* a bit per recent stack ever set since emptied */
	uintptr_t *arena;
	size_t arena_cap;  /* words */
	size_t arena_used; /* words */
	struct lp_stacktab *next; /* in the pool of exited threads' tables */
	struct lp_ucache *ucache; /* parked with it in the pool */
};

/* Tables of exited threads wait here for new threads: thread pools that
 * churn reuse them instead of mapping new ones. */
static struct lp_stacktab *lp_pool;
static int lp_pool_lock;
static int lp_own_lock;

static void lp_pool_acquire(void)
{
	while (__atomic_exchange_n(&lp_pool_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void lp_pool_release(void)
{
	__atomic_store_n(&lp_pool_lock, 0, __ATOMIC_RELEASE);
}

/* lp_pool_lock_fork keeps the pool consistent across fork: taken in the
 * prepare handler, released in both parent and child. */
void lp_pool_lock_fork(int take)
{
	if (take) {
		lp_pool_acquire();
		while (__atomic_exchange_n(&lp_own_lock, 1, __ATOMIC_ACQUIRE))
			sched_yield();
	} else {
		__atomic_store_n(&lp_own_lock, 0, __ATOMIC_RELEASE);
		lp_pool_release();
	}
}

/* lp_tables_park hands an exiting thread's tables to the pool. */
void lp_tables_park(struct lp_thread *t)
{
	struct lp_stacktab *s = t->stacks;
	if (!s)
		return;
	s->ucache = t->ucache;
	t->stacks = NULL;
	t->ucache = NULL;
	lp_pool_acquire();
	s->next = lp_pool;
	lp_pool = s;
	lp_pool_release();
}

/* lp_tables_take gives a new thread tables: an exited thread's (reset; its
 * unwind cache stays valid, it is keyed by code address) or new ones. */
int lp_tables_take(struct lp_thread *t)
{
	lp_pool_acquire();
	struct lp_stacktab *s = lp_pool;
	if (s)
		lp_pool = s->next;
	lp_pool_release();
	if (s) {
		lp_stacktab_reset(s);
		t->stacks = s;
		t->ucache = s->ucache;
		s->ucache = NULL;
		s->next = NULL;
		if (!t->ucache)
			t->ucache = lp_ucache_new();
		return t->ucache ? 0 : -1;
	}
	t->stacks = lp_stacktab_new();
	t->ucache = lp_ucache_new();
	return t->stacks && t->ucache ? 0 : -1;
}

#define LP_ST_INIT_CAP 1024u
#define LP_ST_INIT_ARENA 16384u

/* lp_own lists the agent's mappings so that a scan of the process does
 * not take what they hold (addresses the unwinder saw) for pointers. It
 * lives in the agent's data, so fork children inherit it. */
struct lp_own_table lp_own;

static void lp_own_note(void *p, size_t bytes, int add)
{
	while (__atomic_exchange_n(&lp_own_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	uint64_t a = (uint64_t)(uintptr_t)p;
	uint32_t n = lp_own.count, free_i = n;
	for (uint32_t i = 0; i < n; i++) {
		if (add && lp_own.r[i].addr == 0 && free_i == n)
			free_i = i;
		if (!add && lp_own.r[i].addr == a) {
			lp_own.r[i].len = 0;
			__atomic_store_n(&lp_own.r[i].addr, 0, __ATOMIC_RELEASE);
			goto out;
		}
	}
	if (!add)
		goto out;
	if (free_i == LP_OWN_MAX) {
		lp_own.overflow = 1;
		goto out;
	}
	lp_own.r[free_i].len = bytes;
	__atomic_store_n(&lp_own.r[free_i].addr, a, __ATOMIC_RELEASE);
	if (free_i == n)
		__atomic_store_n(&lp_own.count, n + 1, __ATOMIC_RELEASE);
out:
	__atomic_store_n(&lp_own_lock, 0, __ATOMIC_RELEASE);
}

static int lp_dead_lock;

/* lp_dead_stack notes that the thread with stack [lo, hi) and thread
 * pointer tp exits, its frames below sp dead (dead), or that a thread
 * starts on it (!dead): an entry of a stack it overlaps is cleared. */
LP_HIDDEN void lp_dead_stack(uintptr_t lo, uintptr_t hi, uintptr_t sp, uintptr_t tp, int dead)
{
	if (!lo || hi <= lo)
		return;
	while (__atomic_exchange_n(&lp_dead_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	for (uint32_t i = 0; i < LP_DEAD_MAX; i++) {
		struct lp_dead_stack *r = &lp_own.dead[i];
		if (r->addr && r->addr < hi && r->addr + r->len > lo) {
			__atomic_store_n(&r->addr, 0, __ATOMIC_RELEASE);
			r->len = 0;
		}
	}
	if (dead && sp > lo && sp <= hi) {
		struct lp_dead_stack *r = &lp_own.dead[lp_own.dead_next++ % LP_DEAD_MAX];
		r->len = sp - lo;
		r->tp = tp;
		__atomic_store_n(&r->addr, (uint64_t)lo, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&lp_dead_lock, 0, __ATOMIC_RELEASE);
}

void *lp_mmap(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	lp_own_note(p, bytes, 1);
	return p;
}

void lp_munmap(void *p, size_t bytes)
{
	if (p) {
		lp_own_note(p, bytes, 0);
		munmap(p, bytes);
	}
}

struct lp_stacktab *lp_stacktab_new(void)
{
	struct lp_stacktab *s = lp_mmap(sizeof *s);
	if (!s)
		return NULL;
	s->ents = lp_mmap(LP_ST_INIT_CAP * sizeof(struct lp_stent));
	s->arena = lp_mmap(LP_ST_INIT_ARENA * sizeof(uintptr_t));
	if (!s->ents || !s->arena) {
		lp_munmap(s->ents, LP_ST_INIT_CAP * sizeof(struct lp_stent));
		lp_munmap(s->arena, LP_ST_INIT_ARENA * sizeof(uintptr_t));
		lp_munmap(s, sizeof *s);
		return NULL;
	}
	s->cap = LP_ST_INIT_CAP;
	s->arena_cap = LP_ST_INIT_ARENA;
	for (uint32_t i = 0; i < LP_RECENT_SETS; i++)
		s->recent_set[i] = &s->recent[i * LP_RECENT_WAYS];
	s->gen = 1;
	return s;
}

_Static_assert(LP_RECENT <= 64, "recent_used: a bit per recent stack");

/* lp_recent_clear forgets the recent stacks, touching only those set
 * (clearing all 64, ~137 KiB, was ~33 page faults a new thread). */
static void lp_recent_clear(struct lp_stacktab *s)
{
	for (uint64_t u = s->recent_used; u; u &= u - 1)
		s->recent[__builtin_ctzll(u)].fp = 0;
	s->recent_used = 0;
}

void lp_stacktab_reset(struct lp_stacktab *s)
{
	lp_recent_clear(s);
	s->count = 0;
	s->arena_used = 0;
	if (++s->gen == 0) {
		memset(s->ents, 0, (size_t)s->cap * sizeof(struct lp_stent));
		s->gen = 1;
	}
}

static inline uint64_t lp_hash_frames(const uintptr_t *f, int n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
	for (int i = 0; i < n; i++) {
		h ^= (uint64_t)f[i];
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	return h;
}

static int lp_stacktab_grow(struct lp_stacktab *s)
{
	uint32_t ncap = s->cap * 2;
	struct lp_stent *n = lp_mmap((size_t)ncap * sizeof *n);
	if (!n)
		return -1;
	for (uint32_t i = 0; i < s->cap; i++) {
		struct lp_stent *e = &s->ents[i];
		if (e->gen != s->gen)
			continue;
		uint32_t j = (uint32_t)(e->hash >> 32) & (ncap - 1);
		while (n[j].gen == s->gen)
			j = (j + 1) & (ncap - 1);
		n[j] = *e;
	}
	lp_munmap(s->ents, (size_t)s->cap * sizeof *n);
	s->ents = n;
	s->cap = ncap;
	return 0;
}

static int lp_arena_reserve(struct lp_stacktab *s, size_t words)
{
	if (s->arena_used + words <= s->arena_cap)
		return 0;
	size_t ncap = s->arena_cap * 2;
	while (ncap < s->arena_used + words)
		ncap *= 2;
	void *p = mremap(s->arena, s->arena_cap * sizeof(uintptr_t), ncap * sizeof(uintptr_t),
			 MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -1;
	s->arena = p;
	s->arena_cap = ncap;
	return 0;
}

/* lp_define gives the n frames at buf[1..n] a new id and tells the
 * collector; buf[0] is room for the record header. */
static uint32_t lp_define(struct lp_thread *t, uint64_t *buf, int n)
{
	uint32_t id = (uint32_t)__atomic_add_fetch(&lp_hdr->next_stack_id, 1, __ATOMIC_RELAXED);
	buf[0] = LP_HDR(LP_REC_STACK, 0, 1 + n, id);
	lp_put(t, buf, 1 + (unsigned)n);
	return id;
}

static uint32_t lp_stack_id_locked(struct lp_thread *t, void *fp, uint64_t *buf);
static uint32_t lp_lookup(struct lp_thread *t, struct lp_stacktab *s, uint64_t *buf, int n);
static inline __attribute__((always_inline)) int lp_trail_holds(const struct lp_trail *tr);

/* lp_recent_set returns the set of recent stacks of hook frame fp: a set
 * per call site hash, so that the call sites of one function (its malloc
 * and its free) and one call site reached along several paths do not keep
 * evicting each other. */
static inline uint32_t lp_recent_set(void *fp)
{
	uintptr_t ra = ((const uintptr_t *)fp)[1];
	return (uint32_t)(((uint64_t)ra * 0x9e3779b97f4a7c15ull) >> 60);
}

/* lp_recent_hit returns the id of a recent stack from the same hook frame
 * with the same stack above it (the same stack, without unwinding or
 * hashing), or 0. The ways are looked at in a fixed order: stacks that
 * take turns at one call site cost one check each (trying the one that
 * held last first cost two). */
static inline __attribute__((always_inline)) uint32_t lp_recent_hit(struct lp_stacktab *s, void *fp, uint64_t modgen)
{
	if (LP_UNLIKELY(s->modgen != modgen))
		return 0; /* modules changed: lp_stack_id_locked empties them */
	const struct lp_recent *ways = s->recent_set[lp_recent_set(fp)];
	for (int w = 0; w < (int)LP_RECENT_WAYS; w++) {
		const struct lp_recent *e = &ways[w];
		if (e->fp == (uintptr_t)fp && lp_trail_holds(&e->trail))
			return e->id;
	}
	return 0;
}

static uint32_t lp_stack_id_slow(struct lp_thread *t, void *fp);

/*
 * lp_stack_id returns the id of the calling thread's stack above the frame
 * fp (the hook's own frame), defining it on first use; 0 if there is none.
 * Most calls find a recent stack: that path is kept small, without the
 * unwind's 1 KiB buffer and the registers its calls need saved.
 */
__attribute__((always_inline)) inline uint32_t lp_stack_id(struct lp_thread *t, void *fp)
{
	struct lp_stacktab *s = t->stacks;
	if (LP_LIKELY(s != NULL && !t->in_stack)) {
		lp_enter(&t->in_stack);
		uint32_t id = lp_recent_hit(s, fp, lp_modules_gen());
		lp_leave(&t->in_stack);
		if (LP_LIKELY(id != 0))
			return id;
	}
	return lp_stack_id_slow(t, fp);
}

/* lp_stack_id_slow is lp_stack_id when no recent stack holds. */
static __attribute__((noinline)) uint32_t lp_stack_id_slow(struct lp_thread *t, void *fp)
{
	uint64_t buf[1 + LP_MAX_DEPTH];
	uintptr_t *frames = (uintptr_t *)&buf[1];
	if (LP_UNLIKELY(t->in_stack)) {
		/* A signal handler interrupted this thread in here: leave the
		 * tables alone and define the stack afresh. */
		int n = lp_unwind(t, fp, frames, (int)lp_max_depth, 1, NULL);
		return n > 0 ? lp_define(t, buf, n) : 0;
	}
	lp_enter(&t->in_stack);
	uint32_t id = lp_stack_id_locked(t, fp, buf);
	lp_leave(&t->in_stack);
	return id;
}

/* lp_trail_holds reports whether every slot of a recorded unwind still
 * holds what it held. */
static inline __attribute__((always_inline)) int lp_trail_holds(const struct lp_trail *tr)
{
	/* Two slots a load where they are a frame's saved rbp and return
	 * address. */
	typedef uintptr_t lp_v2 __attribute__((vector_size(16), aligned(8)));
	/* The expected pairs are 16-aligned (lp_trail.val), so each XOR
	 * takes its operand straight from memory. */
	typedef uintptr_t lp_v2a __attribute__((vector_size(16), aligned(16)));
	lp_v2 p0 = {0, 0}, p1 = {0, 0};
	/* Chained pairs: each frame's address is the rbp saved in the one
	 * before, read from the expected values (scalar loads, independent of
	 * the frames' own). */
	const uintptr_t *v = tr->val, *end = tr->val + tr->chained;
	uintptr_t a = tr->addr[0];
#define LP_PAIR(acc, at, k) ((acc) |= *(const lp_v2 *)(at) ^ *(const lp_v2a *)&v[k])
	/* The odd frames first, a test each way (a switch cost a chain of
	 * compares, most where nothing is chained), then four an iteration. */
	int odd = (tr->chained >> 1) & 3;
	if (LP_UNLIKELY(odd)) {
		if (odd & 2) {
			LP_PAIR(p0, a, 0);
			LP_PAIR(p1, v[0], 2);
			a = v[2];
			v += 4;
		}
		if (odd & 1) {
			LP_PAIR(p0, a, 0);
			a = v[0];
			v += 2;
		}
	}
	for (; v < end; v += 8) {
		LP_PAIR(p0, a, 0);
		LP_PAIR(p1, v[0], 2);
		LP_PAIR(p0, v[2], 4);
		LP_PAIR(p1, v[4], 6);
		a = v[6];
	}
#undef LP_PAIR
	/* Then, usually, one or two single slots (the frames of a library
	 * built without frame pointers under the thread's start), set
	 * aside where they are read without a loop. */
	if (LP_LIKELY(tr->few)) {
		lp_v2 l = {*(const uintptr_t *)tr->loose_addr[0], *(const uintptr_t *)tr->loose_addr[1]};
		p0 |= p1 | (l ^ *(const lp_v2a *)tr->loose_val);
		return p0[0] == 0 && p0[1] == 0;
	}
	for (int i = tr->chained; i < tr->paired; i += 2)
		p1 |= *(const lp_v2 *)tr->addr[i] ^ *(const lp_v2a *)&tr->val[i];
	/* Single slots (code without frame pointers: all of them), two a
	 * vector, four an iteration; paired is even, so the expected values
	 * are 16-aligned. */
	int i = tr->paired;
	for (; i + 4 <= tr->n; i += 4) {
		const uintptr_t *ad = &tr->addr[i];
		lp_v2 x = {*(const uintptr_t *)ad[0], *(const uintptr_t *)ad[1]};
		lp_v2 y = {*(const uintptr_t *)ad[2], *(const uintptr_t *)ad[3]};
		p0 |= x ^ *(const lp_v2a *)&tr->val[i];
		p1 |= y ^ *(const lp_v2a *)&tr->val[i + 2];
	}
	p0 |= p1;
	uintptr_t diff = p0[0] | p0[1];
	for (; i < tr->n; i++)
		diff |= *(const uintptr_t *)tr->addr[i] ^ tr->val[i];
	return diff == 0;
}

/* lp_trail_pair orders the leading pairs of a trail's slots by address
 * while each pair is two adjacent slots (a frame-pointer unwind reads a
 * frame's return address, then the rbp saved just below it), and notes how
 * many slots they hold, and how many of those form a chain (each pair's
 * address the rbp the previous pair holds). */
static void lp_trail_pair(struct lp_trail *tr)
{
	int i = 0;
	for (; i + 1 < tr->n; i += 2) {
		if (tr->addr[i + 1] + 8 == tr->addr[i]) {
			uintptr_t a = tr->addr[i], v = tr->val[i];
			tr->addr[i] = tr->addr[i + 1];
			tr->val[i] = tr->val[i + 1];
			tr->addr[i + 1] = a;
			tr->val[i + 1] = v;
		} else if (tr->addr[i] + 8 != tr->addr[i + 1]) {
			break;
		}
	}
	tr->paired = i;
	int c = i > 0 ? 2 : 0;
	while (c < i && tr->addr[c] == tr->val[c - 2])
		c += 2;
	tr->chained = c;
	/* The slots after the chain, when all single and at most two, where
	 * lp_trail_holds reads them without a loop: the last one twice, or
	 * none (each slot of loose_val holding itself). */
	int left = tr->n - i;
	tr->few = c == i && left <= 2;
	for (int k = 0; k < 2; k++) {
		int j = k < left ? i + k : i + left - 1;
		if (left > 0) {
			tr->loose_addr[k] = tr->addr[j];
			tr->loose_val[k] = tr->val[j];
		} else {
			tr->loose_addr[k] = (uintptr_t)&tr->loose_val[k];
			tr->loose_val[k] = (uintptr_t)&tr->loose_val[k];
		}
	}
}

static uint32_t lp_stack_id_locked(struct lp_thread *t, void *fp, uint64_t *buf)
{
	uintptr_t *frames = (uintptr_t *)&buf[1];
	struct lp_stacktab *s = t->stacks;
	struct lp_recent *rc = NULL;
	uint64_t modgen = lp_modules_gen();
	if (LP_LIKELY(s != NULL)) {
		if (s->modgen != modgen) {
			lp_recent_clear(s);
			s->modgen = modgen;
		}
		/* No recent stack holds (lp_stack_id looked): this unwind's
		 * trail replaces one of the set. */
		uint32_t set = lp_recent_set(fp);
		struct lp_recent *ways = s->recent_set[set];
		rc = &ways[s->recent_next[set]];
		s->recent_next[set] = (uint8_t)((s->recent_next[set] + 1) % LP_RECENT_WAYS);
		rc->fp = 0;
	}
	int n = lp_unwind(t, fp, frames, (int)lp_max_depth, 0, rc ? &rc->trail : NULL);
	if (n <= 0)
		return 0;
	if (LP_UNLIKELY(!s))
		return lp_define(t, buf, n);
	uint32_t id = lp_lookup(t, s, buf, n);
	if (id && rc->trail.n > 0) {
		lp_trail_pair(&rc->trail);
		rc->fp = (uintptr_t)fp;
		rc->id = id;
		s->recent_used |= 1ull << (rc - s->recent);
	}
	return id;
}

/* lp_lookup finds or defines the n frames at buf[1..n] in table s. */
static uint32_t lp_lookup(struct lp_thread *t, struct lp_stacktab *s, uint64_t *buf, int n)
{
	uintptr_t *frames = (uintptr_t *)&buf[1];
	uint64_t h = lp_hash_frames(frames, n);
	uint32_t mask = s->cap - 1;
	uint32_t j = (uint32_t)(h >> 32) & mask;
	for (;;) {
		struct lp_stent *e = &s->ents[j];
		if (e->gen != s->gen)
			break;
		if (e->hash == h && e->depth == n &&
		    memcmp(&s->arena[e->off], frames, (size_t)n * sizeof(uintptr_t)) == 0)
			return e->id;
		j = (j + 1) & mask;
	}
	uint32_t id = lp_define(t, buf, n);
	/* Keep the table at most 3/4 full; if memory runs out, stop caching. */
	if ((s->count + 1) * 4 > s->cap * 3) {
		if (lp_stacktab_grow(s) != 0)
			return id;
		mask = s->cap - 1;
		j = (uint32_t)(h >> 32) & mask;
		while (s->ents[j].gen == s->gen)
			j = (j + 1) & mask;
	}
	if (lp_arena_reserve(s, (size_t)n) != 0)
		return id;
	memcpy(&s->arena[s->arena_used], frames, (size_t)n * sizeof(uintptr_t));
	s->ents[j] = (struct lp_stent){
		.hash = h, .id = id, .depth = (uint16_t)n, .gen = s->gen, .off = s->arena_used};
	s->arena_used += (size_t)n;
	s->count++;
	return id;
}
