/*
 * agent.c - the interposed allocator functions and the agent's life cycle
 * (first use, threads, fork, exit).
 *
 * Every hook calls the real function found with lp_next and
 * records what happened: allocations after the real call (the address is
 * known), frees before it (so the address cannot be handed out again by
 * another thread before the collector sees it freed).
 */
#include "agent.h"
#include "cxxreal.h"
#include "families.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

__thread struct lp_thread lp_tls __attribute__((tls_model("initial-exec")));

/* ring.c */
LP_HIDDEN int lp_region_open(const char *sock, int parent_pid, uint64_t fork_id);
LP_HIDDEN void lp_region_drop(void);
LP_HIDDEN void lp_ring_init_key(void);
LP_HIDDEN void lp_slot_exited(struct lp_thread *t);
/* modules.c */
LP_HIDDEN void lp_mod_lock_acquire(void);
LP_HIDDEN void lp_mod_lock_release(void);

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static void *(*real_memalign)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);
static pid_t (*real_fork)(void);
static int (*real_dlclose)(void *);
static void *(*real_dlopen)(const char *, int);
static int (*real_prctl)(int, ...);
static long (*real_syscall)(long, ...);
static void (*real__exit)(int) __attribute__((noreturn));
static void (*real__Exit)(int) __attribute__((noreturn));

enum { LP_INIT_NONE, LP_INIT_RUNNING, LP_INIT_DONE };
static int lp_init_state;
static char lp_sock[PATH_MAX];
static char lp_self[PATH_MAX]; /* the agent's path, as LD_PRELOAD names it */
static uint64_t lp_fork_seq;
/* lp_attach_mode: the agent was dlopen'ed into a running process (see
 * attach.c), not preloaded: the real functions are the global scope's. */
int lp_attach_mode; /* also read by modules.c */

/* attach.c */
LP_HIDDEN void *lp_attach_real(const char *name);
LP_HIDDEN int lp_dlopen_as_caller(const char *file, const void *caller);

/* lp_next is the function name the hook of the same name calls: the next
 * definition after the agent's when preloaded; attached, the process's own
 * (never dlsym(RTLD_DEFAULT), which may be the hook's own slot's way in:
 * see attach.c). */
static void *lp_next(const char *name)
{
	return lp_attach_mode ? lp_attach_real(name) : dlsym(RTLD_NEXT, name);
}

/* ---- bootstrap pool: dlsym's own calloc, before the real one is known ---- */

static unsigned char lp_boot[64 * 1024] __attribute__((aligned(64)));
static size_t lp_boot_used;

static void *lp_boot_alloc(size_t n)
{
	size_t need = ((n + 15) & ~(size_t)15) + 16;
	size_t at = __atomic_fetch_add(&lp_boot_used, need, __ATOMIC_RELAXED);
	if (at + need > sizeof lp_boot)
		return NULL;
	memcpy(lp_boot + at, &n, sizeof n);
	return lp_boot + at + 16; /* zero already: static storage */
}

static inline int lp_is_boot(const void *p)
{
	return (const unsigned char *)p >= lp_boot && (const unsigned char *)p < lp_boot + sizeof lp_boot;
}

static size_t lp_boot_size(const void *p)
{
	size_t n;
	memcpy(&n, (const unsigned char *)p - 16, sizeof n);
	return n;
}

/* ---- life cycle ---- */

static void *lp_sym(const char *name)
{
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	void *f = lp_next(name);
	lp_leave(&t->busy);
	return f;
}

static void lp_write_clock(void)
{
	struct timespec m, r;
	uint64_t ts = lp_ts();
	clock_gettime(CLOCK_MONOTONIC, &m);
	clock_gettime(CLOCK_REALTIME, &r);
	lp_hdr->clock_ts = ts;
	lp_hdr->clock_mono = (uint64_t)m.tv_sec * 1000000000u + (uint64_t)m.tv_nsec;
	lp_hdr->clock_real = (uint64_t)r.tv_sec * 1000000000u + (uint64_t)r.tv_nsec;
	__atomic_store_n(&lp_hdr->agent_state, 1, __ATOMIC_RELEASE);
}

/* lp_start_recording attaches the calling thread and announces modules. */
static void lp_start_recording(void)
{
	struct lp_thread *t = &lp_tls;
	lp_write_clock();
	lp_slots_start(); /* stale slots (slots.c) */
	if ((lp_hdr->flags & LP_HF_HOLD_EXIT) && !lp_attach_mode)
		lp_lsan_prepare(); /* for the exit hold; not in a running program's sandbox */
	if (lp_thread_attach(t) == 0)
		lp_modules_refresh(t, 1);
}

static void lp_atfork_prepare(void);
static void lp_atfork_parent(void);
static void lp_atfork_child(void);
static void lp_on_exit(int status, void *arg);

/* lp_find_socket names the collector's socket after LEAKPATH_SESSION: 0,
 * or -1 without a usable one. It notes the agent's own path, as the
 * loader has it from LD_PRELOAD, for lp_forget_session (later, in a fork
 * child, dladdr could wait for a loader lock held at the fork). */
