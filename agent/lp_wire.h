/*
 * lp_wire.h - the layout shared by the agent (C, in the target) and the
 * collector (Go, internal/target/wire). Any change here is a change of the wire
 * version: bump LP_WIRE_VERSION and mirror it in internal/target/wire/layout.go
 * (a Go test compiles this header and compares every constant and offset).
 *
 * One region (a memfd created by the collector) per recorded process image:
 *
 *   [0, LP_HEADER_SIZE)                 struct lp_header
 *   [LP_HEADER_SIZE, +slots*128)        struct lp_slot, one per ring
 *   [data_offset, +big_slots*big_ring_size
 *      +(slots-big_slots)*ring_size)    ring data: the first big_slots rings of
 *                                       big_ring_size bytes, then the others
 *   [fold_offset, +slots*LP_FOLD_SIZE)  struct lp_fold, one per ring
 *
 * Folding: a thread keeps its latest allocations pending in its lp_fold
 * (in shared memory, so that nothing is lost when the process dies); a
 * free by the same thread of a pending block cancels both, counted in an
 * aggregate instead of two records. Evicted pending allocations become
 * ALLOC records with their own timestamps; aggregates become AGG records.
 * What is left in a fold area when its thread is gone (or the process is)
 * the collector reads itself.
 *
 * A pending entry is taken by a compare-and-swap of its address with 0:
 * by its thread folding or evicting it, by another thread that frees the
 * block (which then writes the allocation itself, ALLOC_LATE, before its
 * FREE, so that no thread ever folds a block another thread freed; the
 * agent finds such entries through a map of its own, fold.c), and by the
 * collector taking what a gone thread left.
 *
 * A ring belongs to one thread at a time. The thread (producer) appends
 * records at head; the collector (consumer) reads [tail, head) and advances
 * tail. head and tail count bytes since the ring was created and never wrap;
 * the byte offset in the ring is head % ring_size. A record never straddles
 * the end of the ring: the producer fills the rest with a PAD record.
 *
 * Every record is a whole number of 8-byte words, little endian. Word 0 is
 * the record header:
 *   bits  0..7   type  (LP_REC_*)
 *   bits  8..15  fn    (LP_FN_* for heap records, else 0)
 *   bits 16..31  length in words, header included (>= 1)
 *   bits 32..63  aux   (type specific, see each record)
 */
#ifndef LP_WIRE_H
#define LP_WIRE_H

#include <stdint.h>

#define LP_WIRE_VERSION 14u
#define LP_REGION_MAGIC 0x4e4f494745524c50ull /* "PLREGION" little endian */
#define LP_HELLO_MAGIC 0x4f4c4c4548504cull    /* "LPHELLO" */

#define LP_HEADER_SIZE 4096u
#define LP_SUSPECTS 16u /* suspect sites armed at once */
#define LP_SLOT_SIZE 128u
#define LP_MAX_DEPTH 128u
#define LP_PEND 256u        /* pending allocations per thread (a power of two) */
#define LP_AGG 64u          /* aggregates per thread */
#define LP_FOLD_SIZE 16384u /* bytes of one struct lp_fold, rounded up */
#define LP_FREED_BITS 7u    /* log2 of the folded blocks remembered per thread (struct lp_freed) */

