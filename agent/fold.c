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
 *
 * Pending blocks are live but not yet recorded: the collector's peak would
 * miss them. Each thread counts the bytes it holds pending (in its fold
 * area, where the others read it) and writes a PENDING record of all
 * threads' pending bytes at each new high of its own within a window
 * (LP_PEND_WINDOW_FLUSHES writes of its aggregates), after recording a
 * block at least as big at once, and when it exits: the collector adds it
 * to the recorded bytes in use at that time. The count is exact when
 * written: what another thread claimed is subtracted (lp_claimed), and
 * claims and evictions are counted before their records are dated.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LP_PMASK (LP_PEND - 1)
/* LP_HOOK(n, t): a point where a test that compiles this file in
 * (testdata/fixtures/mapbusy.c) pauses thread t; nothing in the agent. */
#ifndef LP_HOOK
#define LP_HOOK(n, t) ((void)0)
#endif
/* An eviction's ALLOC_LATE record and a free's FREE record, in bytes. */
#define LP_EVICT_FREE_BYTES ((6u + 3u) * 8u)
/* Write aggregates at least this often: after so many folded pairs, or
 * when the oldest is this many ticks old (~10 ms of TSC, ~34 ms of ns). */
#define LP_FOLD_FLUSH_PAIRS 65536u
#define LP_FOLD_FLUSH_TICKS (1ull << 25)

uint64_t *lp_pmap;

/* lp_claimed: per thread slot, the bytes of its pending entries that other
 * threads claimed (their frees). Only ever grows; the owner subtracts it
 * when it looks for a new high, off the hot path. */
static uint64_t lp_claimed[LP_TAG_SLOTS];

/* A thread's window of highs spans this many writes of its aggregates
 * (~40 ms, or 262,144 pairs); after LP_PEND_EXACT_HIGHS highs in a window,
 * a high must beat the last by 1/32. */
#define LP_PEND_WINDOW_FLUSHES 4u
#define LP_PEND_EXACT_HIGHS 32u
/* The least bytes pending written after a block recorded at once. */
#define LP_PEND_AGAIN_MIN 16384u

/*
 * The map's writers. Words change only in lp_fold_alloc, by a compare-
 * and-swap: threads allocating addresses whose words coincide must not
 * overwrite each other's. But the lock of the CAS costs ~2 ns of the ~22
 * an allocation and free cost the agent, ~16 where the store buffer is
 * full of ring stores, and most threads fold in a part of the map of
 * their own (their arena's: LP_PMAP_PART_SHIFT): the part's owner stores
 * plainly. A thread that would write a part another owns takes it over
 * (lp_own_part), at most LP_OWNER_MOVES times a part; then every writer
 * of the part CASes (shared). Parts, not addresses: two addresses have
 * words in common only within a part, so a part's owner is its words'.
 *
 * The owner stores between two checks of the part's owner, with its busy
 * flag (lp_busy) set around them; a thread taking over sets the owner to
 * LP_OWNER_MOVING, has every running thread pass a memory barrier
 * (membarrier's private expedited command), then waits while busy is
 * set. Either the owner's store of busy was visible to that wait, or its
 * second check came after the barrier and saw the part moving (a Dekker
 * handshake whose owner side costs no fence). Nobody CASes while a part
 * has an owner or moves (a CAS and the owner's plain store of the same
 * word would race): a writer that finds it so takes it over itself,
 * waiting for the move in progress. Without membarrier a part is never
 * taken over: the thread that cannot take it does not fold there (its
 * blocks are recorded at once).
 */
#define LP_OWNER_NONE 0xffffffffu   /* nobody wrote the part yet */
#define LP_OWNER_SHARED 0xfffffffeu /* every writer CASes */
#define LP_OWNER_MOVING 0xfffffffdu /* a take-over is in progress */
#define LP_OWNER_MOVES 8u
/* A line each: its owner reads it at every store, and the owners of
 * other parts must not lose the line to a take-over of this one. */
struct lp_part {
	uint32_t owner; /* a thread slot, or one of the above */
	uint32_t moves; /* take-overs so far */
} __attribute__((aligned(64)));
static struct lp_part lp_parts[LP_PMAP_PARTS] = {[0 ... LP_PMAP_PARTS - 1] = {.owner = LP_OWNER_NONE}};
/* lp_busy: per thread slot, set while the thread is between its two
 * checks of a part's owner. Only the thread writes its own: a flag of
 * the part's, written by whoever last read itself the owner, could be
 * cleared by a thread that had just lost the part, under the store of
 * the one that took it, which a third take-over then did not wait for.
 * A line each: it is written at every store of the map. In the agent's
 * memory, not the slot's fold area: the program can write over the
 * shared region, and a flag left set there would hang a take-over. */
static struct {
	uint32_t v;
} __attribute__((aligned(64))) lp_busy[LP_TAG_SLOTS];
static int lp_owner_lock;       /* a take-over at a time */
static pid_t lp_barrier_pid;    /* the process that registered for membarrier */
static int lp_barrier_no;       /* it cannot: for good (a seccomp filter stays) */
int lp_sandboxed;               /* LP_SANDBOX_*: a seccomp filter (lp_barrier_early, lp_sandbox_later) */

/* lp_barrier_ready readies lp_all_barrier: -1 if the kernel cannot do it,
 * or if a seccomp filter might not let it (a filter may kill the process
 * for a system call it does not know). */
static int lp_barrier_register(void);

static int lp_barrier_ready(void)
{
	if (lp_barrier_no || prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 0) {
		lp_barrier_no = 1;
		return -1;
	}
	return lp_barrier_register();
}

/* lp_barrier_register registers the process for membarrier's private
 * expedited command, once a process: -1 if the kernel cannot. */