static int lp_find_socket(void)
{
	Dl_info info;
	if (dladdr((void *)lp_find_socket, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
	    strlen(info.dli_fname) < sizeof lp_self)
		memcpy(lp_self, info.dli_fname, strlen(info.dli_fname) + 1);
	const char *dir = getenv(LP_SESSION_ENV);
	if (!dir || dir[0] != '/')
		return -1;
	size_t n = strlen(dir);
	if (n + sizeof LP_CTL_SOCK > sizeof lp_sock)
		return -1;
	memcpy(lp_sock, dir, n);
	memcpy(lp_sock + n, LP_CTL_SOCK, sizeof LP_CTL_SOCK);
	return 0;
}

/* lp_drop_entry removes every entry equal to self (n bytes) from the
 * LD_PRELOAD value v, in place; the entries left are joined by colons. */
static void lp_drop_entry(char *v, const char *self, size_t n)
{
	char *w = v;
	const char *r = v;
	while (*r) {
		if (*r == ':' || *r == ' ') { /* ld.so splits at both */
			r++;
			continue;
		}
		const char *s = r;
		while (*r && *r != ':' && *r != ' ')
			r++;
		size_t len = (size_t)(r - s);
		if (len == n && memcmp(s, self, n) == 0)
			continue;
		if (w != v)
			*w++ = ':';
		memmove(w, s, len); /* w <= s: only ever shorter */
		w += len;
	}
	*w = 0;
}

/*
 * lp_forget_session takes the agent out of the environment of a process
 * that can no longer be recorded (leakpath's session is over, or the
 * process runs as a user the collector refuses), so that the programs it
 * execs do not load the agent at all: its entry leaves LD_PRELOAD and
 * LEAKPATH_SESSION is emptied. The strings are edited in place, no
 * pointer of environ moves and nothing is allocated or locked: this may
 * run inside the program's setenv (a first allocation), whose copy of
 * environ must stay whole. An LD_PRELOAD left empty stays set, empty,
 * which the loader ignores.
 */
static void lp_forget_session(void)
{
	extern char **environ;
	const char *self = lp_self[0] ? lp_self : NULL;
	size_t n = self ? strlen(self) : 0;
	static const char pre[] = "LD_PRELOAD=", sess[] = LP_SESSION_ENV "=";
	for (char **e = environ; e && *e; e++) {
		char *kv = *e;
		if (strncmp(kv, sess, sizeof sess - 1) == 0) {
			kv[sizeof sess - 1] = 0;
		} else if (self && strncmp(kv, pre, sizeof pre - 1) == 0) {
			char *v = kv + sizeof pre - 1;
			if (strstr(v, self))
				lp_drop_entry(v, self, n);
		}
	}
}

static void lp_init(void)
{
	int expect = LP_INIT_NONE;
	if (!__atomic_compare_exchange_n(&lp_init_state, &expect, LP_INIT_RUNNING, 0,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (lp_tls.busy)
			return; /* our own init, re-entered through dlsym */
		while (__atomic_load_n(&lp_init_state, __ATOMIC_ACQUIRE) != LP_INIT_DONE)
			sched_yield();
		return;
	}
	int saved = errno;
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	real_calloc = lp_next("calloc");
	real_malloc = lp_next("malloc");
	real_realloc = lp_next("realloc");
	real_free = lp_next("free");
	real_memalign = lp_next("memalign");
	real_posix_memalign = lp_next("posix_memalign");
	real_aligned_alloc = lp_next("aligned_alloc");
	real_valloc = lp_next("valloc");
	real_pvalloc = lp_next("pvalloc");
	real_fork = lp_next("fork");
	real_dlclose = lp_next("dlclose");
	real_dlopen = lp_next("dlopen");
	real__exit = lp_next("_exit");
	real__Exit = lp_next("_Exit");
	real_prctl = lp_next("prctl"); /* not at _exit: a fork child may not dlsym */
	real_syscall = lp_next("syscall");
	int ok = real_malloc && real_calloc && real_realloc && real_free && real_memalign &&
		 real_posix_memalign && real_aligned_alloc && real_valloc && real_pvalloc;
	if (ok) {
		/* Where the program calls the agent's or libc's functions that
		 * hold it for a scan (lp_caller_ctx). */
		lp_caller_fn((const void *)exit);
		lp_caller_fn((const void *)_exit);
		lp_caller_fn((const void *)_Exit);
		lp_ask_fns();
		lp_modules_init();
		lp_families_init((void *)real_malloc);
		lp_ring_init_key();
		pthread_atfork(lp_atfork_prepare, lp_atfork_parent, lp_atfork_child);
		on_exit(lp_on_exit, NULL);
		if (!lp_attach_mode) {
			int rc = lp_find_socket() == 0 ? lp_region_open(lp_sock, 0, 0) : LP_OPEN_GONE;
			if (rc == 0) {
				lp_barrier_early();
				lp_start_recording();
			} else if (rc != LP_OPEN_FAILED) {
				lp_forget_session();
			}
		}
	}
	lp_leave(&t->busy);
	errno = saved;
	__atomic_store_n(&lp_init_state, LP_INIT_DONE, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void lp_constructor(void)
{
	/* Not among the main program's libraries (RTLD_DEFAULT would also
	 * search the caller's own scope): dlopen'ed by `leakpath attach`,
	 * which calls leakpath_agent_attach next (attach.c). */
	void *main_scope = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
	if (!main_scope || !dlsym(main_scope, "leakpath_agent_attach"))
		return;
	if (__atomic_load_n(&lp_init_state, __ATOMIC_ACQUIRE) == LP_INIT_NONE)
		lp_init();
	/* Preloaded: allocators no hook of the agent's sees, patched at
	 * their entries while the process has one thread (families.c). */
	if (!lp_attach_mode)
		lp_families_start();
}

/* lp_attach_begin initialises the agent in attach mode and registers with
 * the collector on sock (a region of an earlier attach stays mapped: a
 * thread may still be finishing a record in it). */
int lp_attach_begin(const char *sock)
{
	size_t n = strlen(sock);
	if (n >= sizeof lp_sock)
		return -1;
	if (__atomic_load_n(&lp_init_state, __ATOMIC_ACQUIRE) == LP_INIT_NONE) {
		lp_attach_mode = 1;
		lp_init();
	}
	if (!lp_attach_mode || !real_malloc)
		return -1; /* preloaded, or the allocator was not found */
	/* The program's threads run already and may hand blocks to one
	 * another: every clock read fences (no take-over: a membarrier
	 * registration now waits ~8 ms for the kernel). */
	__atomic_store_n(&lp_clock_owner, LP_CLOCK_SHARED, __ATOMIC_SEQ_CST);
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	memcpy(lp_sock, sock, n + 1);
	int rc = lp_region_open(lp_sock, 0, 0);
	if (rc == 0)
		lp_start_recording();
	lp_leave(&t->busy);
	return rc == 0 ? 0 : -1;
}

/* lp_attach_end stops recording after the calling thread's folded
 * allocations are written out. */
void lp_attach_end(void)
{
	struct lp_thread *t = lp_rec_thread();
	if (t)
		lp_fold_flush(t);
	lp_ring_stop();
}

/* lp_child_reinit gives a fork child its own region: the parent's rings
 * are no longer ours to write. */
static void lp_child_reinit(void)
{
	struct lp_thread *t = &lp_tls;
	t->forking = 0;
	if (!lp_hdr)
		return;
	int parent = lp_region_pid;
	uint64_t fid = t->fork_id;
	lp_clock_fork();
	lp_enter(&t->busy);
	lp_region_drop();
	int rc = lp_region_open(lp_sock, parent, fid);
	if (rc == 0)
		lp_start_recording();
	else if (rc != LP_OPEN_FAILED && !lp_attach_mode)
		lp_forget_session(); /* a daemon's child after leakpath ended */
	lp_leave(&t->busy);
}

/*
 * lp_rec_slow decides whether the calling thread records now, doing the
 * work of first use: initialising the agent, attaching the thread, and in
 * a fork child switching to the child's own region. NULL: pass through.
 */
__attribute__((noinline)) struct lp_thread *lp_rec_slow(struct lp_thread *t)
{
	if (__atomic_load_n(&lp_init_state, __ATOMIC_ACQUIRE) != LP_INIT_DONE) {
		lp_init();
		if (__atomic_load_n(&lp_init_state, __ATOMIC_ACQUIRE) != LP_INIT_DONE)
			return NULL;
	}
	if (t->busy || !lp_hdr)
		return NULL;
	if (t->forking) {
		/* Between fork's handlers: the child must not touch the
		 * parent's region. */
		int saved = errno;
		pid_t me = getpid();
		errno = saved;
		if (me != lp_region_pid) {
			lp_child_reinit();
			if (!lp_hdr)
				return NULL;
		}
	}
	if (t->state == 0 || t->gen != lp_region_gen) {
		if (lp_thread_attach(t) != 0)
			return NULL;
		return t;
	}
	return t->state == 1 ? t : NULL;
}

static void lp_atfork_prepare(void)
{
	struct lp_thread *t = lp_rec_thread();
	if (t) {
		/* The child starts from what the collector knows at the fork. */
		lp_fold_flush(t);
		uint64_t id = __atomic_add_fetch(&lp_fork_seq, 1, __ATOMIC_RELAXED);
		uint64_t w[3] = {LP_HDR(LP_REC_FORK, 0, 3, 0), 0, id};
		lp_put(t, w, 3);
		t->fork_id = id;
	}
	lp_tls.forking = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	lp_mod_lock_acquire();
	lp_families_fork(1, 0);
	lp_pool_lock_fork(1);
}

static void lp_atfork_parent(void)
{
	lp_pool_lock_fork(0);
	lp_families_fork(0, 0);
	lp_mod_lock_release();
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	lp_tls.forking = 0;
}

static void lp_atfork_child(void)
{
	lp_pool_lock_fork(0);
	lp_families_fork(0, 1);
	lp_mod_lock_release();
	if (lp_tls.forking)
		lp_child_reinit();
}

/* lp_note_name records the name of thread th (tid when known, else 0). */
static void lp_note_name(struct lp_thread *t, int tid, pthread_t th, const char *name)
{
	uint64_t w[3 + 2] = {0};
	size_t n = strnlen(name, 15); /* the kernel keeps 15 bytes */
	memcpy(&w[3], name, n);
	w[0] = LP_HDR(LP_REC_THREAD_NAME, 0, 3 + (n + 8) / 8, (uint32_t)tid);
	w[2] = (uint64_t)th;
	lp_put(t, w, 3 + (unsigned)((n + 8) / 8));
}

/* lp_note_own_name records the calling thread's name as it is now (set
 * by pthread_setname_np or prctl, or inherited). */
static void lp_note_own_name(struct lp_thread *t)
{
	char name[17] = {0};
	int saved = errno, ok = 0, box = __atomic_load_n(&lp_sandboxed, __ATOMIC_RELAXED);
	if (box == LP_SANDBOX_LATER)
		return; /* its filter may kill even for openat: the names it set are known */
	if (!box) {
		ok = prctl(PR_GET_NAME, name, 0, 0, 0) == 0;
	} else {
		/* A seccomp filter may kill for prctl: the name from /proc. */
		if (lp_read_small("/proc/thread-self/comm", name, sizeof name) > 0) {
			name[strcspn(name, "\n")] = 0;
			ok = 1;
		}
	}
	if (ok)
		lp_note_name(t, t->tid, pthread_self(), name);
	errno = saved;
}

/*
 * lp_vfork_child reports whether the calling process is a vfork child: it
 * runs on its parent's memory and thread state (no fork handler ran) until
 * it execs or exits, and its exit is not the parent's: not recorded, not
 * held (a hold would scan the parent, stopped in vfork, as if it ended).
 */
static int lp_vfork_child(void)
{
	int saved = errno;
	int child = lp_hdr && (int)syscall(SYS_getpid) != lp_region_pid;
	errno = saved;
	return child;
}

/*
 * lp_wipe_below zeroes LP_WIPE bytes of the calling thread's stack below
 * its frame, unless that is near the stack's end. The hooks' frames were
 * there while the program ran: a block's address left in a slot nothing
 * writes again would be a root to the exit scan (a definite leak read as
 * reachable; how the frames are laid out decides which slots survive). At
 * the process's exit the hold's frames go there next; a thread that exits
 * leaves its stack to glibc's cache, which the scan reads too.
 */
#define LP_WIPE 16384u
static __attribute__((noinline)) void lp_wipe_frame(void)
{
	/* The array is the frame: it starts just below the return address,
	 * where the caller's next callee's frame goes. */
	unsigned char pad[LP_WIPE];
	memset(pad, 0, sizeof pad);
	__asm__ volatile("" : : "r"(pad) : "memory");
}

static inline __attribute__((always_inline)) void lp_wipe_below(struct lp_thread *t)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	if (!t->stack_lo || sp - t->stack_lo > LP_WIPE + 8192) /* far from the guard page */
		lp_wipe_frame();
}

/* lp_hold reports what the exiting thread folded and holds the process
 * for the collector's scan; prog is the program's state where it called
 * the exit function (NULL: not known). The flush's frames, below this one, held the
 * addresses of the blocks it wrote out; the hold's frames go there next
 * and the scan reads them: wiped in between, so that no slot the hold
 * does not write keeps one as a root. */
static __attribute__((noinline)) void lp_hold(struct lp_thread *t, const struct lp_ctx *prog)
{
	lp_fold_flush(t);
	lp_wipe_below(t);
	lp_hold_exit(prog);
}

/* lp_note_exit records the process's exit and holds it for the scan.
 * fn is the exit function the program called (exit, _exit, _Exit), on
 * the stack above: the scan starts at the program's frame that called it,
 * as the program left it. The frames of the exit function, of the handlers
 * it runs and of the agent's hold are not the program's: their slots that
 * nothing wrote hold what earlier calls (malloc's, the agent's hooks')
 * left, and a block's address there hid its leak (memcheck reads only
 * what was written; LeakSanitizer's scan starts above its own frames).
 * Not inlined: its frame goes where lp_wipe_below cleared. */
static __attribute__((noinline)) void lp_note_exit(int status, unsigned how, int name, const void *fn)
{
	struct lp_thread *t = lp_rec_thread();
	if (t && !lp_vfork_child()) {
		if (name)
			lp_note_own_name(t);
		lp_families_exit(t); /* modules no dlopen of the agent's brought */
		uint64_t w[3] = {LP_HDR(LP_REC_EXIT, 0, 3, (uint32_t)status), 0, how};
		lp_put(t, w, 3);
		lp_enter(&t->busy);
		struct lp_ctx prog;
		int known = lp_caller_ctx(t, &prog, fn) == 0;
		lp_hold(t, known ? &prog : NULL);
		lp_leave(&t->busy);
		__asm__ volatile("" : : "r"(&prog) : "memory"); /* read by the scan */
	}
}

static void lp_on_exit(int status, void *arg)
{
	(void)arg;
	lp_wipe_below(&lp_tls);
	lp_note_exit(status, LP_EXIT_EXIT, 1, (const void *)exit);
}

void lp_note_thread_exit(void)
{
	struct lp_thread *t = &lp_tls;
	if (t->state != 1 || t->gen != lp_region_gen || t->busy)
		return;
	lp_note_own_name(t);
	uint64_t w[2] = {LP_HDR(LP_REC_THREAD_EXIT, 0, 2, (uint32_t)t->tid), 0};
	lp_put(t, w, 2);
	lp_fold_exiting(t);
	lp_slot_exited(t);
	/* The thread may still free a little (other destructors, its TLS);
	 * that is recorded without the tables and without folding. What is
	 * pending stays in the fold area: the collector reads it when the
	 * thread is gone. */
	t->fold = NULL;
	lp_tables_park(t);
	/* Its stack is dead below its start routine's frame, whatever glibc
	 * keeps of it (lp_own.dead). */
	struct lp_ctx outer;
	uintptr_t dead_sp = (uintptr_t)__builtin_frame_address(0);
	if (lp_outer_ctx(t, &outer) == 0)
		dead_sp = outer.sp;
	lp_dead_stack(t->stack_lo, t->stack_hi, dead_sp, (uintptr_t)__builtin_thread_pointer(), 1);
	lp_wipe_below(t);
}

/* ---- recording ---- */

static __attribute__((noinline)) void lp_rec_alloc(struct lp_thread *t, unsigned fn, void *p,
						    size_t n, void *fp)
{
	/* The map's word of p is likely not cached: fetch it (for writing)
	 * while the stack is walked. */
	uint64_t *m = lp_pmap_at((uint64_t)p);
	if (LP_LIKELY(t->fold != NULL))
		__builtin_prefetch(m, 1);
	uint32_t sid = lp_stack_id(t, fp);
	if (LP_UNLIKELY(lp_hdr && __atomic_load_n(&lp_hdr->suspects_n, __ATOMIC_RELAXED) != 0))
		lp_trace_ask(t, sid, p, n);
	if (LP_LIKELY(t->fold && p && !t->in_fold && !(t->scopes | t->ignoring) && !lp_is_slot(p))) {
		/* Inside a scope every block is recorded: one that folds would
		 * count where its aggregate is read, not in the scope. A slot
		 * block too: the collector watches it from its allocation on.
		 * And one the program says is no leak (__lsan_disable). */
		lp_enter(&t->in_fold);
		lp_fold_alloc(t, fn, p, n, sid, m);
		lp_leave(&t->in_fold);
		return;
	}
	uint64_t w[4] = {LP_HDR(LP_REC_ALLOC, fn, 4, sid), 0, (uint64_t)p, (uint64_t)n};
	lp_put_rec(t, w, 4);
	if (LP_UNLIKELY(t->ignoring) && p)
		lp_ignore_write(t, p);
	t->last_alloc = (uint64_t)p;
	if (p && t->fold)
		lp_fold_recorded(t, n);
}

/* lp_rec_free_slow is lp_rec_free but for its common case; unnamed: the
 * map names no pending block p (lp_fold_free_quick looked). */
static __attribute__((noinline)) void lp_rec_free_slow(struct lp_thread *t, unsigned fn, void *p, void *fp,
							int unnamed)
{
	int folds = t->fold && !t->in_fold;
	if (LP_LIKELY(folds)) {
		if (!unnamed) {
			lp_enter(&t->in_fold);
			int folded = lp_fold_free(t, fn, p, fp);
			lp_leave(&t->in_fold);
			if (folded)
				return;
		}
	} else if (lp_fold_on && !t->in_fold) {
		/* A thread that folds no more (exiting: its TSD destructors) or
		 * never did may free a block some thread keeps pending, its own
		 * included: the allocation is written first. */
		lp_enter(&t->in_fold);
		lp_fold_take(t, p);
		lp_leave(&t->in_fold);
	}
	uint32_t sid = lp_free_stacks ? lp_stack_id(t, fp) : 0;
	if (t->last_alloc == (uint64_t)p) {
		/* Freed with no allocation on this thread in between. */
		fn |= LP_FN_TEMPORARY;
		t->last_alloc = 0;
	}
	/* A full FIFO evicts its oldest entry now rather than at the next
	 * allocation, dated as this record is (lp_fold_evict_dated), and
	 * written with it: one reservation of the ring for the two. */
	uint64_t w[9];
	uint64_t ts = 0;
	w[0] = 0;
	if (LP_LIKELY(folds)) {
		/* Until the evicted entry is written, a signal handler's
		 * allocation or free neither folds nor evicts: the entry is
		 * out of the FIFO and not yet in the ring. (Its free of that
		 * block is written first, dated after it: the collector parks
		 * a free that comes before its allocation.) */
		lp_enter(&t->in_fold);
		ts = lp_fold_evict_dated(t, w);
	}
	unsigned at = w[0] ? 6 : 0;
	w[at] = LP_HDR(LP_REC_FREE, fn, 3, sid);
	w[at + 1] = ts;
	w[at + 2] = (uint64_t)p;
	if (at)
		lp_put_rec(t, w, 9);
	else
		lp_put_rec(t, w, 3);
	if (LP_LIKELY(folds))
		lp_leave(&t->in_fold);
}

/* lp_rec_free records the free of p by fn: folded, most often, on a path
 * of its own (lp_fold_free_quick). */
static inline void lp_rec_free(struct lp_thread *t, unsigned fn, void *p, void *fp)
{
	/* The allocator reads the block's header next, as seldom cached as
	 * the map's word read here: both misses at once. Not for a block of
	 * the slot pool, which has no header: the prefetch's page walk
	 * would mark the page before it, another slot's, accessed, and
	 * --stale take that block for read. */
	if (LP_LIKELY(!lp_is_slot(p)))
		__builtin_prefetch((const char *)p - 8);
	int folded = LP_LIKELY(t->fold && !t->in_fold) ? lp_fold_free_quick(t, fn, p, fp) : -1;
	if (folded > 0)
		return;
	lp_rec_free_slow(t, fn, p, fp, folded == 0);
}

/* lp_rec_realloc_begin records that the realloc of p from hook frame fp
 * is about to run, with its stack (a realloc the C library aborts inside
 * never writes its end), and returns the stack's id. */
static uint32_t lp_rec_realloc_begin(struct lp_thread *t, void *p, void *fp)
{
	uint32_t sid = lp_stack_id(t, fp);
	uint64_t w[3] = {LP_HDR(LP_REC_REALLOC_BEGIN, LP_FN_REALLOC, 3, sid), 0, (uint64_t)p};
	lp_put(t, w, 3);
	return sid;
}

/* lp_rec_realloc records the realloc's end; sid is its stack if its
 * begin found it, else 0. */
static __attribute__((noinline)) void lp_rec_realloc(struct lp_thread *t, unsigned fn, void *old,
						      void *p, size_t n, void *fp, uint32_t sid)
{
	if (!sid)
		sid = lp_stack_id(t, fp);
	uint64_t w[5] = {LP_HDR(LP_REC_REALLOC, fn, 5, sid), 0, (uint64_t)old, (uint64_t)p, (uint64_t)n};
	lp_put_rec(t, w, 5);
	if (LP_UNLIKELY(t->ignoring) && p)
		lp_ignore_write(t, p);
	if (p && t->fold)
		lp_fold_recorded(t, n);
}

#define LP_FP() __builtin_frame_address(0)

/* ---- for families.c: allocators whose entries the agent patched ---- */

/* lp_note_alloc records an allocation by fn of n bytes at p; fp is the
 * frame of the agent's function the program called. */
void lp_note_alloc(unsigned fn, void *p, size_t n, void *fp)
{
	struct lp_thread *t = lp_rec_thread();
	if (t)
		lp_rec_alloc(t, fn, p, n, fp);
}

/* lp_note_free records that p is about to be released by fn. */
void lp_note_free(unsigned fn, void *p, void *fp)
{
	if (!p)
		return;
	lp_watch_freed(p);
	struct lp_thread *t = lp_rec_thread();
	if (t)
		lp_rec_free(t, fn, p, fp);
}

/* lp_note_realloc_begin records that a realloc of old is about to run
 * and returns its stack (0: not recorded). */
uint32_t lp_note_realloc_begin(void *old, void *fp)
{
	struct lp_thread *t = lp_rec_thread();
	if (!t || !old)
		return 0;
	lp_watch_freed(old);
	if (lp_fold_on && !t->in_fold) {
		lp_enter(&t->in_fold);
		lp_fold_take(t, old);
		lp_leave(&t->in_fold);
	}
	return lp_rec_realloc_begin(t, old, fp);
}

/* lp_note_realloc records the realloc's end. */
void lp_note_realloc(void *old, void *p, size_t n, void *fp, uint32_t sid)
{
	struct lp_thread *t = lp_rec_thread();
	if (!t)
		return;
	lp_rec_realloc(t, LP_FN_REALLOC, old, p, n, fp, sid);
	if (p)
		t->last_alloc = (uint64_t)p;
}


/* ---- the C allocator ---- */

LP_EXPORT void *malloc(size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_malloc))
		return lp_boot_alloc(n);
	void *p = lp_slot_try(t, n, __builtin_return_address(0), 0); /* stale slots */
	if (LP_LIKELY(!p)) {
		p = real_malloc(n);
		if (t)
			lp_pmap_prefetch(p);
		lp_fresh(p, n);
	}
	if (t)
		lp_rec_alloc(t, LP_FN_MALLOC, p, n, LP_FP());
	return p;
}

LP_EXPORT void *calloc(size_t nmemb, size_t size)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_calloc)) {
		size_t n;
		if (__builtin_mul_overflow(nmemb, size, &n))
			return NULL;
		return lp_boot_alloc(n);
	}
	size_t n;
	if (__builtin_mul_overflow(nmemb, size, &n))
		n = SIZE_MAX;
	void *p = lp_slot_try(t, n, __builtin_return_address(0), 1); /* stale slots */
	if (LP_LIKELY(!p))
		p = real_calloc(nmemb, size);
	if (t) {
		lp_rec_alloc(t, LP_FN_CALLOC, p, n, LP_FP());
	}
	return p;
}

