/*
 * agent.h - internals of the preload agent (libleakpath.so) shared between
 * its source files. Nothing here is visible to the target: the library is
 * built with -fvisibility=hidden and exports only the interposed functions.
 *
 * Rules for every line of agent code:
 *  - never allocate through the hooked allocator on the recording path;
 *    anything that may allocate runs with t->busy set;
 *  - never print, never touch errno visibly, never install signal handlers;
 *  - if anything is wrong (no collector, no memory), pass through silently.
 */
#ifndef LP_AGENT_H
#define LP_AGENT_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "lp_wire.h"

#define LP_HIDDEN __attribute__((visibility("hidden")))
#define LP_EXPORT __attribute__((visibility("default")))
#define LP_LIKELY(x) __builtin_expect(!!(x), 1)
#define LP_UNLIKELY(x) __builtin_expect(!!(x), 0)

struct lp_stacktab;
struct lp_ucache;
struct timespec;

/* lp_thread is the per-thread state, in initial-exec TLS (no allocation on
 * first touch, unlike dynamic TLS). Zero means "not initialised yet". */
struct lp_thread {
	int state;        /* 0 new, 1 recording, 2 pass-through (no slot) */
	int busy;         /* >0 while agent code that may allocate runs */
	int through;      /* of which LP_BUSY_CALLs: the program's allocator called through */
	int depth;        /* record writers active on this thread (signals nest) */
	int in_stack;     /* inside lp_stack_id: a signal handler must not touch the tables */
	int in_fold;      /* inside fold.c: the same for the fold area */
	int tid;
	int forking;         /* between fork's prepare and parent/child handlers */
	uint64_t fork_id;    /* id of this thread's fork in progress */
	uint32_t slot_index;
	struct lp_slot *slot;
	unsigned char *ring;
	uint64_t ring_mask;  /* its size less 1 (a power of two) */
	uint64_t res;        /* bytes reserved in the ring (>= slot->head) */
	uint64_t tail_seen;  /* last tail read from the collector */
	uint64_t gen;        /* lp_region_gen this state belongs to */
	uintptr_t stack_hi;  /* highest address of this thread's stack */
	uintptr_t stack_lo;
	struct lp_stacktab *stacks;
	struct lp_ucache *ucache;
	struct lp_fold *fold;  /* the slot's fold area; NULL: no folding */
	uint64_t last_alloc;   /* address of the thread's latest allocation */
	uint64_t folded;       /* pairs folded since the aggregates were written */
	uint64_t agg_oldest;   /* ts of the oldest pair in them */
	uint32_t agg_last;     /* index of the aggregate of the latest pair */
	/* Bytes pending (fold.c): fold->pend_bytes counts what this thread put in
	 * its FIFO less what it took out; other threads' claims count in
	 * lp_claimed[slot_index]. Past pend_trig, lp_pend_high looks for a
	 * new high in the window (pend_high). */
	uint64_t pend_trig, pend_high;
	uint32_t pend_highs;   /* highs written in this window */
	uint32_t pend_flushes; /* aggregates written: windows end every LP_PEND_WINDOW_FLUSHES */
	int scopes;            /* scopes open on this thread (scope.c): no folding while > 0 */
	int ignoring;          /* __lsan_disable()s open (lsan.c): no folding, no leaks while > 0 */
};

extern __thread struct lp_thread lp_tls __attribute__((tls_model("initial-exec")));

/* lp_enter and lp_leave count the calling thread into and out of a section
 * a signal handler on it must know about (busy, in_fold, in_stack): their
 * compiler barriers keep the section's memory accesses between the two
 * (inlined across files, the section's code is no opaque call any more). */