/* Record types. */
enum {
	LP_REC_PAD = 1,           /* skip: len words of nothing */
	LP_REC_ALLOC = 2,         /* aux=stack; w1 ts, w2 addr (0: failed), w3 size */
	LP_REC_FREE = 3,          /* aux=stack (0: none); w1 ts, w2 addr; fn | LP_FN_TEMPORARY when
	                             the block was the thread's latest allocation */
	LP_REC_REALLOC_BEGIN = 4, /* aux=stack (0: none); w1 ts, w2 old addr (before the real call) */
	LP_REC_REALLOC = 5,       /* aux=stack; w1 ts, w2 old, w3 new (0: failed or freed), w4 size */
	LP_REC_STACK = 6,         /* aux=stack id; w1.. frames (len-1 of them), innermost first */
	LP_REC_MODULE = 7,        /* aux=module id; see struct layout below */
	LP_REC_MODULE_UNLOAD = 8, /* aux=module id; w1 ts */
	LP_REC_THREAD_START = 9,  /* aux=tid; w1 ts, w2 pthread_self */
	LP_REC_THREAD_EXIT = 10,  /* aux=tid; w1 ts */
	LP_REC_FORK = 11,         /* aux=0; w1 ts, w2 fork id (parent, before fork) */
	LP_REC_FORK_DONE = 12,    /* aux=0; w1 ts, w2 fork id, w3 child pid or -errno */
	LP_REC_EXEC = 13,         /* aux=path bytes; w1 ts, then the path, NUL padded */
	LP_REC_EXEC_FAILED = 14,  /* aux=errno; w1 ts */
	LP_REC_EXIT = 15,         /* aux=status; w1 ts, w2 how (LP_EXIT_*) */
	LP_REC_CLOCK = 16,        /* aux=0; w1 ts, w2 CLOCK_MONOTONIC ns, w3 CLOCK_REALTIME ns */
	LP_REC_THREAD_NAME = 17,  /* aux=tid of the named thread (0: see w2); w1 ts, w2 its
	                             pthread_t, then the name, NUL padded */
	LP_REC_AGG = 18,          /* fn=alloc fn, aux=alloc stack; w1 ts, w2 free stack | free fn << 32,
	                             w3 pairs, w4 bytes, w5 temporaries, w6 first pair's ts */
	LP_REC_ALLOC_LATE = 19,   /* a pending allocation evicted: as ALLOC, w1 ts (now, for order),
	                             w4 ts of the allocation itself, w5 tid of the thread that
	                             allocated it (it may be another thread's record) */
	LP_REC_SCOPE_BEGIN = 20,  /* aux=depth (1: outermost); w1 ts, then the scope's name, NUL
	                             padded (at least one NUL) */
	LP_REC_SCOPE_END = 21,    /* aux=depth of the scope it closes; w1 ts */
	LP_REC_PENDING = 22,      /* aux=0; w1 ts, w2 bytes of all threads' pending allocations at
	                             ts, as this thread counted them (fold.c) */
	LP_REC_REFREE = 23,       /* the next FREE or REALLOC of this thread is of w2, a block some
	                             thread folded (struct lp_freed): fn=alloc fn, aux=alloc stack;
	                             w1 ts, w2 addr, w3 0 (no size kept), w4 return address of the
	                             free that folded it, w5 that free's fn */
	LP_REC_IGNORE = 24,       /* aux=0; w1 ts, w2 an address in a block the program says is no
	                             leak (__lsan_ignore_object, or allocated between __lsan_disable
	                             and __lsan_enable) */
	LP_REC_ROOT_REGION = 25,  /* aux=1 registered, 0 unregistered (__lsan_register_root_region,
	                             __lsan_unregister_root_region); w1 ts, w2 addr, w3 size */
	LP_REC_POOL = 26,         /* aux=stack (0: none); w1 ts, w2 the pool's handle, w3 LP_POOL_*:
	                             created or destroyed (LEAKPATH_POOL_CREATE, _DESTROY) */
	LP_REC_POOL_ALLOC = 27,   /* aux=stack; w1 ts, w2 addr, w3 size, w4 the pool's handle
	                             (LEAKPATH_POOL_ALLOC: an object of the pool) */
	LP_REC_POOL_FREE = 28,    /* aux=stack (0: none); w1 ts, w2 addr, w3 the pool's handle
	                             (LEAKPATH_POOL_FREE) */
	LP_REC_FAMILY = 29,       /* aux=LP_FN_* of the function; w1 ts, w2 its entry's address, w3
	                             LP_FAMILY_* (what the agent did with it), then its name, NUL
	                             padded (at most LP_FAMILY_NAME_MAX bytes) */
	LP_REC_MAX = 29
};
/* LP_REC_POOL's operations. */
enum {
	LP_POOL_CREATE = 1,
	LP_POOL_DESTROY = 2,
};
/* LP_REC_FAMILY's outcomes: an allocator function no hook of the agent's
 * sees (defined in the executable, or under a prefix), found at start or
 * in a module dlopen brought. */