LP_EXPORT void free(void *p)
{
	if (!p || LP_UNLIKELY(lp_is_boot(p)))
		return;
	lp_watch_freed(p); /* whether or not this free is recorded */
	struct lp_thread *t = lp_rec_thread();
	if (t)
		lp_rec_free(t, LP_FN_FREE, p, LP_FP());
	if (LP_UNLIKELY(lp_is_slot(p))) /* stale slots */
		lp_slot_free(p);
	else
		real_free(p);
}

static void *lp_realloc(void *old, size_t n, unsigned fn, void *fp)
{
	if (LP_UNLIKELY(lp_is_boot(old))) {
		size_t had = lp_boot_size(old);
		void *p = malloc(n);
		if (p)
			memcpy(p, old, had < n ? had : n);
		return p;
	}
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_realloc))
		return old ? NULL : lp_boot_alloc(n);
	lp_watch_freed(old);
	if (LP_UNLIKELY(lp_is_slot(old))) { /* stale slots: the block moves out of the pool */
		uint32_t sid = t ? lp_rec_realloc_begin(t, old, fp) : 0;
		void *p = lp_slot_realloc(old, n, real_malloc);
		if (t) {
			lp_rec_realloc(t, fn, old, p, n, fp, sid);
			if (p)
				t->last_alloc = (uint64_t)p;
		}
		return p;
	}
	if (!t)
		return real_realloc(old, n);
	uint32_t sid = 0;
	if (old) {
		if (lp_fold_on && !t->in_fold) {
			/* The collector must know the block before it moves. */
			lp_enter(&t->in_fold);
			lp_fold_take(t, old);
			lp_leave(&t->in_fold);
		}
		sid = lp_rec_realloc_begin(t, old, fp);
	}
	size_t had = lp_fresh_had(old);
	void *p = real_realloc(old, n);
	if (!old)
		lp_fresh(p, n);
	else
		lp_fresh_tail(p, had, n);
	lp_rec_realloc(t, fn, old, p, n, fp, sid);
	if (p)
		t->last_alloc = (uint64_t)p;
	return p;
}