static inline void lp_enter(int *count)
{
	(*count)++;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static inline void lp_leave(int *count)
{
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	(*count)--;
}

static inline void lp_busy_unwind(struct lp_thread **t)
{
	if (*t) {
		lp_leave(&(*t)->busy);
		(*t)->through--;
	}
}

/* LP_BUSY_CALL runs call with thread t's (NULL: none) recording suspended,
 * for a call that may throw (an operator new of the program's allocator,
 * its bad_alloc or its own exception): the count comes down when the
 * call returns and when an exception unwinds through the caller's frame
 * (the agent is built with -fexceptions: the cleanup is a landing pad;
 * families.c forwards its personality routine to the unwinder's). Left
 * raised, the thread's allocations after a catch went unrecorded. */
#define LP_BUSY_CALL(t, call)                                                                  \
	do {                                                                                   \
		struct lp_thread *lp_bg_ __attribute__((cleanup(lp_busy_unwind))) = (t);       \
		if (lp_bg_) {                                                                  \
			lp_bg_->through++;                                                     \
			lp_enter(&lp_bg_->busy);                                               \
		}                                                                              \
		call;                                                                          \
	} while (0)

/* Process-wide recording state. */
extern struct lp_header *lp_hdr;   /* NULL: not recording */
extern unsigned char *lp_folds;    /* the region's fold areas; NULL: no folding */
extern uint32_t lp_slot_count;     /* the region's slots */
extern int lp_region_pid;          /* the process the region was made for */
extern uint64_t lp_region_gen;      /* bumped each time the region changes (fork) */
extern int lp_free_stacks;          /* capture stacks of frees */
extern int lp_fold_free_stacks;     /* and of frees that fold */
extern int lp_exact_pending;        /* date pending allocations exactly (LP_HF_EXACT_TIMES) */
extern int lp_fold_on;              /* fold short-lived allocations */
extern int lp_sandboxed; /* a seccomp filter: 0 none, or one of these (fold.c) */
extern int lp_attach_mode; /* dlopen'ed by leakpath attach, not preloaded (agent.c) */
#define LP_SANDBOX_INHERITED 1 /* the program started under it: no prctl, /proc reads */
#define LP_SANDBOX_LATER 2     /* the program installed it: no system call that can be avoided */
LP_HIDDEN void lp_sandbox_later(void);
LP_HIDDEN int lp_read_small(const char *path, char *buf, size_t size);
LP_HIDDEN void lp_exe_funcs(void (*each)(void *arg, const char *name, size_t room, uintptr_t value, size_t size),
			    void *arg); /* exesyms.c */
LP_HIDDEN uint32_t lp_gnu_hash(const char *s); /* dynsyms.c */

/* The session directory of `leakpath run` is named by this variable; the
 * agent registers on LP_CTL_SOCK in it, and a process of another user,
 * which that socket refuses, says so on LP_OTHER_SOCK. */
#define LP_SESSION_ENV "LEAKPATH_SESSION"
#define LP_CTL_SOCK "/ctl.sock"
#define LP_OTHER_SOCK "/other-uid.sock"

/* lp_region_open's failures (ring.c). */
#define LP_OPEN_FAILED -1     /* refused, or a transient failure */
#define LP_OPEN_GONE -2       /* no collector this process can reach: the session is over or not ours */
#define LP_OPEN_OTHER_USER -3 /* the collector runs as another user (a privilege drop) */
extern unsigned lp_max_depth;
extern int lp_clock_tsc;            /* timestamps are TSC ticks, else ns */

/* agent.c */
LP_HIDDEN struct lp_thread *lp_rec_slow(struct lp_thread *t);

/* lp_rec_thread returns the calling thread's state when it records now,
 * else NULL (pass through). */
static inline struct lp_thread *lp_rec_thread(void)
{
	struct lp_thread *t = &lp_tls;
	if (LP_LIKELY(t->state == 1 && t->gen == lp_region_gen && !t->busy && !t->forking))
		return t;
	return lp_rec_slow(t);
}

/*
 * A thread's state at a call: its callee-saved registers, stack pointer
 * and return address. Caller-saved registers hold nothing of the caller's
 * across a call. lp_ctx_here (an assembly function) fills c with its
 * caller's state at the call; lp_ctx_unwind (unwind.c) moves it out to
 * the caller of a given function.
 */
enum { LP_CTX_RBX, LP_CTX_RBP, LP_CTX_R12, LP_CTX_R13, LP_CTX_R14, LP_CTX_R15 };
struct lp_ctx {
	uint64_t regs[6]; /* LP_CTX_*: the order of the wire's hold_regs and ask_regs */
	uint64_t sp, pc;
};
LP_HIDDEN void lp_ctx_here(struct lp_ctx *c);
LP_HIDDEN int lp_ctx_unwind(struct lp_thread *t, struct lp_ctx *c, uintptr_t lo, uintptr_t hi);
LP_HIDDEN void lp_caller_fn(const void *fn);
LP_HIDDEN int lp_caller_ctx(struct lp_thread *t, struct lp_ctx *c, const void *fn);
LP_HIDDEN void lp_ask_fns(void);
LP_HIDDEN int lp_outer_ctx(struct lp_thread *t, struct lp_ctx *c);
LP_HIDDEN void lp_dead_stack(uintptr_t lo, uintptr_t hi, uintptr_t sp, uintptr_t tp, int dead);

/* ring.c */
LP_HIDDEN int lp_thread_attach(struct lp_thread *t);
LP_HIDDEN void lp_put(struct lp_thread *t, uint64_t *w, unsigned words);
LP_HIDDEN int lp_wait_space(struct lp_thread *t, uint64_t need, int nested);
LP_HIDDEN void lp_put_wrapped(struct lp_thread *t, uint64_t pos, const uint64_t *w, unsigned words);
LP_HIDDEN void lp_put_nudge(struct lp_thread *t);
extern int lp_detached;       /* the collector went away: stop recording */
/* The records the collector orders across threads by their times, an
 * address's allocations and frees: dated by lp_ts_after. A record dated
 * by its writer (w[1] set) keeps its time. */
#define LP_REC_ORDERED                                                                       \
	(1u << LP_REC_ALLOC | 1u << LP_REC_FREE | 1u << LP_REC_REALLOC_BEGIN | 1u << LP_REC_REALLOC | \
	 1u << LP_REC_ALLOC_LATE | 1u << LP_REC_IGNORE)
LP_HIDDEN uint64_t lp_now(void);
LP_HIDDEN int lp_collector_alive(void);
/* The collector's clock as one wait last saw it change (lp_collector_lost). */
struct lp_beat {
	uint64_t ts, since;
};
LP_HIDDEN int lp_collector_lost(struct lp_beat *b);
LP_HIDDEN void lp_wait_collector(uint32_t *word, uint32_t v, int ticks);
struct lp_ctx;
LP_HIDDEN void lp_hold_exit(const struct lp_ctx *prog);
LP_HIDDEN void lp_trace_ask(struct lp_thread *t, uint32_t sid, void *p, size_t n);
LP_HIDDEN long lp_futex(uint32_t *addr, int op, uint32_t val, const struct timespec *timeout);
LP_HIDDEN void lp_ring_stop(void);
LP_HIDDEN int lp_post(uint32_t *state, uint32_t req, uint32_t idle, int ms);

/* lp_watch_freed tells the collector that the block of a root-cause
 * window, p, is being freed or moved (see LP_TRACE_* in lp_wire.h). */
static inline void lp_watch_freed(const void *p)
{
	if (LP_UNLIKELY(lp_hdr && p && __atomic_load_n(&lp_hdr->watch_addr, __ATOMIC_RELAXED) == (uint64_t)(uintptr_t)p))
		__atomic_store_n(&lp_hdr->watch_freed, 1, __ATOMIC_RELEASE);
}

/* stacktab.c */
LP_HIDDEN uint32_t lp_stack_id(struct lp_thread *t, void *fp);
LP_HIDDEN struct lp_stacktab *lp_stacktab_new(void);
LP_HIDDEN void lp_stacktab_reset(struct lp_stacktab *s);
LP_HIDDEN void lp_tables_park(struct lp_thread *t);
LP_HIDDEN int lp_tables_take(struct lp_thread *t);
LP_HIDDEN void lp_pool_lock_fork(int take);

/* unwind.c */

/* lp_trail records every stack slot an unwind read, and what it held: an
 * unwind from the same hook frame whose slots all still hold the same
 * values would run identically and give the same stack. */
#define LP_TRAIL_MAX 132
struct lp_trail {
	int n;                           /* -1: too long to record */
	int paired;                      /* slots [0, paired): pairs of adjacent ones, ascending (lp_trail_pair) */
	int chained;                     /* slots [0, chained): pair 0, then each pair at the address val[i - 2] names */
	int few;                         /* all pairs chained, slots [paired, n) at most two, in loose_addr/loose_val (lp_trail_pair) */
	uintptr_t loose_addr[2];         /* the one slot twice, or a slot of loose_val itself when none */
	_Alignas(16) uintptr_t loose_val[2];
	uintptr_t addr[LP_TRAIL_MAX];
	_Alignas(16) uintptr_t val[LP_TRAIL_MAX]; /* pairs 16-aligned: lp_trail_holds folds them into its XORs */
};

LP_HIDDEN int lp_unwind(struct lp_thread *t, void *fp, uintptr_t *out, int max, int nocache,
			struct lp_trail *tr);
LP_HIDDEN struct lp_ucache *lp_ucache_new(void);

/* fold.c */
LP_HIDDEN void lp_fold_attach(struct lp_thread *t, struct lp_fold *f);
LP_HIDDEN void lp_fold_alloc(struct lp_thread *t, unsigned fn, void *p, size_t n, uint32_t sid,
			     uint64_t *m);
LP_HIDDEN int lp_fold_free(struct lp_thread *t, unsigned fn, void *p, void *fp);
LP_HIDDEN int lp_fold_free_quick(struct lp_thread *t, unsigned fn, void *p, void *fp);
LP_HIDDEN void lp_fold_take(struct lp_thread *t, void *p);
LP_HIDDEN uint64_t lp_fold_evict_dated(struct lp_thread *t, uint64_t *rec);
LP_HIDDEN void lp_fold_recorded(struct lp_thread *t, size_t n);
LP_HIDDEN void lp_fold_exiting(struct lp_thread *t);

/* The pending map (fold.c): for each address hash one word naming the
 * pending entry of the block there, if any: the address (16-aligned, below
 * 2^48) >> 4 in bits 0..43, the thread slot in 44..55, the position in its
 * pend[] in 56..63 (LP_TAG); 0: none. Threads in slots beyond
 * LP_TAG_SLOTS do not fold. */
/* 2^14 words (128 KiB) a part: the parts of four threads stay in a
 * core's L2 cache, as one map of 2^16 words did. A free of a block long
 * out of the FIFO still reads its word; at 2^20 words (8 MiB) that was a
 * cache and TLB miss each (a C++ program freeing a big map: 6 % of its
 * time). Pending blocks are a few hundred a thread: collisions, which
 * write the second block at once, stay rare (folded pairs 0.1 % fewer
 * than with parts of 2^16 words on the long-lived loop, 0.6 % on the
 * allocation loop with 4 threads freeing each other's blocks: still more
 * than one map of 2^16 words folded there). */
#define LP_PMAP_BITS 14u
#define LP_PMAP_WORDS (1u << LP_PMAP_BITS)
/* The map has a part of LP_PMAP_WORDS for each 64 MiB of addresses, modulo
 * LP_PMAP_PARTS: glibc gives each thread an arena of its own, in heaps of
 * 64 MiB at that alignment, one after the other, so the blocks of one part
 * are almost always one thread's, which then owns the part's words and
 * stores plainly (fold.c, lp_parts). A part that the whole map's addresses
 * shared, as before, would have threads in turn take it over. 8 MiB of
 * address space; a part's pages are touched only where its heap is. */
#define LP_PMAP_PART_SHIFT 26u
#define LP_PMAP_PARTS 64u
#define LP_TAG_SLOTS 4096u
#define LP_TAG(addr, slot, pos) ((addr) >> 4 | (uint64_t)(slot) << 44 | (uint64_t)(pos) << 56)
#define LP_TAG_ADDR(w) ((w) << 20 >> 16)
#define LP_TAG_SLOT(w) ((uint32_t)((w) >> 44) & 0xfffu)
#define LP_TAG_POS(w) ((uint32_t)((w) >> 56))

LP_HIDDEN int lp_pmap_setup(void);
LP_HIDDEN void lp_barrier_early(void);
LP_HIDDEN int lp_barrier_sure(void);
extern uint64_t *lp_pmap;

/* lp_pmap_at is address a's word in the pending map, in a's part. Within
 * each 256 KiB of addresses the words follow the addresses, so blocks near
 * each other share cache lines (a random hash of every address made a
 * cache miss of most lookups); each 256 KiB gets its own random offset,
 * so that heaps at regular distances do not collide. */
static inline uint64_t *lp_pmap_at(uint64_t a)
{
	uint64_t window = ((a >> (4 + LP_PMAP_BITS)) * 0x9e3779b97f4a7c15ull) >> (64 - LP_PMAP_BITS);
	uint64_t part = (a >> LP_PMAP_PART_SHIFT) & (LP_PMAP_PARTS - 1);
	return lp_pmap + (part << LP_PMAP_BITS) + (((a >> 4) ^ window) & (LP_PMAP_WORDS - 1));
}
LP_HIDDEN void lp_fold_flush(struct lp_thread *t);

/* lp_pmap_prefetch starts fetching block p's map word, for writing, as
 * soon as the allocator returns p: the word is seldom cached, and the
 * clearing of the block (lp_fresh) and the stack's lookup hide the miss. */
static inline void lp_pmap_prefetch(const void *p)
{
	if (LP_LIKELY(lp_pmap != NULL))
		__builtin_prefetch(lp_pmap_at((uint64_t)(uintptr_t)p), 1);
}

/* modules.c */
LP_HIDDEN void lp_modules_init(void);
LP_HIDDEN void lp_modules_refresh(struct lp_thread *t, int announce_all);
LP_HIDDEN const struct lp_module *lp_module_of(uintptr_t pc);
extern LP_HIDDEN uint64_t lp_mod_gen; /* bumped when a module goes away */

/* lp_modules_gen is the modules' generation: a stack or unwind rule
 * remembered under another one may name code that is gone. (Inline: every
 * allocation's stack lookup reads it.) */
static inline uint64_t lp_modules_gen(void)
{
	return __atomic_load_n(&lp_mod_gen, __ATOMIC_ACQUIRE);
}

struct lp_module {
	uintptr_t lo, hi;       /* lowest and highest mapped address of its PT_LOADs */
	uintptr_t bias;         /* dlpi_addr */
	const unsigned char *eh_hdr;  /* .eh_frame_hdr in memory, or NULL */
	uint32_t id;
	uint32_t seen;          /* refresh bookkeeping */
	const void *phdr;       /* dlpi_phdr: identifies the load */
};

/* slots.c: the slot pool for stale objects (LP_HF_STALE). */
extern LP_HIDDEN uintptr_t lp_slot_lo, lp_slot_span;
extern LP_HIDDEN int lp_slots_on;
LP_HIDDEN void lp_slots_start(void);
LP_HIDDEN void *lp_slot_alloc(size_t n, const void *ra, int zero);
LP_HIDDEN void lp_slot_free(void *p);
LP_HIDDEN void *lp_slot_realloc(void *old, size_t n, void *(*real_malloc)(size_t));

/* lp_is_slot reports whether p lies in the slot pool. */
static inline int lp_is_slot(const void *p)
{
	return (uintptr_t)p - lp_slot_lo < lp_slot_span;
}

/* lp_slot_try serves a sampled block of n bytes from the pool, or NULL. */
static inline void *lp_slot_try(struct lp_thread *t, size_t n, const void *ra, int zero)
{
	if (LP_LIKELY(!lp_slots_on) || !t)
		return NULL;
	return lp_slot_alloc(n, ra, zero);
}

/* mem.c: memory for the agent itself, straight from mmap. */
extern struct lp_own_table lp_own; /* the agent's own mappings (stacktab.c) */
LP_HIDDEN void *lp_mmap(size_t bytes);
LP_HIDDEN void lp_munmap(void *p, size_t bytes);

/* agent.c */
LP_HIDDEN void lp_note_thread_exit(void);

/* The C++ allocation operators the agent defines (agent.c), by their
 * mangled names, with std::align_val_t and const std::nothrow_t& as the
 * ABI passes them. */
typedef size_t lp_align_t;
typedef const void *lp_nothrow_t;
void *_Znwm(size_t n);
void *_Znam(size_t n);
void *_ZnwmSt11align_val_t(size_t n, lp_align_t al);
void *_ZnamSt11align_val_t(size_t n, lp_align_t al);
void _ZdlPv(void *p);
void _ZdaPv(void *p);
void _ZdlPvm(void *p, size_t n);
void _ZdaPvm(void *p, size_t n);
void _ZdlPvRKSt9nothrow_t(void *p, lp_nothrow_t nt);
void _ZdaPvRKSt9nothrow_t(void *p, lp_nothrow_t nt);
void _ZdlPvSt11align_val_t(void *p, lp_align_t al);
void _ZdaPvSt11align_val_t(void *p, lp_align_t al);
void _ZdlPvmSt11align_val_t(void *p, size_t n, lp_align_t al);
void _ZdaPvmSt11align_val_t(void *p, size_t n, lp_align_t al);
void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, lp_align_t al, lp_nothrow_t nt);
void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, lp_align_t al, lp_nothrow_t nt);