enum {
	LP_FAMILY_TRACED = 1,   /* its entry patched: its calls are recorded */
	LP_FAMILY_REFUSED = 2,  /* its first instructions could not be moved: not traced */
	LP_FAMILY_THREADS = 3,  /* the process had threads already: not patched, not traced */
	LP_FAMILY_FAILED = 4,   /* the code could not be written (mprotect), or no room near it */
	LP_FAMILY_HOOKED = 5,   /* another library's malloc, which the hooks call: traced as glibc's */
	LP_FAMILY_UNFOLLOWED = 6, /* its module came through a dlopen the agent could not follow: not traced */
	LP_FAMILY_NOSLOT = 7,   /* more families than the agent has room for (LP_FAM_SLOTS): not traced */
};
#define LP_FAMILY_NAME_MAX 63u
#define LP_FAMILIES_MAX 256u /* bytes of lp_header.alloc_families, NUL included */
#define LP_SCOPE_NAME_MAX 127u /* bytes of a scope's name kept */
#define LP_ASK_LABEL_MAX 64u   /* bytes of a request's label, NUL included */

/*
 * LP_REC_MODULE: w1 ts, w2 load bias, w3 = path_len | build_id_len << 32 |
 * nseg << 48 (nseg <= 255), then nseg PT_LOAD segments of 3 words
 * (p_vaddr, p_memsz, p_flags | p_offset << 32), then the build id bytes
 * padded to a word, then the path bytes padded to a word.
 */

/* Allocator functions: the fn field of heap records. */
enum {
	LP_FN_MALLOC = 1,
	LP_FN_CALLOC = 2,
	LP_FN_REALLOC = 3,
	LP_FN_REALLOCARRAY = 4,
	LP_FN_FREE = 5,
	LP_FN_MEMALIGN = 6,
	LP_FN_POSIX_MEMALIGN = 7,
	LP_FN_ALIGNED_ALLOC = 8,
	LP_FN_VALLOC = 9,
	LP_FN_PVALLOC = 10,
	LP_FN_NEW = 11,           /* operator new(size_t) and its nothrow/aligned forms */
	LP_FN_NEW_ARRAY = 12,     /* operator new[] and its forms */
	LP_FN_DELETE = 13,        /* operator delete and its sized/aligned/nothrow forms */
	LP_FN_DELETE_ARRAY = 14,  /* operator delete[] and its forms */
	LP_FN_MAX = 14,           /* (the collector numbers pool objects' 15 and 16) */
	LP_FN_TEMPORARY = 0x80,   /* flag on a FREE record's fn */
};

/* How a process image ended, LP_REC_EXIT w2. */
enum {
	LP_EXIT_EXIT = 1,  /* exit() or return from main: aux is the status */
	LP_EXIT__EXIT = 2, /* _exit()/_Exit(): aux is the status */
};

/* Slot states (struct lp_slot.state). */
enum {
	LP_SLOT_FREE = 0,   /* no owner; a thread may claim it (CAS to ACTIVE) */
	LP_SLOT_ACTIVE = 1, /* owned by the thread in .tid */
	LP_SLOT_EXITED = 2, /* the thread wrote THREAD_EXIT; it may still append
	                       until it is gone; the collector frees the slot */
	LP_SLOT_TAKING = 3, /* the thread is gone: the collector is taking what it
	                       left pending (and dates that after this state), then
	                       frees the slot */
};