LP_EXPORT void *realloc(void *old, size_t n)
{
	return lp_realloc(old, n, LP_FN_REALLOC, LP_FP());
}

LP_EXPORT void *reallocarray(void *old, size_t nmemb, size_t size)
{
	size_t n;
	if (__builtin_mul_overflow(nmemb, size, &n)) {
		struct lp_thread *t = lp_rec_thread();
		if (t)
			lp_rec_realloc(t, LP_FN_REALLOCARRAY, old, NULL, SIZE_MAX, LP_FP(), 0);
		errno = ENOMEM;
		return NULL;
	}
	return lp_realloc(old, n, LP_FN_REALLOCARRAY, LP_FP());
}

LP_EXPORT void *memalign(size_t align, size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_memalign))
		return NULL;
	void *p = real_memalign(align, n);
	lp_fresh(p, n);
	if (t)
		lp_rec_alloc(t, LP_FN_MEMALIGN, p, n, LP_FP());
	return p;
}

LP_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_posix_memalign))
		return ENOMEM;
	int rc = real_posix_memalign(out, align, n);
	if (rc == 0)
		lp_fresh(*out, n);
	if (t)
		lp_rec_alloc(t, LP_FN_POSIX_MEMALIGN, rc == 0 ? *out : NULL, n, LP_FP());
	return rc;
}