/* lsan.c */
LP_HIDDEN void lp_ignore_write(struct lp_thread *t, const void *p);
LP_HIDDEN int lp_lsan_hooks(const char **supp);
LP_HIDDEN void lp_lsan_prepare(void);

/* attach.c */
LP_HIDDEN void lp_attach_patch(void);

static inline uint64_t lp_rdtsc(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
#else
	return lp_now();
#endif
}

/* The thread whose clock reads need no fence (lp_rdtsc_after): the
 * address of its lp_tls (distinct among live threads, a fork child's
 * thread keeps its own), or one of these. ring.c. */
#define LP_CLOCK_UNCLAIMED ((uintptr_t)0) /* no thread yet: the first to record claims it */
#define LP_CLOCK_SHARED ((uintptr_t)1)    /* every thread fences */
extern uintptr_t lp_clock_owner;
LP_HIDDEN void lp_clock_revoke(void);
LP_HIDDEN void lp_clock_claim(void);
LP_HIDDEN void lp_clock_fork(void);

/* lp_rdtsc_after reads the TSC once every earlier load has completed:
 * rdtsc alone may run ahead of them, and a free's record dated before the
 * load that gave its thread the block (another thread's, just allocated)
 * read as older than the allocation's (measured: two threads taking turns
 * read the TSC backwards by up to ~600 ticks, ~1 in 100 turns; with lfence
 * never). Only the reading side of a hand-over needs the fence, and only
 * while another thread records too: the clock's owner (lp_clock_owner),
 * while it is the only thread recording, reads without it (the fence was
 * a third of a free's time where blocks outlive the fold window). Any
 * other thread fences, and after its read takes the ownership away
 * (lp_clock_revoke) before the stores that follow its record: the owner,
 * had it loaded any of them, finds itself owner no more (x86 keeps loads
 * in order, and stores). The owner checks again after its read: a thread
 * that took the clock over (lp_clock_claim) meanwhile revokes it too.
 * (The vDSO's clock_gettime, lp_now, orders its read itself.) */