/* Header flags. */
enum {
	LP_HF_CLOCK_TSC = 1,     /* ts are TSC ticks; else CLOCK_MONOTONIC ns */
	LP_HF_FREE_STACKS = 2,   /* set by the collector: capture stacks of frees */
	LP_HF_FOLD = 4,          /* set by the collector: fold short-lived allocations */
	LP_HF_HOLD_EXIT = 8,     /* set by the collector: hold the process at exit for a scan */
	LP_HF_STALE = 16,        /* set by the collector: serve sampled blocks from the slot pool */
	LP_HF_FOLD_FREE_STACKS = 32, /* set by the collector: with LP_HF_FREE_STACKS, key aggregates
	                                by the free's stack too (else 0: a walk less per folded pair) */
	LP_HF_EXACT_TIMES = 64,  /* set by the collector: date pending allocations exactly (else by
	                            the coarse clock, up to a tick early) */
};

/* Collector states (struct lp_header.collector_state). */
enum {
	LP_COLLECTOR_ALIVE = 1,
	LP_COLLECTOR_GONE = 2, /* the agent stops recording and passes through */
};

struct lp_header {
	uint64_t magic;          /* LP_REGION_MAGIC */
	uint32_t version;        /* LP_WIRE_VERSION */
	uint32_t header_size;    /* LP_HEADER_SIZE */
	uint32_t slot_count;
	uint32_t ring_size;      /* bytes, power of two */
	uint64_t data_offset;    /* offset of ring 0's data */
	uint64_t region_size;
	uint32_t flags;          /* LP_HF_*; written by the collector before handing over */
	uint32_t max_depth;      /* frames per stack, <= LP_MAX_DEPTH */
	int32_t collector_pid;
	int32_t pid;             /* the recorded process */
	/* written by the agent */
	uint32_t slots_used;     /* 1 + highest slot index ever claimed */
	uint32_t agent_state;    /* 1 once the agent wrote its first records */
	uint64_t next_stack_id;  /* atomic; stack ids start at 1 */
	uint64_t next_module_id; /* atomic; module ids start at 1 */
	uint64_t clock_ts;       /* ts, CLOCK_MONOTONIC and CLOCK_REALTIME ns */
	uint64_t clock_mono;     /*   read together at agent start */
	uint64_t clock_real;
	uint64_t lost_records;   /* records the agent could not write (detached) */
	uint64_t fold_offset;    /* offset of slot 0's struct lp_fold; 0: no folding */
	uint32_t big_slots;      /* the first big_slots rings are big_ring_size bytes */
	uint32_t big_ring_size;  /*   (a power of two, >= ring_size; 0: none are) */
	/* futex words, each on its own cache line */
	uint32_t doorbell;       /* offset 128: producers bump + wake the collector */
	uint32_t collector_sleeping;
	uint64_t pad1[7];
	uint32_t progress;       /* offset 192: the collector bumps + wakes producers */
	uint32_t producers_waiting;
	uint64_t pad2[7];
	uint32_t collector_state; /* offset 256: LP_COLLECTOR_* */
	uint32_t pad3;
	uint64_t now_ts;          /* the collector's clock (ts units), renewed about every
	                             millisecond while it runs; 0: not yet (see lp_ts_pending) */
	uint64_t pad4[6];
	/* offset 320: the exit hold (LP_HF_HOLD_EXIT), see LP_HOLD_* */
	uint32_t hold;            /* futex word */
	uint32_t hold_flags;      /* LP_HOLD_F_* */
	uint64_t hold_supp;       /* address of __lsan_default_suppressions()'s string, or 0 */
	/* Written by the agent at registration, for scans: memory of the
	 * agent's own that must not count as a root. */
	uint64_t own_table;       /* address of the agent's struct lp_own_table */
	int64_t tls_offset;       /* its per-thread state: thread pointer + tls_offset, */
	uint64_t tls_size;        /*   tls_size bytes */
	/* Written by the holding thread before LP_HOLD_REQUESTED (0: not
	 * known): where the scan of its stack starts, its thread pointer, and
	 * the address of the program's callee-saved registers (6 words: rbx,
	 * rbp, r12-r15; 0: spilled above hold_sp). See "The exit hold". */
	uint64_t hold_sp;
	uint64_t hold_tp;
	uint64_t hold_regs;
	/* offset 384: root-cause windows, see LP_TRACE_* */
	uint32_t trace_state;     /* futex word */
	int32_t trace_tid;        /* the thread that asks */
	uint64_t trace_addr;      /* the block it allocated */
	uint64_t trace_size;
	uint32_t trace_stack;     /* the block's stack id */
	uint32_t suspects_n;      /* suspects[0, suspects_n) are armed; written last */
	uint32_t suspects[LP_SUSPECTS];
	uint64_t watch_addr;      /* a block whose free or realloc sets watch_freed */
	uint32_t watch_freed;
	uint32_t trace_skip;      /* allocations at suspects to let pass before asking */
	uint64_t pad7[2];
	/* offset 512: requests of the program (leakpath_snapshot,
	 * leakpath_leak_check), see LP_ASK_* */
	uint32_t ask_state;       /* futex word */
	int32_t ask_tid;          /* the thread that asks */
	uint32_t ask_kind;        /* LP_ASK_SNAPSHOT or LP_ASK_LEAK_CHECK */
	uint32_t ask_pad;
	int64_t ask_result;       /* written by the collector before LP_ASK_DONE */
	char ask_label[LP_ASK_LABEL_MAX]; /* NUL terminated */
	/* The asking thread's state where the program called the agent (0:
	 * not known): its stack pointer, and the address of its callee-saved
	 * registers (6 words: rbx, rbp, r12-r15). */
	uint64_t ask_sp;
	uint64_t ask_regs;
	uint64_t pad8[51];
	/* offset 1024: stale objects, see LP_STALE_* (agent/slots.c) */
	uint32_t stale_slots;     /* collector: slot pages in the pool */
	uint32_t stale_sample;    /* collector: a site's 1st allocation, then every Kth */
	uint64_t stale_base;      /* agent: the first slot page; 0: no pool */
	uint32_t stale_count;     /* agent: slot pages from stale_base, one VMA each */
	uint32_t stale_page;      /* agent: the page size (bytes of one slot) */
	/* offset 1048, collector: more allocator families to trace by their
	 * prefix (run --alloc-family), comma separated, NUL terminated */
	char alloc_families[LP_FAMILIES_MAX];
	/* offset 1304, collector: stale epochs ended so far (LP_HF_STALE),
	 * bumped after each epoch's clear of the accessed bits, so that an
	 * access after a program read the new count counts in the next
	 * epoch (leakpath_stale_epoch) */
	uint64_t stale_epochs;
};