LP_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_aligned_alloc))
		return NULL;
	void *p = real_aligned_alloc(align, n);
	lp_fresh(p, n);
	if (t)
		lp_rec_alloc(t, LP_FN_ALIGNED_ALLOC, p, n, LP_FP());
	return p;
}

LP_EXPORT void *valloc(size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_valloc))
		return NULL;
	void *p = real_valloc(n);
	lp_fresh(p, n);
	if (t)
		lp_rec_alloc(t, LP_FN_VALLOC, p, n, LP_FP());
	return p;
}

LP_EXPORT void *pvalloc(size_t n)
{
	struct lp_thread *t = lp_rec_thread();
	if (LP_UNLIKELY(!real_pvalloc))
		return NULL;
	void *p = real_pvalloc(n);
	lp_fresh(p, n);
	if (t)
		lp_rec_alloc(t, LP_FN_PVALLOC, p, n, LP_FP());
	return p;
}

/* ---- C++ operators ----
 *
 * When the next operator new is libstdc++'s, the hook does what libstdc++
 * does (allocate; on failure call the new-handler or throw bad_alloc), so
 * that it records once and with its own kind. The throw passes through
 * this frame by its unwind tables; no state needs restoring. Any other
 * operator new (a replacement in a library) is called through with
 * recording suspended, so its own malloc calls are not counted twice
 * (LP_BUSY_CALL in lp_cxx_through: resumed when it throws, too).
 * The nothrow forms are not interposed: libstdc++ and libc++ implement
 * them by calling the plain forms inside a try block. With no operator
 * new in the global scope (a C++ plugin dlopen'ed RTLD_LOCAL), each call
 * finds its caller's (below, and cxxreal.c).
 */