static int lp_barrier_register(void)
{
	pid_t me = (pid_t)syscall(SYS_getpid);
	if (lp_barrier_pid != me) {
		if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0) != 0) {
			lp_barrier_no = 1;
			return -1;
		}
		lp_barrier_pid = me; /* a fork child registers again */
	}
	return 0;
}

/* lp_read_small reads the file at path (a /proc file of a few KiB) into
 * buf, NUL-terminated, as much as fits: its length, or -1. */
int lp_read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	for (ssize_t n; got < size - 1 && (n = read(fd, buf + got, size - 1 - got)) > 0;)
		got += (size_t)n;
	close(fd);
	buf[got] = 0;
	return (int)got;
}

/* lp_seccomp_inherited reads the seccomp mode the process started in
 * from /proc/self/status: 0 none, >0 a filter, -1 unknown. Not prctl: an
 * inherited filter may kill for prctl, never for openat and read (the
 * dynamic loader needed them). ~10 us, once a program. */
static int lp_seccomp_inherited(void)
{
	char buf[4096];
	if (lp_read_small("/proc/self/status", buf, sizeof buf) < 0)
		return -1;
	const char *line = strstr(buf, "\nSeccomp:");
	if (!line)
		return -1;
	line += sizeof "\nSeccomp:" - 1;
	while (*line == ' ' || *line == '\t')
		line++;
	return *line >= '0' && *line <= '9' ? *line - '0' : -1;
}

/* lp_barrier_early readies membarrier at the program's start, while the
 * process has one thread: once it has more, the kernel's registration
 * waits for an RCU grace period, ~8 ms here, which the first thread to take
 * a part of the map over (or the clock: lp_clock_claim) spent stopped in the
 * allocator. Under a seccomp filter the
 * program started with, the agent makes no system call such a filter may
 * kill for (membarrier, prctl): lp_sandboxed. */
void lp_barrier_early(void)
{
	int saved = errno;
	int mode = lp_seccomp_inherited();
	if (mode > 0) {
		lp_sandboxed = LP_SANDBOX_INHERITED;
		lp_barrier_no = 1;
	} else if (mode == 0 && (lp_fold_on || lp_clock_tsc)) {
		lp_barrier_register(); /* no filter: no need to ask prctl */
	}
	errno = saved;
}

/* lp_sandbox_later notes that the program installs a seccomp filter (its
 * prctl(PR_SET_SECCOMP) or seccomp(2) through syscall(), as libseccomp
 * does): from then on the agent makes none of the system calls a filter
 * might kill for, not even the /proc reads an inherited filter allowed.
 * Called before the filter is in place: a failed call only costs folding
 * across threads and thread names. */
void lp_sandbox_later(void)
{
	__atomic_store_n(&lp_barrier_no, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&lp_sandboxed, LP_SANDBOX_LATER, __ATOMIC_RELAXED);
}

/* lp_all_barrier has every running thread of the process execute a memory
 * barrier. Should the kernel fail it once registered, the caller waits a
 * while instead (a store waits in a store buffer for nanoseconds). */
static void lp_all_barrier(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) != 0)
		for (int i = 0; i < 1000; i++)
			sched_yield();
}

/* lp_barrier_sure has every running thread of the process execute a
 * memory barrier, passing through the kernel (an interrupt: whatever each
 * had begun before it is done): 0, or -1 when it cannot be sure. */
int lp_barrier_sure(void)
{
	int saved = errno;
	int rc = lp_barrier_ready() == 0 &&
		 syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0) == 0 ? 0 : -1;
	errno = saved;
	return rc;
}

/* lp_part_of is the part of the map that holds word m. */
static inline struct lp_part *lp_part_of(const uint64_t *m)
{
	return &lp_parts[(size_t)(m - lp_pmap) >> LP_PMAP_BITS];
}

/* lp_own_part makes part p of the map writable by thread slot me: 0, or
 * -1 when it cannot be (the caller does not fold). */