/*
 * Stale objects (LP_HF_STALE). The agent serves sampled small allocations
 * (malloc, calloc, operator new, at most LP_STALE_MAX_SIZE bytes) from a
 * pool of stale_count pages from stale_base, a block at the start of its
 * page, one block per page. Every other page is MADV_NOHUGEPAGE, so each
 * page is a VMA of its own whose smaps "Referenced" tells whether the
 * block was touched since the collector last wrote 1 to clear_refs. The
 * pool is one of the agent's own ranges (not a root of scans).
 */
#define LP_STALE_MAX_SIZE 4080u

/*
 * Root-cause windows. The collector writes the stack ids of suspect sites
 * (suspects, then suspects_n). A thread that allocates at one, when
 * trace_state is LP_TRACE_IDLE, claims it (CAS to LP_TRACE_REQUESTED),
 * fills in trace_*, rings the doorbell and waits on trace_state. The
 * collector attaches to that thread alone (ptrace), arms a breakpoint on
 * the allocation's return address and stores LP_TRACE_TAKEN: the thread
 * returns from its allocation into the window. After the window the
 * collector stores LP_TRACE_IDLE. The agent gives up waiting after
 * LP_TRACE_WAIT_MS (CAS back to LP_TRACE_IDLE).
 */
enum {
	LP_TRACE_IDLE = 0,
	LP_TRACE_REQUESTED = 1,
	LP_TRACE_TAKEN = 2,
};
#define LP_TRACE_WAIT_MS 200