typedef void (*lp_handler_t)(void);
static lp_handler_t (*lp_get_new_handler)(void);
typedef void (*lp_thrower_t)(void) __attribute__((noreturn));
static lp_thrower_t lp_throw_bad_alloc;

/* lp_cxx_mode: 0 unknown, 1 a C++ runtime's (own loop), 2 call through. */
static int lp_cxx_mode(void *real)
{
	static int mode;
	if (LP_LIKELY(mode))
		return mode;
	Dl_info info;
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	int m = 2;
	/* An executable with an allocator of its own: libstdc++'s operator
	 * new calls it, not the one the agent would (families.c). libc++'s
	 * too is done here: its bad_alloc, thrown by LLVM's libunwind, must
	 * not pass a hook frame the agent's personality routine runs for
	 * (lp_cxx_through). */
	if (!lp_exe_malloc && real && dladdr(real, &info) && info.dli_fname && lp_cxx_runtime_file(info.dli_fname)) {
		lp_get_new_handler = (lp_handler_t (*)(void))lp_next("_ZSt15get_new_handlerv");
		lp_throw_bad_alloc = (lp_thrower_t)lp_next("_ZSt17__throw_bad_allocv");
		if (lp_get_new_handler && lp_throw_bad_alloc)
			m = 1;
	}
	lp_leave(&t->busy);
	mode = m;
	return m;
}

/* lp_cxx_alloc_with allocates like the operator new (align 0) or its
 * aligned form of the runtime whose new-handler getter and bad_alloc
 * thrower are gh and thr (libstdc++'s and libc++'s do the same). */
static inline __attribute__((always_inline)) void *lp_cxx_alloc_with(size_t n, size_t align,
								   lp_handler_t (*gh)(void), lp_thrower_t thr)
{
	if (n == 0)
		n = 1;
	if (align) {
		if (align & (align - 1))
			thr();
		n = (n + align - 1) & ~(align - 1);
	}
	for (;;) {
		void *p = align ? real_aligned_alloc(align, n) : real_malloc(n);
		if (LP_LIKELY(p != NULL))
			return p;
		lp_handler_t h = gh();
		if (!h)
			thr();
		h();
	}
}

/* lp_cxx_alloc allocates like libstdc++'s operator new (align 0) or its
 * aligned form. */
static void *lp_cxx_alloc(size_t n, size_t align)
{
	return lp_cxx_alloc_with(n, align, lp_get_new_handler, lp_throw_bad_alloc);
}

/* lp_cxx_through calls operator new f (aligned: with al) with the
 * thread's recording suspended. It is the only C++ hook frame with a
 * cleanup, hence the only one the agent's personality routine runs for
 * (families.c: it knows one unwinder, libgcc_s's; libc++'s comes with
 * LLVM's libunwind): the runtime's own bad_alloc thrown from a hook's
 * loop passes the hooks' frames with no personality at all. */
static __attribute__((noinline)) void *lp_cxx_through(struct lp_thread *t, void *f, int aligned, size_t n,
						      size_t al)
{
	void *p;
	if (aligned)
		LP_BUSY_CALL(t, p = ((void *(*)(size_t, lp_align_t))f)(n, al));
	else
		LP_BUSY_CALL(t, p = ((void *(*)(size_t))f)(n));
	return p;
}

#define LP_CXX_ALIGNED(k) ((k) == LP_CXX__ZnwmSt11align_val_t || (k) == LP_CXX__ZnamSt11align_val_t)

/* ---- the global scope without a C++ runtime ----
 *
 * A C program that dlopens a C++ plugin RTLD_LOCAL has no operator new in
 * its global scope: the plugin's calls reach the hooks, whose next
 * definition is none. Each call then goes to the definition the caller's
 * own scope has (cxxreal.c), the one the loader binds without the agent;
 * with none loaded at all (a module loaded lazily without its runtime),
 * the hooks serve malloc and free as the runtime would, and abort only
 * where it would terminate (no memory, and no bad_alloc to throw). */

/* lp_cxx_next is the definition C++ name k has for every caller: the next
 * one in the global scope. NULL: none there, each call looks its
 * caller's up (lp_cxx_local). */
static void *lp_cxx_next(enum lp_cxx_name k)
{
	if (lp_attach_mode) /* any module's, the agent's slots redirected there (attach.c) */
		return lp_sym(lp_cxx_names[k]);
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	int global = lp_cxx_global(k);
	lp_leave(&t->busy);
	return global ? lp_sym(lp_cxx_names[k]) : NULL;
}

/* lp_cxx_bare_new is operator new with no C++ runtime loaded. */
static void *lp_cxx_bare_new(size_t n, size_t align, const void *caller)
{
	if (n == 0)
		n = 1;
	void *p = NULL;
	if (!align)
		p = real_malloc ? real_malloc(n) : lp_boot_alloc(n);
	else if (!(align & (align - 1)) && real_aligned_alloc && n + align - 1 >= n)
		p = real_aligned_alloc(align, (n + align - 1) & ~(align - 1));
	if (LP_LIKELY(p != NULL))
		return p;
	lp_thrower_t thr = (lp_thrower_t)lp_cxx_local(LP_CXX__ZSt17__throw_bad_allocv, caller, NULL, NULL);
	if (thr)
		thr();
	abort(); /* std::terminate, with no bad_alloc to throw */
}

/* lp_cxx_new_local is operator new k for a call from caller when the
 * global scope has none; fp: the hook's frame. A C++ runtime's (libstdc++,
 * libc++) is done here, as lp_cxx_alloc does, with that runtime's
 * new-handler and bad_alloc; any other (a plugin's own operator new) is
 * called through. */