static inline uint64_t lp_rdtsc_after(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;
	uintptr_t me = (uintptr_t)&lp_tls;
	/* The compiler keeps the record's earlier loads before the owner's
	 * (the asm's clobbers, the second load after the read). */
	__asm__ volatile("" ::: "memory");
	uintptr_t o = __atomic_load_n(&lp_clock_owner, __ATOMIC_RELAXED);
	if (LP_LIKELY(o == me))
		__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	else
		__asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	uintptr_t again = __atomic_load_n(&lp_clock_owner, __ATOMIC_RELAXED);
	if (LP_UNLIKELY(again != (o == me ? me : LP_CLOCK_SHARED)))
		lp_clock_revoke();
	return (uint64_t)hi << 32 | lo;
#else
	return lp_now();
#endif
}

/* lp_ts is the timestamp of a record: TSC ticks when the collector found
 * the TSC reliable, else CLOCK_MONOTONIC nanoseconds. */
static inline uint64_t lp_ts(void)
{
	return LP_LIKELY(lp_clock_tsc) ? lp_rdtsc() : lp_now();
}

/* lp_ts_after is lp_ts no earlier than the loads before it: for the
 * records the collector orders across threads by their times, an address's
 * allocations and frees (another thread may just have handed the block
 * over, or freed the address's previous block). The fence costs: a scope's
 * two records took twice as long with it. */