/*
 * Requests of the program. A thread that calls leakpath_snapshot or
 * leakpath_leak_check claims the request (CAS LP_ASK_IDLE to
 * LP_ASK_CLAIMED; one at a time, the others wait), fills in ask_*, stores
 * LP_ASK_REQUESTED, rings the doorbell and waits. The collector takes it
 * (CAS to LP_ASK_TAKEN), stops the process for the scan as `leakpath
 * snapshot` does, writes ask_result (a leak check: the blocks leaked;
 * -1: failed) and stores LP_ASK_DONE (futex wake). The thread reads the
 * result and stores LP_ASK_IDLE. A request nobody takes within
 * LP_ASK_WAIT_MS is withdrawn (CAS back to LP_ASK_IDLE).
 */
enum {
	LP_ASK_IDLE = 0,
	LP_ASK_CLAIMED = 1,
	LP_ASK_REQUESTED = 2,
	LP_ASK_TAKEN = 3,
	LP_ASK_DONE = 4,
};
enum {
	LP_ASK_SNAPSHOT = 1,
	LP_ASK_LEAK_CHECK = 2,
};
#define LP_ASK_WAIT_MS 5000

/* The agent's own anonymous mappings (its tables), in the agent's memory;
 * a range with addr 0 is unused. overflow: some were not listed. */
#define LP_OWN_MAX 256u
#define LP_DEAD_MAX 256u
struct lp_own_table {
	uint32_t count; /* ranges in use: r[0, count) */
	uint32_t overflow;
	struct lp_own_range {
		uint64_t addr, len;
	} r[LP_OWN_MAX];
	/* The dead part of the stacks of threads that exited: from the
	 * stack's low end to where the thread's start routine had its
	 * frame. glibc keeps such stacks mapped for reuse; what the thread's
	 * dead frames left there is no root (memcheck reads only what was
	 * written since the stack shrank; LeakSanitizer scans only live
	 * threads), and neither is the agent's per-thread state in its TLS
	 * (at tp + tls_offset). A ring of the latest (addr 0: unused): a
	 * thread that starts on a stack clears its entry. */
	uint32_t dead_next; /* the next entry to write, modulo LP_DEAD_MAX */
	uint32_t dead_pad;
	struct lp_dead_stack {
		uint64_t addr, len; /* [addr, addr+len): the dead frames */
		uint64_t tp;        /* the thread's thread pointer */
		uint64_t pad;
	} dead[LP_DEAD_MAX];
};

/*
 * The exit hold. After the atexit handlers and destructors, the exiting
 * thread flushes what it folded, stores LP_HOLD_REQUESTED in hold, rings
 * the doorbell and waits. The collector answers LP_HOLD_SCANNING, stops
 * every thread with ptrace (unless, below, there is no other), reads the
 * rings, the fold areas and the memory, resumes the threads and stores
 * LP_HOLD_RELEASED (futex wake).
 * The agent gives up waiting if no answer comes within 5 s, or if the
 * collector dies during the scan.
 *
 * The holding thread blocks every signal until the release and leaves the
 * program's state where it called the exit function: its stack pointer
 * (hold_sp) and callee-saved registers (at hold_regs), the frames below
 * being the exit function's, its handlers' and the agent's, not roots.
 * When that cannot be told, hold_sp is the holding thread's own stack
 * pointer with its registers spilled above it, and hold_regs 0. It leaves
 * its thread pointer too (hold_tp): when it is the process's only thread,
 * nothing else runs in the process, and the collector reads the memory
 * without stopping it.
 */