static void *lp_cxx_new_local(enum lp_cxx_name k, unsigned fn, size_t n, size_t align, const void *caller,
			      void *fp)
{
	int rt = 0;
	void *own[2] = {NULL, NULL};
	void *f = lp_cxx_local(k, caller, &rt, own);
	struct lp_thread *t = lp_rec_thread();
	void *p;
	if (!f)
		p = lp_cxx_bare_new(n, align, caller);
	else if (rt && own[0] && own[1] && !lp_exe_malloc)
		p = lp_cxx_alloc_with(n, align, (lp_handler_t (*)(void))own[0], (lp_thrower_t)own[1]);
	else
		p = lp_cxx_through(t, f, LP_CXX_ALIGNED(k), n, align);
	lp_fresh(p, n);
	if (t)
		lp_rec_alloc(t, fn, p, n, fp);
	return p;
}

#define LP_NEW(name, fn, decl, args, align)                                            \
	LP_EXPORT void *name decl                                                      \
	{                                                                              \
		static void *(*real) decl;                                             \
		static int local; /* no definition in the global scope */              \
		if (LP_UNLIKELY(!real)) {                                              \
			if (!local) {                                                  \
				real = (void *(*) decl)lp_cxx_next(LP_CXX_##name);     \
				local = !real && !lp_attach_mode;                      \
			}                                                              \
			if (!real)                                                     \
				return lp_cxx_new_local(LP_CXX_##name, fn, n, align,   \
							__builtin_return_address(0), LP_FP()); \
		}                                                                      \
		struct lp_thread *t = lp_rec_thread();                                 \
		void *p;                                                               \
		if (LP_LIKELY(lp_cxx_mode((void *)real) == 1)) {                       \
			p = align ? NULL                                               \
				  : lp_slot_try(t, n, __builtin_return_address(0), 0); \
			if (LP_LIKELY(!p))                                             \
				p = lp_cxx_alloc(n, align);                            \
		} else {                                                               \
			p = lp_cxx_through(t, (void *)real, LP_CXX_ALIGNED(LP_CXX_##name), \
					   n, align);                                  \
		}                                                                      \
		if (t)                                                                 \
			lp_pmap_prefetch(p);                                           \
		lp_fresh(p, n);                                                        \
		if (t)                                                                 \
			lp_rec_alloc(t, fn, p, n, LP_FP());                            \
		return p;                                                              \
	}

/* lp_cxx_missing ends the process as the dynamic linker does at a call
 * to a function no module defines (bound lazily). */
__attribute__((noreturn)) static void lp_cxx_missing(enum lp_cxx_name k)
{
	static const char pre[] = ": symbol lookup error: undefined symbol: ";
	extern char *program_invocation_name;
	const char *prog = program_invocation_name ? program_invocation_name : "?";
	(void)!write(2, prog, strlen(prog));
	(void)!write(2, pre, sizeof pre - 1);
	(void)!write(2, lp_cxx_names[k], strlen(lp_cxx_names[k]));
	(void)!write(2, "\n", 1);
	_exit(127);
}

/* The object of an exception the program's operator new throws inside
 * LP_BUSY_CALL is a block of the program's like any (the catch's end
 * frees it): its allocation is recorded, the thread's recording resumed
 * for it, or its free would read as an invalid one. */
LP_EXPORT void *__cxa_allocate_exception(size_t n)
{
	static void *(*real)(size_t);
	void *(*f)(size_t) = real;
	if (LP_UNLIKELY(!f)) {
		f = real = (void *(*)(size_t))lp_cxx_next(LP_CXX___cxa_allocate_exception);
		if (!f)
			f = (void *(*)(size_t))lp_cxx_local(LP_CXX___cxa_allocate_exception,
							   __builtin_return_address(0), NULL, NULL);
		if (!f)
			lp_cxx_missing(LP_CXX___cxa_allocate_exception);
	}
	struct lp_thread *t = &lp_tls;
	int busy = t->busy;
	if (!busy || busy != t->through)
		return f(n); /* not inside the program's allocator alone */
	t->busy = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	void *p = f(n);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	t->busy = busy;
	return p;
}

#define LP_DELETE(name, fn, decl, args)                                                \
	LP_EXPORT void name decl                                                       \
	{                                                                              \
		static void (*real) decl;                                              \
		static int local; /* no definition in the global scope */              \
		if (LP_UNLIKELY(!real) && !local) {                                    \
			real = (void (*) decl)lp_cxx_next(LP_CXX_##name);              \
			local = !real && !lp_attach_mode;                              \
		}                                                                      \
		if (!p || LP_UNLIKELY(lp_is_boot(p)))                                  \
			return;                                                        \
		lp_watch_freed(p);                                                     \
		struct lp_thread *t = lp_rec_thread();                                 \
		if (t) {                                                               \
			lp_rec_free(t, fn, p, LP_FP());                                \
			lp_enter(&t->busy);                                            \
		}                                                                      \
		if (LP_UNLIKELY(lp_is_slot(p)))                                        \
			lp_slot_free(p); /* stale slots */                             \
		else if (real)                                                         \
			real args;                                                     \
		else {                                                                 \
			/* the caller's; a runtime's (or none) is free */              \
			int rt = 0;                                                    \
			void (*f) decl = (void (*) decl)lp_cxx_local(                  \
				LP_CXX_##name, __builtin_return_address(0), &rt, NULL); \
			if (f && (!rt || lp_exe_malloc))                               \
				f args;                                                \
			else                                                           \
				real_free(p);                                          \
		}                                                                      \
		if (t)                                                                 \
			lp_leave(&t->busy);                                            \
	}

LP_NEW(_Znwm, LP_FN_NEW, (size_t n), (n), 0)
LP_NEW(_Znam, LP_FN_NEW_ARRAY, (size_t n), (n), 0)
LP_NEW(_ZnwmSt11align_val_t, LP_FN_NEW, (size_t n, lp_align_t al), (n, al), al)
LP_NEW(_ZnamSt11align_val_t, LP_FN_NEW_ARRAY, (size_t n, lp_align_t al), (n, al), al)

LP_DELETE(_ZdlPv, LP_FN_DELETE, (void *p), (p))
LP_DELETE(_ZdaPv, LP_FN_DELETE_ARRAY, (void *p), (p))
LP_DELETE(_ZdlPvm, LP_FN_DELETE, (void *p, size_t n), (p, n))
LP_DELETE(_ZdaPvm, LP_FN_DELETE_ARRAY, (void *p, size_t n), (p, n))
LP_DELETE(_ZdlPvRKSt9nothrow_t, LP_FN_DELETE, (void *p, lp_nothrow_t nt), (p, nt))
LP_DELETE(_ZdaPvRKSt9nothrow_t, LP_FN_DELETE_ARRAY, (void *p, lp_nothrow_t nt), (p, nt))
LP_DELETE(_ZdlPvSt11align_val_t, LP_FN_DELETE, (void *p, lp_align_t al), (p, al))
LP_DELETE(_ZdaPvSt11align_val_t, LP_FN_DELETE_ARRAY, (void *p, lp_align_t al), (p, al))
LP_DELETE(_ZdlPvmSt11align_val_t, LP_FN_DELETE, (void *p, size_t n, lp_align_t al), (p, n, al))
LP_DELETE(_ZdaPvmSt11align_val_t, LP_FN_DELETE_ARRAY, (void *p, size_t n, lp_align_t al),
	  (p, n, al))
LP_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, LP_FN_DELETE,
	  (void *p, lp_align_t al, lp_nothrow_t nt), (p, al, nt))
LP_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, LP_FN_DELETE_ARRAY,
	  (void *p, lp_align_t al, lp_nothrow_t nt), (p, al, nt))

/* ---- process events ---- */

LP_EXPORT pid_t fork(void)
{
	if (LP_UNLIKELY(!real_fork)) {
		real_fork = lp_sym("fork");
		if (!real_fork) {
			errno = ENOSYS;
			return -1;
		}
	}
	pid_t pid = real_fork();
	if (pid != 0) {
		int saved = errno;
		struct lp_thread *t = lp_rec_thread();
		if (t && t->fork_id) {
			uint64_t w[4] = {LP_HDR(LP_REC_FORK_DONE, 0, 4, 0), 0, t->fork_id,
					 (uint64_t)(int64_t)(pid > 0 ? pid : -saved)};
			lp_put(t, w, 4);
			t->fork_id = 0;
		}
		errno = saved;
	}
	return pid;
}

LP_EXPORT int pthread_setname_np(pthread_t th, const char *name)
{
	static int (*real)(pthread_t, const char *);
	if (LP_UNLIKELY(!real)) {
		real = (int (*)(pthread_t, const char *))lp_sym("pthread_setname_np");
		if (!real)
			return ENOSYS;
	}
	int rc = real(th, name);
	struct lp_thread *t;
	if (rc == 0 && (t = lp_rec_thread()) != NULL) {
		int saved = errno;
		lp_note_name(t, pthread_equal(th, pthread_self()) ? t->tid : 0, th, name);
		errno = saved;
	}
	return rc;
}

/* lp_sandbox_begin is called as the program installs a seccomp filter:
 * the calling thread's name is read while that is still safe (no name is
 * read at exit under the program's own filter). */
static void lp_sandbox_begin(void)
{
	struct lp_thread *t;
	if (__atomic_load_n(&lp_sandboxed, __ATOMIC_RELAXED) != LP_SANDBOX_LATER && (t = lp_rec_thread()) != NULL)
		lp_note_own_name(t);
	lp_sandbox_later();
}

/* lp_prctl_sandboxes says whether prctl(option, mode, filter) installs a
 * seccomp filter: libseccomp probes the kernel with filters of NULL,
 * which fail and are not. */
static inline int lp_prctl_sandboxes(long option, unsigned long mode, unsigned long filter)
{
	return option == PR_SET_SECCOMP && (mode == SECCOMP_MODE_STRICT || filter != 0);
}

/* prctl and syscall are followed for a seccomp filter the program
 * installs (libseccomp uses syscall(SYS_seccomp), else prctl): the agent
 * stops its own calls a filter may kill for before it is in place. */
LP_EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long),
		      a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (lp_prctl_sandboxes(option, a2, a3))
		lp_sandbox_begin();
	if (LP_UNLIKELY(!real_prctl)) /* called before the agent's start */
		real_prctl = (int (*)(int, ...))lp_sym("prctl");
	if (LP_UNLIKELY(!real_prctl)) {
		errno = ENOSYS;
		return -1;
	}
	int rc = real_prctl(option, a2, a3, a4, a5);
	struct lp_thread *t;
	if (option == PR_SET_NAME && rc == 0 && a2 && (t = lp_rec_thread()) != NULL) {
		int saved = errno; /* as pthread_setname_np: a name known without asking */
		lp_note_name(t, t->tid, pthread_self(), (const char *)a2);
		errno = saved;
	}
	return rc;
}