static __attribute__((noinline)) int lp_own_part(struct lp_part *p, uint32_t me)
{
	if (__atomic_load_n(&lp_barrier_no, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&p->owner, __ATOMIC_RELAXED) != LP_OWNER_NONE)
		return -1; /* taken: it stays its owner's */
	int rc = 0, saved = errno;
	while (__atomic_exchange_n(&lp_owner_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	uint32_t o = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
	if (o == LP_OWNER_NONE) {
		/* Nobody stores plainly: no handshake. */
		__atomic_store_n(&p->owner, me, __ATOMIC_SEQ_CST);
	} else if (o != me && o != LP_OWNER_SHARED) {
		if (lp_barrier_ready() != 0) {
			rc = -1; /* the owner keeps it */
		} else {
			uint32_t next = p->moves < LP_OWNER_MOVES ? me : LP_OWNER_SHARED;
			__atomic_store_n(&p->owner, LP_OWNER_MOVING, __ATOMIC_SEQ_CST);
			lp_all_barrier();
			/* (o is a slot: the lock keeps MOVING from being seen here.) */
			while (o < LP_TAG_SLOTS && __atomic_load_n(&lp_busy[o].v, __ATOMIC_ACQUIRE))
				sched_yield();
			p->moves++;
			__atomic_store_n(&p->owner, next, __ATOMIC_SEQ_CST);
		}
	}
	__atomic_store_n(&lp_owner_lock, 0, __ATOMIC_RELEASE);
	errno = saved;
	return rc;
}

/* lp_store_owned stores v in word m of part p if thread slot me owns the
 * part, between its two checks of the owner with its busy flag set (the
 * owner's side of the handshake, see above): 1, or 0 when it does not
 * own the part (any more). */
static inline int lp_store_owned(struct lp_thread *t, struct lp_part *p, uint64_t *m, uint64_t v)
{
	uint32_t me = t->slot_index; /* below LP_TAG_SLOTS: it folds */
	uint32_t *busy = &lp_busy[me & (LP_TAG_SLOTS - 1)].v;
	int done = 0;
	__atomic_store_n(busy, 1, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	if (LP_LIKELY(__atomic_load_n(&p->owner, __ATOMIC_RELAXED) == me)) {
		LP_HOOK(2, t);
		__atomic_store_n(m, v, __ATOMIC_RELAXED);
		done = 1;
	}
	__atomic_store_n(busy, 0, __ATOMIC_RELEASE);
	return done;
}

/* lp_map_set makes map word m, read as w, name tag: 0 if it changed
 * meanwhile (another thread's block) or if the thread may not write the
 * word's part (see lp_own_part). */
static inline int lp_map_set(struct lp_thread *t, uint64_t *m, uint64_t w, uint64_t tag)
{
	uint32_t me = t->slot_index;
	struct lp_part *p = lp_part_of(m);
	for (;;) {
		uint32_t o = __atomic_load_n(&p->owner, __ATOMIC_RELAXED);
		LP_HOOK(1, t);
		if (LP_LIKELY(o == me)) {
			if (LP_LIKELY(lp_store_owned(t, p, m, tag)))
				return 1;
			continue; /* taken over meanwhile */
		}
		if (o == LP_OWNER_SHARED)
			return __atomic_compare_exchange_n(m, &w, tag, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
		if (lp_own_part(p, me) != 0)
			return 0;
		/* w was read before the take-over: the owner until then may
		 * have named its own pending block in this word since (seen
		 * here: the take-over waited for its stores). Written over, that
		 * block would be named nowhere: its free would be written as
		 * one of an unknown block, its entry later as its allocation. */
		if (__atomic_load_n(m, __ATOMIC_ACQUIRE) != w)
			return 0;
	}
}

/* lp_map_forget empties map word m, which names the thread's entry just
 * evicted (tag), if the thread owns the word's part, and says whether it
 * did: a free of the block then finds the word naming nothing and looks
 * no further (at the entry, another block's by then, and in the table of
 * the thread's folds: lp_refreed), nor does anything else until a new
 * pending block at the address names it, whose fold overwrites the
 * address's place in that table. Otherwise the word stays (a compare-
 * and-swap, or taking the part over, would cost more than it saves). */
static inline int lp_map_forget(struct lp_thread *t, uint64_t *m, uint64_t tag)
{
	struct lp_part *p = lp_part_of(m);
	if (__atomic_load_n(&p->owner, __ATOMIC_RELAXED) != t->slot_index || __atomic_load_n(m, __ATOMIC_RELAXED) != tag)
		return 0;
	return lp_store_owned(t, p, m, 0);
}

/*
 * lp_pmap_setup gives the process an empty pending map. It is the agent's
 * own memory, not the shared region's: the collector never reads it. In
 * small pages: the words of nearby addresses are near (lp_pmap_at), so
 * the map's pages in use follow the heap's. (Huge pages, advised when
 * the map was a random hash of addresses, cost the program 0.1-2.3 ms at
 * their first touch, zeroing 2 MiB or compacting memory for it: the
 * allocation loop 114.5 -> 111.0 ms without them, 31 alternating runs,
 * and no slower per allocation over 10 million.)
 */
int lp_pmap_setup(void)
{
	size_t bytes = (size_t)LP_PMAP_PARTS * LP_PMAP_WORDS * 8u;
	/* A fork child has one thread: no owner of a part (nor the lock) but
	 * the parent's. */
	for (unsigned i = 0; i < LP_PMAP_PARTS; i++)
		lp_parts[i] = (struct lp_part){.owner = LP_OWNER_NONE};
	/* A flag the fork left set would have a take-over wait for a store
	 * that never comes. (Read first: the pages of unused slots stay
	 * untouched.) */
	for (unsigned i = 0; i < LP_TAG_SLOTS; i++)
		if (lp_busy[i].v)
			lp_busy[i].v = 0;
	lp_owner_lock = 0;
	if (lp_pmap) {
		/* A new region (a fork child, an attach again): empty it. */
		madvise(lp_pmap, bytes, MADV_DONTNEED);
		return 0;
	}
	uint64_t *p = lp_mmap(bytes);
	if (!p)
		return -1;
	lp_pmap = p;
	return 0;
}

static inline struct lp_fold *lp_fold_of(uint32_t slot)
{
	return (struct lp_fold *)(lp_folds + (uint64_t)slot * LP_FOLD_SIZE);
}

/* lp_named returns the entry map word w names if it still holds w's
 * address pending, else NULL. An entry's address changes only from 0 to a
 * block's address (by its owner) and back (by whoever takes it), and a
 * block's address is not handed out again before its free: so an entry
 * holding the address holds that block. */
static inline struct lp_pending *lp_named(uint64_t w)
{
	if (w == 0)
		return NULL;
	struct lp_pending *e = &lp_fold_of(LP_TAG_SLOT(w))->pend[LP_TAG_POS(w)];
	return __atomic_load_n(&e->addr, __ATOMIC_ACQUIRE) == LP_TAG_ADDR(w) ? e : NULL;
}

_Static_assert(sizeof(struct lp_fold) <= LP_FOLD_SIZE, "struct lp_fold fits its area");

/* lp_freed_at is the entry of address a in fold area f's table of blocks
 * freed by folds (a multiplicative hash: blocks of one size are often
 * 64 bytes apart). */
static inline struct lp_freed *lp_freed_at(struct lp_fold *f, uint64_t a)
{
	return &f->freed[((a >> 4) * 0x9e3779b97f4a7c15ull) >> (64 - LP_FREED_BITS)];
}

/* lp_note_freed remembers that the thread's fold freed e's block p, by a
 * free of fn returning to ra: folded, the pair leaves no record a second
 * free could be matched with. A few stores to a line the thread's folds
 * keep cached. The address goes last: see lp_refreed. */
static inline void lp_note_freed(struct lp_fold *f, const struct lp_pending *e, uint64_t p, uint64_t ra,
				 unsigned fn)
{
	struct lp_freed *r = lp_freed_at(f, p);
	r->ra = ra;
	r->who = e->stack | (uint64_t)(e->fn | fn << 8) << 32;
	__atomic_store_n(&r->addr, p, __ATOMIC_RELEASE);
}

/* lp_forget_freed drops what fold area f remembers of a folded block at
 * p: a block at p is recorded now, so a free of p is no second free of
 * the folded one. (Only a hint less: the collector checks anyway.) */
static inline void lp_forget_freed(struct lp_fold *f, uint64_t p)
{
	struct lp_freed *r = lp_freed_at(f, p);
	uint64_t a = p;
	if (__atomic_load_n(&r->addr, __ATOMIC_RELAXED) == p)
		__atomic_compare_exchange_n(&r->addr, &a, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/*
 * lp_refreed is called for a free or realloc of p whose map word w names
 * p but no pending block: when the table of w's thread says one of its
 * folds freed a block at p, it writes a REFREE record, and the caller's
 * record that follows may free that block a second time. The collector
 * decides (p may have been allocated again since, recorded at once: then
 * the free is proper). Another thread's entry may change while it is read:
 * the address is read again after the rest, which the owner writes last;
 * a hint torn by a race of the program's own is only a wrong hint.
 */
static __attribute__((noinline)) void lp_refreed(struct lp_thread *t, uint64_t w, uint64_t p)
{
	uint32_t slot = LP_TAG_SLOT(w);
	if (slot >= lp_hdr->slot_count)
		return;
	struct lp_freed *r = lp_freed_at(lp_fold_of(slot), p);
	if (__atomic_load_n(&r->addr, __ATOMIC_ACQUIRE) != p)
		return;
	uint64_t ra = r->ra, who = r->who;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	unsigned afn = (unsigned)(who >> 32) & 0xff, ffn = (unsigned)(who >> 40) & 0xff;
	/* A record the collector cannot decode would cost the ring's others. */
	if (__atomic_load_n(&r->addr, __ATOMIC_RELAXED) != p || afn == 0 || afn > LP_FN_MAX || ffn == 0 ||
	    ffn > LP_FN_MAX)
		return;
	uint64_t rec[6] = {LP_HDR(LP_REC_REFREE, afn, 6, (uint32_t)who), 0, p, 0, ra, ffn};
	lp_put(t, rec, 6);
}

/* lp_take_entry takes entry e, which held a, copying it to *out first; 0
 * if another thread took it meanwhile. Only a thread freeing a, or a's
 * owner evicting it, competes: a cannot be allocated again before then,
 * so the copy is of the entry taken. */
static inline int lp_take_entry(struct lp_pending *e, uint64_t a, struct lp_pending *out)
{
	*out = *e;
	out->addr = a;
	return __atomic_compare_exchange_n(&e->addr, &a, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* lp_pend_window starts a window of highs: the next pending block writes
 * the bytes pending. */
static inline void lp_pend_window(struct lp_thread *t)
{
	t->pend_high = 0;
	t->pend_highs = 0;
	t->pend_trig = __atomic_load_n(&lp_claimed[t->slot_index], __ATOMIC_RELAXED);
}

void lp_fold_attach(struct lp_thread *t, struct lp_fold *f)
{
	t->fold = NULL;
	if (!f || t->slot_index >= LP_TAG_SLOTS)
		return;
	f->head = 0;
	f->count = 0;
	/* Nothing of an earlier thread of the slot is pending any more (the
	 * collector took it): clear what a killed one may have left. */
	for (unsigned i = 0; i < LP_PEND; i++)
		__atomic_store_n(&f->pend[i].addr, 0, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < LP_AGG; i++)
		f->agg[i].used = 0;
	t->folded = 0;
	t->agg_oldest = 0;
	t->agg_last = 0;
	/* Claims of the slot's earlier threads are counted already. */
	__atomic_store_n(&f->pend_bytes, __atomic_load_n(&lp_claimed[t->slot_index], __ATOMIC_ACQUIRE),
			 __ATOMIC_RELAXED);
	t->pend_flushes = 0;
	t->fold = f;
	lp_pend_window(t);
}

/* lp_pend_sub takes n bytes out of the count of the calling thread's own
 * fold area f: only it writes the count (others read it). */
static inline void lp_pend_sub(struct lp_fold *f, uint64_t n)
{
	__atomic_store_n(&f->pend_bytes, f->pend_bytes - n, __ATOMIC_RELAXED);
}

/* lp_pend_margin is how much a high must beat the last one by. */
static inline uint64_t lp_pend_margin(const struct lp_thread *t)
{
	return t->pend_highs < LP_PEND_EXACT_HIGHS ? 0 : t->pend_high >> 5;
}

/* lp_held is the bytes pending in slot s's FIFO, of fold area f. */
static inline int64_t lp_held(const struct lp_fold *f, uint32_t s)
{
	return (int64_t)(__atomic_load_n(&f->pend_bytes, __ATOMIC_RELAXED) -
			 __atomic_load_n(&lp_claimed[s], __ATOMIC_ACQUIRE));
}

/* lp_all_held is the bytes pending in every thread's FIFO: the caller's
 * held plus the others', exited ones' too (what they left pending is
 * live until freed, or until the collector takes it: it dates that after
 * marking the slot LP_SLOT_TAKING). A thread that is evicting a block
 * subtracts it before dating its record: no block counts here and in the
 * records of that time both. */
static uint64_t lp_all_held(const struct lp_thread *t, uint64_t held)
{
	const struct lp_slot *slots = (const struct lp_slot *)((unsigned char *)lp_hdr + LP_HEADER_SIZE);
	uint32_t n = __atomic_load_n(&lp_hdr->slots_used, __ATOMIC_ACQUIRE);
	if (n > LP_TAG_SLOTS)
		n = LP_TAG_SLOTS;
	if (n > lp_slot_count) /* written over by the program */
		n = lp_slot_count;
	for (uint32_t s = 0; s < n; s++) {
		uint32_t st = __atomic_load_n(&slots[s].state, __ATOMIC_ACQUIRE);
		if (s == t->slot_index || (st != LP_SLOT_ACTIVE && st != LP_SLOT_EXITED))
			continue;
		int64_t h = lp_held(lp_fold_of(s), s);
		if (h > 0)
			held += (uint64_t)h;
	}
	return held;
}

/* lp_pend_write writes a PENDING record dated now: the bytes pending in all
 * threads, the caller's held among them, if any. */
static void lp_pend_write(struct lp_thread *t, uint64_t now, int64_t held)
{
	uint64_t all = lp_all_held(t, held > 0 ? (uint64_t)held : 0);
	if (all > 0) {
		uint64_t w[3] = {LP_HDR(LP_REC_PENDING, 0, 3, 0), now, all};
		lp_put(t, w, 3);
	}
}

/* lp_pend_high writes a PENDING record, the bytes pending in all threads,
 * if the thread's own beat its last high. */
static __attribute__((noinline)) void lp_pend_high(struct lp_thread *t)
{
	int64_t held = lp_held(t->fold, t->slot_index);
	if (held > 0 && (uint64_t)held > t->pend_high + lp_pend_margin(t)) {
		/* Dated, then counted again: a claim or eviction the count
		 * misses writes its records later than this. */
		uint64_t now = lp_ts();
		held = lp_held(t->fold, t->slot_index);
		if (held > 0 && (uint64_t)held > t->pend_high + lp_pend_margin(t)) {
			lp_pend_write(t, now, held);
			t->pend_high = (uint64_t)held;
			t->pend_highs++;
		}
	}
	/* In fold->pend_bytes terms: past this, held may beat the high. */
	t->pend_trig = t->pend_high + lp_pend_margin(t) + __atomic_load_n(&lp_claimed[t->slot_index], __ATOMIC_RELAXED);
}

/* lp_pend_again writes the pending bytes now: a block of n bytes was just
 * recorded, so the heap in use plus them may be a new peak. Not for a
 * smaller block, nor when under LP_PEND_AGAIN_MIN bytes are pending: such
 * blocks are most of a program's reallocs (a record after each made
 * python3's trace 13 % bigger; a loop of reallocs with 512 bytes pending,
 * 55 %), and the peak at one of them would be low by the bytes pending at
 * most. */
static inline void lp_pend_again(struct lp_thread *t, uint64_t n)
{
	int64_t held = lp_held(t->fold, t->slot_index);
	if (held < (int64_t)LP_PEND_AGAIN_MIN || n < (uint64_t)held)
		return;
	lp_pend_window(t);
	lp_pend_high(t);
}

/* lp_fold_exiting writes the bytes pending in all threads as the calling
 * thread exits. What it leaves pending stays live (others free it, or the
 * collector takes it): the heap may peak now, with no thread's high to say
 * so (workers handing their blocks to main). */
void lp_fold_exiting(struct lp_thread *t)
{
	if (!t->fold || t->in_fold)
		return;
	lp_enter(&t->in_fold);
	uint64_t now = lp_ts();
	lp_pend_write(t, now, lp_held(t->fold, t->slot_index));
	lp_leave(&t->in_fold);
}

/* lp_fold_recorded is told that the thread recorded a block of n bytes at
 * once (not pending): see lp_pend_again. */
void lp_fold_recorded(struct lp_thread *t, size_t n)
{
	if (!t->fold || t->in_fold)
		return;
	lp_enter(&t->in_fold);
	lp_pend_again(t, n);
	lp_leave(&t->in_fold);
}

/* lp_commit_words makes w the ALLOC_LATE record of a copy of a pending
 * entry of the thread tid, dated now. */
static inline __attribute__((always_inline)) void lp_commit_words(uint64_t *w, const struct lp_pending *e, int tid,
								  uint64_t now)
{
	w[0] = LP_HDR(LP_REC_ALLOC_LATE, e->fn, 6, e->stack);
	w[1] = now;
	w[2] = e->addr;
	w[3] = e->size;
	w[4] = e->ts;
	w[5] = (uint64_t)(uint32_t)tid;
}

/* lp_commit_inline writes a copy of a pending entry of the thread tid as
 * an ALLOC_LATE record, dated now (0: when written). Inline where every
 * block that outlives the window passes (lp_evict_pending); elsewhere
 * lp_commit. */
static inline __attribute__((always_inline)) void lp_commit_inline(struct lp_thread *t, const struct lp_pending *e,
								   int tid, uint64_t now)
{
	uint64_t w[6];
	lp_commit_words(w, e, tid, now);
	lp_put_rec(t, w, 6);
}

static __attribute__((noinline)) void lp_commit(struct lp_thread *t, const struct lp_pending *e, int tid,
						uint64_t now)
{
	lp_commit_inline(t, e, tid, now);
}

/* lp_evict_pending writes entry e, which held a, unless taken meanwhile,
 * and returns the record's date. after: dated after every earlier load
 * (lp_ts_after), so that a free's record may take the same date. rec: the
 * record's words go there, for the caller to write (rec[0] 0: none),
 * instead of to the ring. */
static inline __attribute__((always_inline)) uint64_t lp_evict_pending_inline(struct lp_thread *t,
									     struct lp_pending *e, uint64_t a,
									     int after, uint64_t *rec)
{
	/* Dated before the take: a thread that frees the block and finds it
	 * taken writes its free after this time, and the collector puts
	 * frees after the record's time. */
	struct lp_fold *f = t->fold;
	uint64_t size = e->size;
	__atomic_fetch_sub(&f->pend_bytes, size, __ATOMIC_SEQ_CST); /* before the date: lp_all_held */
	uint64_t now = after ? lp_ts_after() : lp_ts();
	struct lp_pending copy;
	if (lp_take_entry(e, a, &copy)) {
		/* Nothing looks the address up in the table of folds while
		 * no map word names it (lp_map_forget). */
		if (!lp_map_forget(t, lp_pmap_at(a), LP_TAG(a, t->slot_index, (uint32_t)(e - f->pend))))
			lp_forget_freed(f, a);
		if (rec)
			lp_commit_words(rec, &copy, t->tid, now);
		else
			lp_commit_inline(t, &copy, t->tid, now);
	} else {
		__atomic_fetch_add(&f->pend_bytes, size, __ATOMIC_RELAXED); /* its taker counts it */
		if (rec)
			rec[0] = 0;
	}
	return now;
}

static __attribute__((noinline)) void lp_evict_pending(struct lp_thread *t, struct lp_pending *e, uint64_t a)
{
	lp_evict_pending_inline(t, e, a, 0, NULL);
}

/* lp_evict_next prefetches the map word of the FIFO's oldest entry, at
 * head, which the next eviction reads (lp_map_forget): the block was
 * allocated LP_PEND allocations ago, and its word is no longer cached
 * where blocks outlive the window (a miss an eviction otherwise). */
static inline void lp_evict_next(const struct lp_fold *f, uint32_t head)
{
	__builtin_prefetch(lp_pmap_at(__atomic_load_n(&f->pend[head].addr, __ATOMIC_RELAXED)), 1);
}

/* lp_evict makes room: the oldest entry goes, written if still pending
 * (in a full FIFO of a program that frees its blocks soon, the oldest is
 * usually freed already: that path stays inline). */
static inline void lp_evict(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	/* head and count are in the region: masked, as the program may have
	 * written over them. */
	uint32_t head = f->head & LP_PMASK;
	struct lp_pending *e = &f->pend[head];
	f->head = (head + 1) & LP_PMASK;
	f->count--;
	uint64_t a = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
	lp_evict_next(f, (head + 1) & LP_PMASK);
	if (a)
		lp_evict_pending(t, e, a);
}

/*
 * lp_fold_evict_dated is called just before the thread writes the record
 * of a free that did not fold: when its FIFO is full and the oldest entry
 * still pending (blocks that outlive the window: each allocation would
 * evict one), that entry goes now, dated after every earlier load, and
 * the date is returned for the free's record too; else 0 (the record is
 * dated when written). One read of the clock for the two records where
 * the allocation's eviction took one of its own (a read of the TSC after
 * an lfence is among the dearest steps of a pair). The free's block is
 * not pending in the thread's FIFO (it would have folded, or been taken).
 * Only when the ring has room for both records: the collector merges a
 * record that becomes visible long after its date out of its place, and a
 * free applied late could make a peak that never was.
 */
uint64_t lp_fold_evict_dated(struct lp_thread *t, uint64_t *rec)
{
	struct lp_fold *f = t->fold;
	rec[0] = 0;
	if (f->count < LP_PEND || t->depth != 0 || t->res + LP_EVICT_FREE_BYTES > t->tail_seen + t->ring_mask + 1)
		return 0;
	uint32_t head = f->head & LP_PMASK;
	struct lp_pending *e = &f->pend[head];
	uint64_t a = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
	if (!a)
		return 0; /* a hole: the next allocation drops it, without a date */
	f->head = (head + 1) & LP_PMASK;
	f->count--;
	lp_evict_next(f, (head + 1) & LP_PMASK);
	return lp_evict_pending_inline(t, e, a, 1, rec);
}

/* lp_write_now writes the thread's new entry e, of n bytes, as an
 * allocation at once instead of keeping it pending, and frees the entry.
 * Inlined: as a call of its own (cold or not) it cost lp_fold_alloc's
 * common path 3 instructions a pair (callgrind on the loop). */
static inline __attribute__((always_inline)) void lp_write_now(struct lp_thread *t, struct lp_pending *e, size_t n)
{
	lp_commit(t, e, t->tid, 0);
	lp_forget_freed(t->fold, e->addr);
	e->addr = 0;
	lp_pend_again(t, n);
}

/* lp_fold_alloc keeps the thread's new block p (n bytes, stack sid, made
 * by fn) pending; m is lp_pmap_at(p). */
void lp_fold_alloc(struct lp_thread *t, unsigned fn, void *p, size_t n, uint32_t sid, uint64_t *m)
{
	struct lp_fold *f = t->fold;
	if (f->count >= LP_PEND) /* more: written over by the program */
		lp_evict(t);
	uint32_t pos = (f->head + f->count) & LP_PMASK;
	struct lp_pending *e = &f->pend[pos];
	uint64_t a = (uint64_t)p;
	t->last_alloc = a;
	e->size = n;
	e->ts = lp_ts_pending();
	e->stack = sid;
	e->fn = (uint8_t)fn;
	if (LP_UNLIKELY(a >> 48 || (a & 15))) {
		/* Not nameable by a map word: written at once. */
		e->addr = a;
		lp_write_now(t, e, n);
		return;
	}
	__atomic_store_n(&e->addr, a, __ATOMIC_RELEASE);
	uint64_t tag = LP_TAG(a, t->slot_index, pos);
	uint64_t w = __atomic_load_n(m, __ATOMIC_ACQUIRE);
	/* A word naming this address names a block freed since (malloc just
	 * handed the address out again): no entry holds it pending unless its
	 * free went unseen, which the entry's eviction writes as a leak either
	 * way. Not read: the entry is another load that waits for w. */
	if (w != tag && ((LP_TAG_ADDR(w) != a && lp_named(w)) || !lp_map_set(t, m, w, tag))) {
		/* The word names another pending block (or just changed):
		 * this one is written at once. Nothing names its entry. */
		lp_write_now(t, e, n);
		return;
	}
	f->count++;
	uint64_t pend = f->pend_bytes + n;
	__atomic_store_n(&f->pend_bytes, pend, __ATOMIC_RELAXED);
	if (LP_UNLIKELY(pend > t->pend_trig))
		lp_pend_high(t);
}

/* lp_family holds each allocator function's family: 2 for new and
 * delete, 3 for their array forms, 1 for the C functions. (A table: the
 * same in 2 bits of a 64-bit constant took twice the instructions, its
 * shifts by a variable count.) */
static const uint8_t lp_family[16] = {
	[LP_FN_MALLOC] = 1, [LP_FN_CALLOC] = 1, [LP_FN_REALLOC] = 1, [LP_FN_REALLOCARRAY] = 1,
	[LP_FN_FREE] = 1, [LP_FN_MEMALIGN] = 1, [LP_FN_POSIX_MEMALIGN] = 1, [LP_FN_ALIGNED_ALLOC] = 1,
	[LP_FN_VALLOC] = 1, [LP_FN_PVALLOC] = 1, [LP_FN_NEW] = 2, [LP_FN_DELETE] = 2,
	[LP_FN_NEW_ARRAY] = 3, [LP_FN_DELETE_ARRAY] = 3,
};

_Static_assert(LP_FN_MAX < 16, "lp_family: one entry per allocator function");

/* lp_same_family says whether a block made by fn a may be freed by fn b. */
static inline int lp_same_family(unsigned a, unsigned b)
{
	return lp_family[a & 15] == lp_family[b & 15];
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
	/* Every LP_PEND_WINDOW_FLUSHES times, a new window: the next pending
	 * block writes the bytes pending again (the recorded heap may have
	 * grown since the last high). */
	if (++t->pend_flushes % LP_PEND_WINDOW_FLUSHES == 0)
		lp_pend_window(t);
}

/* lp_agg_is says whether aggregate a is in use for the pairs of key (the
 * two stacks) and fns (the two functions and the used flag, with pad0 0, as
 * lp_agg_add makes them): two compares instead of four. */
static inline int lp_agg_is(const struct lp_aggent *a, uint64_t key, uint32_t fns)
{
	uint64_t k;
	uint32_t x;
	memcpy(&k, &a->astack, 8);
	memcpy(&x, &a->afn, 4);
	return k == key && x == fns;
}

/* lp_agg_count counts a pair of size bytes, allocated at ts, in a. */
static inline void lp_agg_count(struct lp_aggent *a, uint64_t size, uint64_t ts, int temporary)
{
	a->pairs++;
	a->bytes += size;
	a->temporary += (uint64_t)temporary;
	if (ts < a->first)
		a->first = ts;
}

static void lp_agg_add(struct lp_thread *t, const struct lp_pending *e, uint32_t fstack, unsigned ffn,
		       int temporary)
{
	struct lp_fold *f = t->fold;
	uint64_t key = e->stack | (uint64_t)fstack << 32;
	uint32_t fns = e->fn | ffn << 8 | 1u << 16;
	/* Most pairs are of the aggregate of the previous one. */
	struct lp_aggent *a = &f->agg[t->agg_last];
	if (LP_UNLIKELY(!lp_agg_is(a, key, fns))) {
		uint32_t h = (e->stack * 0x9e3779b1u) ^ (fstack * 0x85ebca6bu) ^ e->fn ^ (ffn << 8);
		for (int tries = 0;; tries++) {
			unsigned k = 0;
			for (; k < LP_AGG; k++) {
				a = &f->agg[(h + k) & (LP_AGG - 1)];
				if (!a->used) {
					*a = (struct lp_aggent){.astack = e->stack, .fstack = fstack, .afn = e->fn,
								.ffn = (uint8_t)ffn, .used = 1, .first = e->ts};
					break;
				}
				if (lp_agg_is(a, key, fns))
					break;
			}
			if (k < LP_AGG || tries == 1)
				break;
			lp_flush_aggs(t); /* full: write them all, then there is room */
		}
		t->agg_last = (uint32_t)(a - f->agg);
	}
	lp_agg_count(a, e->size, e->ts, temporary);
	/* Blocks are freed in any order: the oldest pair is the smallest
	 * time, and ages are signed. */
	if (t->agg_oldest == 0 || e->ts < t->agg_oldest)
		t->agg_oldest = e->ts;
	if (++t->folded >= LP_FOLD_FLUSH_PAIRS || (int64_t)(e->ts - t->agg_oldest) > (int64_t)LP_FOLD_FLUSH_TICKS)
		lp_flush_aggs(t);
}

/*
 * lp_fold_free_quick folds the free of p by fn in the common case: the
 * thread's own pending block, of its family, into the aggregate of the
 * previous pair, with no aggregates due to be written. 1 when it did; 0,
 * having changed nothing, when no map word names p (nothing to fold: the
 * free is written as it is, as lp_fold_free would find); -1, having
 * changed nothing, when lp_fold_free is to do it. A leaf (it calls
 * nothing): the hooks' recording of a free needs no registers saved for
 * it. Inside in_fold like the rest: a signal handler's own allocations
 * and frees must not move the entry or the aggregates meanwhile.
 */
__attribute__((always_inline)) inline int lp_fold_free_quick(struct lp_thread *t, unsigned fn, void *p, void *fp)
{
	if (lp_fold_free_stacks)
		return -1; /* each pair keeps its free's stack */
	lp_enter(&t->in_fold);
	uint64_t w = __atomic_load_n(lp_pmap_at((uint64_t)p), __ATOMIC_ACQUIRE);
	struct lp_fold *f = t->fold;
	uint32_t pos = LP_TAG_POS(w);
	struct lp_pending *e = &f->pend[pos];
	if (LP_TAG_ADDR(w) != (uint64_t)p)
		goto not_pending;
	if (LP_TAG_SLOT(w) != t->slot_index || __atomic_load_n(&e->addr, __ATOMIC_RELAXED) != (uint64_t)p ||
	    !lp_same_family(e->fn, fn))
		goto other;
	/* Fewer values live at once: fewer registers (none saved). */
	int newest = pos == ((f->head + f->count - 1) & LP_PMASK);
	int temporary = t->last_alloc == (uint64_t)p;
	struct lp_aggent *a = &f->agg[t->agg_last];
	if (!lp_agg_is(a, e->stack, e->fn | fn << 8 | 1u << 16) || t->folded + 1 >= LP_FOLD_FLUSH_PAIRS)
		goto other;
	uint64_t ts = e->ts, oldest = t->agg_oldest;
	if (oldest == 0 || ts < oldest)
		oldest = ts;
	if ((int64_t)(ts - oldest) > (int64_t)LP_FOLD_FLUSH_TICKS)
		goto other;
	/* As lp_fold_free and lp_agg_add would. */
	__atomic_store_n(&e->addr, 0, __ATOMIC_RELAXED);
	uint64_t size = e->size;
	lp_pend_sub(f, size);
	if (newest)
		f->count--;
	if (temporary)
		t->last_alloc = 0;
	t->agg_oldest = oldest;
	t->folded++;
	lp_agg_count(a, size, ts, temporary);
	lp_note_freed(f, e, (uint64_t)p, ((const uint64_t *)fp)[1], fn);
	lp_leave(&t->in_fold);
	return 1;
other:
	lp_leave(&t->in_fold);
	return -1;
not_pending:
	lp_leave(&t->in_fold);
	return 0;
}

/* lp_claim takes another thread's pending entry e of address p and writes
 * the allocation on its behalf, before the caller writes the free. */
static void lp_claim(struct lp_thread *t, struct lp_pending *e, uint64_t p, uint32_t slot)
{
	struct lp_pending copy;
	if (!lp_take_entry(e, p, &copy))
		return; /* its owner evicted it: the allocation is written */
	/* Counted before the records are dated (lp_pend_high). */
	__atomic_fetch_add(&lp_claimed[slot], copy.size, __ATOMIC_RELEASE);
	lp_forget_freed(lp_fold_of(slot), p);
	int owner = ((struct lp_slot *)((unsigned char *)lp_hdr + LP_HEADER_SIZE))[slot].tid;
	lp_commit(t, &copy, owner, 0);
}

int lp_fold_free(struct lp_thread *t, unsigned fn, void *p, void *fp)
{
	uint64_t w = __atomic_load_n(lp_pmap_at((uint64_t)p), __ATOMIC_ACQUIRE);
	if (LP_TAG_ADDR(w) != (uint64_t)p)
		return 0;
	uint32_t slot = LP_TAG_SLOT(w);
	if (LP_UNLIKELY(slot != t->slot_index)) {
		/* Another thread's block: the collector must see both, the
		 * allocation first. */
		struct lp_pending *e = lp_named(w);
		if (e)
			lp_claim(t, e, (uint64_t)p, slot);
		else
			lp_refreed(t, w, (uint64_t)p);
		return 0;
	}
	/* Our own entry: only we write it but for takers of its address. */
	uint32_t pos = LP_TAG_POS(w);
	struct lp_pending *e = &t->fold->pend[pos];
	if (__atomic_load_n(&e->addr, __ATOMIC_RELAXED) != (uint64_t)p) {
		lp_refreed(t, w, (uint64_t)p);
		return 0;
	}
	if (!lp_same_family(e->fn, fn)) {
		/* A mismatched free: both written. */
		struct lp_pending copy;
		if (lp_take_entry(e, (uint64_t)p, &copy)) {
			lp_pend_sub(t->fold, copy.size);
			lp_forget_freed(t->fold, (uint64_t)p);
			lp_commit(t, &copy, t->tid, 0);
		}
		return 0;
	}
	/* Our own, and only a free of the same block (a double free) could
	 * compete for it: no atomic read-modify-write. */
	__atomic_store_n(&e->addr, 0, __ATOMIC_RELAXED);
	lp_pend_sub(t->fold, e->size);
	/* A folded pair's free is proper: its stack would only ever be shown
	 * to find root causes. (The entry's other fields stay until the
	 * thread reuses it.) */
	uint32_t fstack = lp_fold_free_stacks ? lp_stack_id(t, fp) : 0;
	int temporary = t->last_alloc == (uint64_t)p;
	lp_note_freed(t->fold, e, (uint64_t)p, ((const uint64_t *)fp)[1], fn);
	lp_agg_add(t, e, fstack, fn, temporary);
	if (temporary)
		t->last_alloc = 0;
	/* The newest entry (the usual temporary) gives its place back. */
	struct lp_fold *f = t->fold;
	if (pos == ((f->head + f->count - 1) & LP_PMASK))
		f->count--;
	return 1;
}

void lp_fold_take(struct lp_thread *t, void *p)
{
	uint64_t w = __atomic_load_n(lp_pmap_at((uint64_t)p), __ATOMIC_ACQUIRE);
	if (LP_TAG_ADDR(w) != (uint64_t)p)
		return;
	struct lp_pending *e = lp_named(w);
	if (e)
		lp_claim(t, e, (uint64_t)p, LP_TAG_SLOT(w));
	else
		lp_refreed(t, w, (uint64_t)p);
}

/* lp_fold_flush writes out what the thread keeps pending and its
 * aggregates, unless it is in fold.c already (a signal handler
 * interrupted it there). */
void lp_fold_flush(struct lp_thread *t)
{
	struct lp_fold *f = t->fold;
	if (!f || t->in_fold || (f->count == 0 && t->folded == 0))
		return; /* nothing pending, no aggregate in use */
	lp_enter(&t->in_fold);
	if (f->count > LP_PEND)
		f->count = LP_PEND; /* written over by the program */
	while (f->count > 0)
		lp_evict(t);
	lp_flush_aggs(t);
	lp_leave(&t->in_fold);
}