/* hold_flags: the program's __lsan_is_turned_off returned nonzero: no
 * leak check (as LeakSanitizer does none then). */
#define LP_HOLD_F_OFF 1u

enum {
	LP_HOLD_NONE = 0,
	LP_HOLD_REQUESTED = 1,
	LP_HOLD_SCANNING = 2,
	LP_HOLD_RELEASED = 3,
};

struct lp_slot {
	/* producer line */
	uint64_t head;  /* bytes committed (store-release by the producer) */
	uint32_t state; /* LP_SLOT_* */
	int32_t tid;
	uint64_t pad0[6];
	/* consumer line */
	uint64_t tail;  /* bytes consumed (store-release by the collector) */
	uint64_t pad1[7];
};

/* A pending allocation: live until freed by its thread (then folded) or
 * evicted (then written as an ALLOC record). */
struct lp_pending {
	uint64_t addr;  /* 0: folded, evicted or claimed (a hole in the FIFO); taken by CAS */
	uint64_t size;
	uint64_t ts;    /* own time (coarse unless LP_HF_EXACT_TIMES) */
	uint32_t stack;
	uint8_t fn;
	uint8_t pad0;
	uint16_t pad;
};

/* An aggregate of folded pairs: allocated at astack by afn, freed at
 * fstack by ffn. */
struct lp_aggent {
	uint32_t astack, fstack;
	uint8_t afn, ffn, used, pad0;
	uint32_t pad1;
	uint64_t pairs, bytes, temporary;
	uint64_t first;       /* ts of the first pair */
	uint64_t last;        /* 0 (was the ts of the last pair: nothing read it) */
};

/* A block a fold freed, remembered by address (a hash) so that a second
 * free of it can still be named a double free (LP_REC_REFREE): the agent's
 * own, the collector never reads it. */
struct lp_freed {
	uint64_t addr;  /* the block's address; 0: none */
	uint64_t ra;    /* return address of the free that folded it */
	uint64_t who;   /* its allocation's stack | allocating fn << 32 | freeing fn << 40 */
	uint64_t pad;   /* 32 bytes: an index is a shift */
};

/* A thread's fold area. Written by its thread only (but for the takes of
 * pending entries); read by the collector only when the thread (or the
 * process) is gone. */
struct lp_fold {
	uint32_t head;   /* index of the oldest pending entry */
	uint32_t count;  /* pending entries, holes included */
	uint64_t pend_bytes; /* bytes the thread put in pend[] less those it took out
	                        (the agent's: other threads read it for the peak) */
	uint32_t pad[12];
	struct lp_pending pend[LP_PEND];
	struct lp_aggent agg[LP_AGG];
	struct lp_freed freed[1u << LP_FREED_BITS];
};

/*
 * Registration: the agent connects to the collector's unix socket and sends
 * one struct lp_hello; the collector answers with one struct lp_welcome and,
 * when status is 0, the region's memfd as SCM_RIGHTS.
 */
struct lp_hello {
	uint64_t magic;    /* LP_HELLO_MAGIC */
	uint32_t version;  /* LP_WIRE_VERSION */
	int32_t pid;
	int32_t ppid;
	int32_t parent_pid; /* the process this one forked from, or 0 */
	uint64_t fork_id;   /* the parent's fork id, or 0 (a fresh image) */
};

struct lp_welcome {
	uint64_t magic;   /* LP_HELLO_MAGIC */
	int32_t status;   /* 0: a memfd follows; else do not record */
	uint32_t pad;
};

#define LP_HDR(type, fn, words, aux) \
	((uint64_t)(type) | (uint64_t)(fn) << 8 | (uint64_t)(words) << 16 | (uint64_t)(aux) << 32)

#endif