static inline uint64_t lp_ts_after(void)
{
	return LP_LIKELY(lp_clock_tsc) ? lp_rdtsc_after() : lp_now();
}

/* lp_ts_pending is the own time of a pending allocation: the collector's
 * clock in the region header (one load, where the cheapest clock of the
 * kernel costs ~3.5 ns a call: 7 % of the agent's time on the allocation
 * loop), renewed about every millisecond; until the collector first sets
 * it, the coarse clock (the same base as lp_now, up to one tick early) or
 * the TSC. Either may be a little early: the collector orders frees
 * against the time the record was written (read before the entry is
 * taken: see lp_evict), not this one. Exact when the collector asks (root
 * causes compare it with their windows; a trace keeping times finer than
 * the tick). */
static inline uint64_t lp_ts_pending(void)
{
	if (LP_LIKELY(!lp_exact_pending)) {
		uint64_t now = __atomic_load_n(&lp_hdr->now_ts, __ATOMIC_RELAXED);
		if (LP_LIKELY(now != 0))
			return now;
	}
	if (LP_LIKELY(lp_clock_tsc) || lp_exact_pending)
		return lp_ts();
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t lp_xadd_local(uint64_t *p, uint64_t v)
{
#if defined(__x86_64__)
	/* One instruction without lock: atomic against signal handlers on this
	 * thread, which is all that can race on a thread's own ring. */
	__asm__ volatile("xaddq %0, %1" : "+r"(v), "+m"(*p) : : "memory");
	return v;
#else
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

/* lp_ring_write dates record w of words, of type (read from w[0] before
 * the compiler barriers: a constant then), and copies it to the thread's
 * ring, of size bytes, at pos, reserved (lp_put). */
static inline __attribute__((always_inline)) void lp_ring_write(struct lp_thread *t, uint64_t pos, uint64_t *w,
								unsigned words, uint64_t size, unsigned type)
{
	if (type != LP_REC_STACK && words > 1 && w[1] == 0)
		w[1] = type < 32 && (LP_REC_ORDERED >> type & 1) ? lp_ts_after() : lp_ts();
	uint64_t off = pos & (size - 1);
	if (LP_LIKELY(off + (uint64_t)words * 8 <= size)) {
		/* A word at a time: the record was just stored a word at a
		 * time, and a 16-byte load of two such stores (what a memcpy
		 * becomes) cannot take them from the store buffer; it waits
		 * for every store before it, the previous record's ring lines
		 * (the collector's, to fetch back) among them. Atomic stores
		 * are never merged into wider ones. */
		uint64_t *dst = (uint64_t *)(void *)(t->ring + off);
#pragma GCC unroll 8
		for (unsigned i = 0; i < words; i++)
			__atomic_store_n(&dst[i], w[i], __ATOMIC_RELAXED);
	} else
		lp_put_wrapped(t, pos, w, words);
}

/*
 * lp_put_rec is lp_put (ring.c) inlined for the records of allocations
 * and frees, words a constant: their words go straight to the ring, dated
 * as lp_put would, without lp_put's frame and its copy's call (half of
 * its cost a record). A writer this thread is inside already (a signal
 * handler's record) goes through lp_put; the rare turns (waiting for
 * space, the ring's end, waking the collector) are calls.
 */
static inline __attribute__((always_inline)) void lp_put_rec(struct lp_thread *t, uint64_t *w, unsigned words)
{
	uint64_t bytes = (uint64_t)words * 8;
	uint64_t size = t->ring_mask + 1;
	unsigned type = (unsigned)(w[0] & 0xff);
	if (LP_UNLIKELY(__atomic_load_n(&t->depth, __ATOMIC_RELAXED) != 0 || lp_detached || bytes > size / 2)) {
		lp_put(t, w, words);
		return;
	}
	t->depth++;
	__asm__ volatile("" ::: "memory");
	uint64_t pos = lp_xadd_local(&t->res, bytes);
	if (LP_UNLIKELY(pos + bytes > t->tail_seen + size) && lp_wait_space(t, pos + bytes - size, 0) != 0)
		goto done; /* detached: nobody reads this ring any more */
	lp_ring_write(t, pos, w, words, size, type);
done:
	__asm__ volatile("" ::: "memory");
	t->depth--;
	__asm__ volatile("" ::: "memory");
	__atomic_store_n(&t->slot->head, t->res, __ATOMIC_RELEASE);
	if (LP_UNLIKELY(t->res - t->tail_seen > size / 2))
		lp_put_nudge(t);
}

#endif