LP_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	long a[6];
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long); /* what the caller passed, or what its registers held */
	va_end(ap);
	/* seccomp(2)'s operation, flags, filter; or prctl's arguments. */
	if ((nr == SYS_seccomp && (a[0] == SECCOMP_SET_MODE_STRICT || (a[0] == SECCOMP_SET_MODE_FILTER && a[2]))) ||
	    (nr == SYS_prctl && lp_prctl_sandboxes(a[0], (unsigned long)a[1], (unsigned long)a[2])))
		lp_sandbox_begin();
	if (LP_UNLIKELY(!real_syscall))
		real_syscall = (long (*)(long, ...))lp_sym("syscall");
	if (LP_UNLIKELY(!real_syscall)) {
		errno = ENOSYS;
		return -1;
	}
	return real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* lp_dlopen_traced is dlopen called by the agent, for the allocators of
 * the modules it brings to be patched before the program has them
 * (families.c). */
__attribute__((noinline)) static void *lp_dlopen_traced(const char *file, int mode)
{
	struct lp_dlsnap before;
	lp_families_dlopen_begin(&before);
	void *h = real_dlopen(file, mode);
	int saved = errno;
	lp_families_dlopen_end(&before, h != NULL);
	errno = saved;
	return h;
}

/* dlopen, preloaded (attached, attach.c redirects the program's calls to
 * its own): the real one finds the file on behalf of its caller (its
 * RUNPATH, $ORIGIN), so where that may matter it is called as a tail
 * call, the caller's return address intact, and the modules it brings
 * are not looked at. */
LP_EXPORT void *dlopen(const char *file, int mode)
{
	if (LP_UNLIKELY(!real_dlopen))
		real_dlopen = lp_sym("dlopen");
	if (!lp_hdr || lp_dlopen_as_caller(file, __builtin_return_address(0)))
		return real_dlopen(file, mode); /* a tail call at -O2 */
	return lp_dlopen_traced(file, mode);
}

LP_EXPORT int dlclose(void *h)
{
	if (LP_UNLIKELY(!real_dlclose))
		real_dlclose = lp_sym("dlclose");
	int rc = real_dlclose(h);
	lp_families_dlclose();
	lp_cxx_forget();
	struct lp_thread *t = lp_rec_thread();
	if (t)
		lp_modules_refresh(t, 0);
	return rc;
}

LP_EXPORT void _exit(int status)
{
	lp_wipe_below(&lp_tls);
	lp_note_exit(status, LP_EXIT__EXIT, 0, (const void *)_exit);
	if (!real__exit)
		real__exit = lp_sym("_exit");
	if (real__exit)
		real__exit(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}

LP_EXPORT void _Exit(int status)
{
	lp_wipe_below(&lp_tls);
	lp_note_exit(status, LP_EXIT__EXIT, 0, (const void *)_Exit);
	if (!real__Exit)
		real__Exit = lp_sym("_Exit");
	if (real__Exit)
		real__Exit(status);
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}
