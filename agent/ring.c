/*
 * ring.c - the link to the collector: registration over its unix socket,
 * the shared region, per-thread rings and the record writer.
 *
 * The writer is lock-free: a thread appends only to its own ring. Signal
 * handlers that allocate may interrupt a writer on the same thread; writers
 * therefore nest (see lp_put), and only the outermost one publishes head.
 */
#include "agent.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct lp_header *lp_hdr;
uint64_t lp_region_gen;
int lp_free_stacks;
int lp_fold_free_stacks;
int lp_exact_pending;
int lp_fold_on;
unsigned lp_max_depth = 64;
int lp_clock_tsc;
uintptr_t lp_clock_owner = LP_CLOCK_UNCLAIMED;
static uint32_t lp_clock_moves; /* take-overs so far (lp_clock_claim) */
#define LP_CLOCK_MOVES 8u

static size_t lp_region_size;
static unsigned char *lp_rings;
/* The region's shape and owner, as the collector made it: kept here, not
 * read again from the header, which the program can write over. */
uint32_t lp_slot_count;
unsigned char *lp_folds;
int lp_region_pid;
static uint64_t lp_ring_mask;  /* the small rings' size less 1 */
static uint32_t lp_big_slots;  /* the first rings, of lp_big_mask + 1 bytes */
static uint64_t lp_big_mask;
int lp_detached; /* the collector went away: stop recording */
static int lp_collector_pid;    /* as the region said at the hand-over */
static int lp_collector_parent; /* the collector started this process */

uint64_t lp_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

long lp_futex(uint32_t *addr, int op, uint32_t val, const struct timespec *timeout)
{
	return syscall(SYS_futex, addr, op, val, timeout, NULL, 0);
}

/* lp_detach_now stops recording for a collector that is gone. The new
 * generation sends each thread's next call through lp_rec_slow, which
 * finds nothing to attach to: from then on the hooks pass straight
 * through (no unwinding), and the program runs at full speed. */
static void lp_detach_now(void)
{
	__atomic_store_n(&lp_detached, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&lp_hdr->collector_state, LP_COLLECTOR_GONE, __ATOMIC_RELEASE);
	__atomic_add_fetch(&lp_region_gen, 1, __ATOMIC_RELEASE);
}

/*
 * lp_collector_alive says whether records written now will be read. A
 * collector that was killed cannot say so itself: one that started this
 * process is gone once getppid() names another (at once, even while it
 * is a zombie nobody reaped), any other once kill(2) finds no such
 * process. Neither is asked under a seccomp filter, which may kill for
 * them: there, and for a zombie that is not our parent, the waits watch
 * the collector's clock (lp_beat_stopped). Keeps errno.
 */
int lp_collector_alive(void)
{
	if (!lp_hdr || lp_detached)
		return 0;
	if (__atomic_load_n(&lp_hdr->collector_state, __ATOMIC_ACQUIRE) != LP_COLLECTOR_ALIVE)
		return 0;
	if (__atomic_load_n(&lp_sandboxed, __ATOMIC_RELAXED) != 0)
		return 1;
	int saved = errno, alive = 1;
	if (lp_collector_parent && getppid() != lp_collector_pid)
		alive = 0;
	else if (kill(lp_collector_pid, 0) != 0 && errno == ESRCH)
		alive = 0;
	errno = saved;
	return alive;
}

/* A collector's clock in the region (now_ts, renewed every 10 ms while it
 * runs) that stood still this long, across one wait, is a collector gone. */
#define LP_BEAT_GONE_NS 5000000000ull

/* lp_beat_stopped follows the collector's clock across one wait (b zeroed
 * before it): 1 once it stood still for LP_BEAT_GONE_NS. */
static int lp_beat_stopped(struct lp_beat *b)
{
	uint64_t ts = __atomic_load_n(&lp_hdr->now_ts, __ATOMIC_RELAXED);
	uint64_t now = lp_now();
	if (b->since == 0 || ts != b->ts) {
		b->ts = ts;
		b->since = now;
		return 0;
	}
	return now - b->since >= LP_BEAT_GONE_NS;
}

/* lp_collector_lost is asked after each wait for the collector that found
 * nothing done: 1 when the collector is gone, and then the agent stops
 * recording (the program goes on at full speed, never waits again). */
LP_HIDDEN int lp_collector_lost(struct lp_beat *b)
{
	if (lp_collector_alive() && !lp_beat_stopped(b))
		return 0;
	if (lp_hdr && !lp_detached)
		lp_detach_now();
	return 1;
}

/* lp_wait_collector waits while the collector has not moved *word on
 * from v, 10 ms at a time for at most ticks waits (< 0: no bound), and
 * not for a collector that is gone (lp_collector_lost). */
LP_HIDDEN void lp_wait_collector(uint32_t *word, uint32_t v, int ticks)
{
	struct lp_beat beat = {0};
	for (int i = 0; ticks < 0 || i < ticks; i++) {
		if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != v)
			return;
		struct timespec to = {.tv_nsec = 10 * 1000 * 1000};
		lp_futex(word, FUTEX_WAIT, v, &to);
		if (__atomic_load_n(word, __ATOMIC_ACQUIRE) == v && lp_collector_lost(&beat))
			return;
	}
}

/* lp_ring_stop makes every writer drop its records from now on (a
 * detach); a new region (lp_region_open) starts them again. */
LP_HIDDEN void lp_ring_stop(void)
{
	__atomic_store_n(&lp_detached, 1, __ATOMIC_RELEASE);
}

/* lp_trusted says whether path (a session directory or a socket in it)
 * belongs to root or to us and cannot be replaced by anyone else: a
 * session directory removed under a daemon could be made again by another
 * user, who must not get our records nor hand us a region. lstat, not
 * getsockopt: a seccomp filter the program started under allows what the
 * dynamic loader needed. */
static int lp_trusted(const char *path, int dir)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return 0;
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return 0;
	if (dir)
		return S_ISDIR(st.st_mode) && (st.st_mode & 022) == 0;
	return S_ISSOCK(st.st_mode);
}

/* lp_unix_connect connects a new socket to path: its fd, or -1 with errno
 * from socket or connect. */
static int lp_unix_connect(const char *path)
{
	struct sockaddr_un sa;
	size_t n = strlen(path);
	if (n >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	/* A collector that never answers is given up after 10 s. (The hello
	 * needs no send timeout: 32 bytes into a new socket's empty buffer.) */
	struct timeval tv = {.tv_sec = 10};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* lp_dir_of copies the directory of path into dir (size bytes): 0, or -1
 * if it does not fit or has none. */
static int lp_dir_of(const char *path, char *dir, size_t size)
{
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path || (size_t)(slash - path) >= size)
		return -1;
	memcpy(dir, path, (size_t)(slash - path));
	dir[slash - path] = 0;
	return 0;
}

/* lp_say_unreachable tells the collector, on the socket anyone may reach
 * (LP_OTHER_SOCK in the session directory dir), that this process runs as another user and
 * cannot be recorded, so that the report names it; it waits for the
 * collector's byte, which comes once the collector has read what it wants
 * of /proc/PID. Best effort and silent. */
static void lp_say_unreachable(const char *dir)
{
	char other[108];
	size_t n = strlen(dir);
	if (n + sizeof LP_OTHER_SOCK > sizeof other)
		return;
	memcpy(other, dir, n);
	memcpy(other + n, LP_OTHER_SOCK, sizeof LP_OTHER_SOCK);
	if (!lp_trusted(other, 0))
		return;
	int fd = lp_unix_connect(other);
	if (fd < 0)
		return;
	struct lp_hello h = {
		.magic = LP_HELLO_MAGIC,
		.version = LP_WIRE_VERSION,
		.pid = getpid(),
		.ppid = getppid(),
	};
	char ack;
	if (send(fd, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h)
		(void)recv(fd, &ack, 1, 0);
	close(fd);
}

/*
 * lp_region_open registers this process image with the collector listening
 * on sock and maps the region it hands over. It returns 0, or on any
 * failure LP_OPEN_FAILED, LP_OPEN_GONE (no collector this process can
 * reach: the session is over, or it is not ours) or LP_OPEN_OTHER_USER
 * (this process runs as a user the collector's socket refuses), and the
 * agent stays passive. Holds no file descriptor afterwards, so the
 * target's descriptor numbers are not disturbed.
 */
LP_HIDDEN int lp_region_open(const char *sock, int parent_pid, uint64_t fork_id)
{
	int saved = errno, rc = LP_OPEN_FAILED, fd = -1, mfd = -1;
	char dir[108];
	if (lp_dir_of(sock, dir, sizeof dir) != 0) {
		rc = LP_OPEN_GONE;
		goto out;
	}
	if (!lp_trusted(dir, 1)) {
		rc = LP_OPEN_GONE; /* gone, or made again by someone else */
		goto out;
	}
	fd = lp_unix_connect(sock);
	if (fd < 0) {
		if (errno == EACCES) {
			rc = LP_OPEN_OTHER_USER;
			lp_say_unreachable(dir);
		} else if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTDIR) {
			rc = LP_OPEN_GONE;
		}
		goto out;
	}
	if (!lp_trusted(sock, 0)) {
		rc = LP_OPEN_GONE;
		goto out;
	}
	struct lp_hello h = {
		.magic = LP_HELLO_MAGIC,
		.version = LP_WIRE_VERSION,
		.pid = getpid(),
		.ppid = getppid(),
		.parent_pid = parent_pid,
		.fork_id = fork_id,
	};
	if (send(fd, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h)
		goto out;

	struct lp_welcome w;
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &w, .iov_len = sizeof w};
	struct msghdr msg = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = cbuf,
		.msg_controllen = sizeof cbuf,
	};
	ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	if (got != (ssize_t)sizeof w || w.magic != LP_HELLO_MAGIC || w.status != 0)
		goto out;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		goto out;
	memcpy(&mfd, CMSG_DATA(c), sizeof mfd);

	struct lp_header probe;
	if (pread(mfd, &probe, sizeof probe, 0) != (ssize_t)sizeof probe)
		goto out;
	if (probe.magic != LP_REGION_MAGIC || probe.version != LP_WIRE_VERSION ||
	    probe.ring_size == 0 || (probe.ring_size & (probe.ring_size - 1)) != 0 ||
	    probe.slot_count == 0 || probe.big_slots > probe.slot_count ||
	    (probe.big_slots != 0 && (probe.big_ring_size < probe.ring_size ||
				      (probe.big_ring_size & (probe.big_ring_size - 1)) != 0)) ||
	    probe.region_size < probe.data_offset + (uint64_t)probe.big_slots * probe.big_ring_size +
	    (uint64_t)(probe.slot_count - probe.big_slots) * probe.ring_size)
		goto out;
	void *p = mmap(NULL, probe.region_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		goto out;
	lp_hdr = p;
	lp_region_size = probe.region_size;
	{
		lp_hdr->own_table = (uint64_t)(uintptr_t)&lp_own;
		lp_hdr->tls_offset = (int64_t)((uintptr_t)&lp_tls - (uintptr_t)__builtin_thread_pointer());
		lp_hdr->tls_size = sizeof lp_tls;
	}
	lp_rings = (unsigned char *)p + probe.data_offset;
	lp_ring_mask = probe.ring_size - 1;
	lp_big_slots = probe.big_slots;
	lp_big_mask = probe.big_slots ? probe.big_ring_size - 1 : 0;
	lp_slot_count = probe.slot_count;
	lp_region_pid = h.pid;
	lp_collector_pid = probe.collector_pid;
	lp_collector_parent = probe.collector_pid > 0 && h.ppid == probe.collector_pid;
	lp_free_stacks = (probe.flags & LP_HF_FREE_STACKS) != 0;
	lp_fold_free_stacks = lp_free_stacks && (probe.flags & LP_HF_FOLD_FREE_STACKS) != 0;
	lp_exact_pending = (probe.flags & LP_HF_EXACT_TIMES) != 0;
	lp_clock_tsc = (probe.flags & LP_HF_CLOCK_TSC) != 0;
	lp_fold_on = (probe.flags & LP_HF_FOLD) != 0 && probe.fold_offset != 0 &&
		     probe.fold_offset + (uint64_t)probe.slot_count * LP_FOLD_SIZE <= probe.region_size &&
		     lp_pmap_setup() == 0;
	lp_folds = lp_fold_on ? (unsigned char *)p + probe.fold_offset : NULL;
	if (probe.max_depth >= 1 && probe.max_depth <= LP_MAX_DEPTH)
		lp_max_depth = probe.max_depth;
	lp_detached = 0;
	lp_region_gen++;
	rc = 0;
out:
	if (mfd >= 0)
		close(mfd);
	if (fd >= 0)
		close(fd);
	errno = saved;
	return rc;
}

/* lp_region_drop forgets the region (in a fork child: it is the parent's). */
LP_HIDDEN void lp_region_drop(void)
{
	if (lp_hdr)
		munmap(lp_hdr, lp_region_size);
	lp_hdr = NULL;
	lp_rings = NULL;
	lp_folds = NULL;
	lp_region_gen++;
}

/* lp_ring_of gives ring i's data and size less 1: the first lp_big_slots
 * rings are big (the threads that record most are usually the first), the
 * others follow them. */
static void lp_ring_of(uint32_t i, unsigned char **ring, uint64_t *mask)
{
	if (i < lp_big_slots) {
		*ring = lp_rings + (uint64_t)i * (lp_big_mask + 1);
		*mask = lp_big_mask;
		return;
	}
	*ring = lp_rings + (uint64_t)lp_big_slots * (lp_big_mask + 1) + (uint64_t)(i - lp_big_slots) * (lp_ring_mask + 1);
	*mask = lp_ring_mask;
}

static int lp_claim_slot(struct lp_thread *t)
{
	struct lp_header *h = lp_hdr;
	struct lp_slot *slots = (struct lp_slot *)((unsigned char *)h + LP_HEADER_SIZE);
	/* With every slot taken, wait a little for the collector to free
	 * those of dead threads, then run unrecorded rather than stall. */
	for (int round = 0; round < 5; round++) {
		for (uint32_t i = 0; i < lp_slot_count; i++) {
			uint32_t expect = LP_SLOT_FREE;
			if (__atomic_load_n(&slots[i].state, __ATOMIC_RELAXED) != LP_SLOT_FREE)
				continue;
			if (!__atomic_compare_exchange_n(&slots[i].state, &expect, LP_SLOT_ACTIVE, 0,
							 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
				continue;
			slots[i].tid = t->tid;
			uint32_t used = __atomic_load_n(&h->slots_used, __ATOMIC_RELAXED);
			while (used < i + 1 &&
			       !__atomic_compare_exchange_n(&h->slots_used, &used, i + 1, 0,
							    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
				;
			t->slot_index = i;
			t->slot = &slots[i];
			lp_ring_of(i, &t->ring, &t->ring_mask);
			t->res = __atomic_load_n(&slots[i].head, __ATOMIC_ACQUIRE);
			t->tail_seen = __atomic_load_n(&slots[i].tail, __ATOMIC_ACQUIRE);
			return 0;
		}
		/* Every slot taken: the collector frees those of dead threads. */
		if (!lp_collector_alive())
			return -1;
		uint32_t seen = __atomic_load_n(&h->progress, __ATOMIC_ACQUIRE);
		struct timespec to = {.tv_nsec = 10 * 1000 * 1000};
		__atomic_add_fetch(&h->producers_waiting, 1, __ATOMIC_ACQ_REL);
		lp_futex(&h->progress, FUTEX_WAIT, seen, &to);
		__atomic_sub_fetch(&h->producers_waiting, 1, __ATOMIC_ACQ_REL);
	}
	return -1;
}

static void lp_thread_exit_key(void *arg)
{
	(void)arg;
	lp_note_thread_exit();
}

static pthread_key_t lp_key;
static int lp_key_ok;

LP_HIDDEN void lp_ring_init_key(void)
{
	if (pthread_key_create(&lp_key, lp_thread_exit_key) == 0)
		lp_key_ok = 1;
}

/* The main thread's stack ends where the loader found it (ld.so exports it;
 * weak: not every C library does). */
extern void *__libc_stack_end __attribute__((weak));

/* A main thread's stack limit above this is taken from /proc/self/maps. */
#define LP_MAIN_STACK_MAX (64u << 20)

/*
 * lp_stack_bounds notes the calling thread's stack, which bounds its
 * unwinds. For the main thread, pthread_getattr_np reads /proc/self/maps
 * (~0.3 ms a process on some machines): instead, its top is the page of
 * __libc_stack_end (all frames lie below; above are the arguments and the
 * environment) and its bottom that less RLIMIT_STACK. Nothing else is
 * mapped there: the kernel keeps mmap's base at least 128 MB below the
 * stack. An unlimited or big limit goes the slow way, where glibc bounds
 * the stack by the mapping below it.
 */
static void lp_stack_bounds(struct lp_thread *t)
{
	struct rlimit rl;
	if (&__libc_stack_end != NULL && __libc_stack_end && t->tid == (int)syscall(SYS_getpid) &&
	    getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= LP_MAIN_STACK_MAX) {
		uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
		uintptr_t hi = ((uintptr_t)__libc_stack_end + page - 1) & ~(page - 1);
		t->stack_hi = hi;
		t->stack_lo = hi - (uintptr_t)rl.rlim_cur;
		return;
	}
	pthread_attr_t a;
	void *lo;
	size_t sz;
	if (pthread_getattr_np(pthread_self(), &a) != 0)
		return;
	if (pthread_attr_getstack(&a, &lo, &sz) == 0) {
		t->stack_lo = (uintptr_t)lo;
		t->stack_hi = (uintptr_t)lo + sz;
	}
	pthread_attr_destroy(&a);
}

/* lp_clock_revoke makes every thread fence its clock reads: the calling
 * thread records while another owns the clock, or lost it. */
__attribute__((noinline)) void lp_clock_revoke(void)
{
	__atomic_store_n(&lp_clock_owner, LP_CLOCK_SHARED, __ATOMIC_SEQ_CST);
}

/*
 * lp_clock_claim makes the calling thread, before its first record, the
 * clock's owner (lp_rdtsc_after) when that is safe: the first thread to
 * record in the process; a later one (the program's main thread starts a
 * worker and waits for it) takes the clock over, at most LP_CLOCK_MOVES
 * times a process, by storing itself as owner and having every running
 * thread pass through the kernel (membarrier): a thread that read the
 * clock before that was done reading it, and one that checks the owner
 * after finds itself not owner and revokes, before the stores its record
 * is followed by. Then one fence here, and the new owner's reads come
 * after all that. Without membarrier (a seccomp filter) no take-over.
 */
void lp_clock_claim(void)
{
	uintptr_t me = (uintptr_t)&lp_tls;
	uintptr_t o = LP_CLOCK_UNCLAIMED;
	if (__atomic_compare_exchange_n(&lp_clock_owner, &o, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED) ||
	    o == me || !lp_clock_tsc || lp_attach_mode)
		return;
	if (__atomic_add_fetch(&lp_clock_moves, 1, __ATOMIC_RELAXED) > LP_CLOCK_MOVES)
		return;
	__atomic_store_n(&lp_clock_owner, me, __ATOMIC_SEQ_CST);
	if (lp_barrier_sure() != 0) {
		lp_clock_revoke();
		return;
	}
	__asm__ volatile("lfence" ::: "memory");
}

/* lp_clock_fork makes a fork child's only thread the clock's owner: the
 * other threads' records are the parent's, in another region. */
void lp_clock_fork(void)
{
	__atomic_store_n(&lp_clock_owner, (uintptr_t)&lp_tls, __ATOMIC_SEQ_CST);
	lp_clock_moves = 0;
}

/*
 * lp_thread_attach gives the calling thread a ring in the current region.
 * Returns 0 when the thread records, -1 when it passes through.
 */
int lp_thread_attach(struct lp_thread *t)
{
	int saved = errno;
	lp_enter(&t->busy);
	int fresh = t->state == 0;
	if (fresh) {
		t->tid = (int)syscall(SYS_gettid);
		lp_clock_claim(); /* before its first record */
		lp_stack_bounds(t);
		lp_dead_stack(t->stack_lo, t->stack_hi, 0, 0, 0); /* live again */
	}
	t->gen = lp_region_gen;
	t->slot = NULL;
	if (!lp_hdr || lp_detached || lp_claim_slot(t) != 0) {
		t->state = 2;
		goto out;
	}
	if (t->stacks)
		lp_stacktab_reset(t->stacks); /* a fork child: new ids */
	else if (lp_tables_take(t) != 0) {
		t->state = 2;
		goto out;
	}
	lp_fold_attach(t, lp_folds ? (struct lp_fold *)(lp_folds + (uint64_t)t->slot_index * LP_FOLD_SIZE)
				   : NULL);
	t->state = 1;
	if (fresh && lp_key_ok)
		pthread_setspecific(lp_key, t);
	uint64_t w[3] = {LP_HDR(LP_REC_THREAD_START, 0, 3, (uint32_t)t->tid), 0,
			 (uint64_t)pthread_self()};
	lp_put(t, w, 3);
out:
	lp_leave(&t->busy);
	errno = saved;
	return t->state == 1 ? 0 : -1;
}

/* lp_wake_collector wakes the collector if it sleeps in its wait, once a
 * sleep: the producer that clears the flag the collector set rings, and
 * the others find it cleared. (Each record written while the collector
 * was woken but not yet running made a FUTEX_WAKE, ~65,000 a run of the
 * long-lived loop on a busy machine.) The collector reads the doorbell
 * before it sets the flag and looks at the rings before it sleeps: a
 * ring after the clear is never missed. */
static inline void lp_wake_collector(struct lp_header *h)
{
	uint32_t sleeping = 1;
	if (__atomic_load_n(&h->collector_sleeping, __ATOMIC_RELAXED) == 1 &&
	    __atomic_compare_exchange_n(&h->collector_sleeping, &sleeping, 0, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED)) {
		__atomic_add_fetch(&h->doorbell, 1, __ATOMIC_RELEASE);
		lp_futex(&h->doorbell, FUTEX_WAKE, 1, NULL);
	}
}

/* LP_YIELDS bounds the yields of a thread waiting for ring space before
 * it sleeps. LP_YIELD_RAN_NS: a yield that took longer ran another thread
 * meanwhile. */
#define LP_YIELDS 256
#define LP_YIELD_RAN_NS 2000

/* lp_wait_space waits until the collector freed ring bytes up to need.
 * Returns 0 when there is space, -1 when the record must be dropped. */
int lp_wait_space(struct lp_thread *t, uint64_t need, int nested)
{
	struct lp_header *h = lp_hdr;
	int saved = errno;
	int rc = 0;
	uint64_t spins = 0;
	struct lp_beat beat = {0};
	for (;;) {
		t->tail_seen = __atomic_load_n(&t->slot->tail, __ATOMIC_ACQUIRE);
		if (t->tail_seen >= need)
			break;
		if (nested || lp_detached) {
			rc = -1;
			break;
		}
		if (spins < 64) {
			spins++;
			__builtin_ia32_pause();
			continue;
		}
		/* Then yield a while before sleeping, so that a core with
		 * nothing else to run is not left idle to be woken again (a
		 * sleep and a wake cost most on a virtual machine, whose idle
		 * core halts). A yield that ran another thread says the core
		 * has work: sleep then. Where the program's threads outnumber
		 * the cores, they yielded to each other, a switch each time,
		 * tens of thousands a second, and took the collector's time. */
		if (spins < 64 + LP_YIELDS) {
			spins++;
			uint64_t y0 = lp_now();
			syscall(SYS_sched_yield);
			if (lp_now() - y0 > LP_YIELD_RAN_NS)
				spins = 64 + LP_YIELDS;
			continue;
		}
		/* Wake the collector and sleep until it makes progress. */
		lp_wake_collector(h);
		uint32_t seen = __atomic_load_n(&h->progress, __ATOMIC_ACQUIRE);
		t->tail_seen = __atomic_load_n(&t->slot->tail, __ATOMIC_ACQUIRE);
		if (t->tail_seen >= need)
			break;
		struct timespec to = {.tv_nsec = 20 * 1000 * 1000};
		__atomic_add_fetch(&h->producers_waiting, 1, __ATOMIC_ACQ_REL);
		lp_futex(&h->progress, FUTEX_WAIT, seen, &to);
		__atomic_sub_fetch(&h->producers_waiting, 1, __ATOMIC_ACQ_REL);
		/* A wait in which the collector drained nothing: is it there? */
		if (__atomic_load_n(&h->progress, __ATOMIC_ACQUIRE) == seen && lp_collector_lost(&beat)) {
			rc = -1;
			break;
		}
	}
	errno = saved;
	return rc;
}

/* lp_put_wrapped copies record w of words to the thread's ring at pos,
 * where the record wraps around the ring's end. */
void lp_put_wrapped(struct lp_thread *t, uint64_t pos, const uint64_t *w, unsigned words)
{
	for (unsigned i = 0; i < words; i++)
		memcpy(t->ring + ((pos + (uint64_t)i * 8) & t->ring_mask), &w[i], 8);
}

/* lp_put_nudge wakes the collector when over half of the thread's ring
 * waits for it. */
void lp_put_nudge(struct lp_thread *t)
{
	uint64_t size = t->ring_mask + 1;
	t->tail_seen = __atomic_load_n(&t->slot->tail, __ATOMIC_ACQUIRE);
	if (t->res - t->tail_seen > size / 2) {
		int saved = errno;
		lp_wake_collector(lp_hdr);
		errno = saved;
	}
}

/*
 * lp_put appends one record of words to the thread's ring. Word 0 is the
 * header; when the record type carries a timestamp in word 1, lp_put fills
 * it in as late as possible, just before the record becomes visible. The
 * hot records go through lp_put_rec (agent.h), which comes here when the
 * thread is inside a writer already (a signal handler's record).
 */
void lp_put(struct lp_thread *t, uint64_t *w, unsigned words)
{
	uint64_t bytes = (uint64_t)words * 8;
	uint64_t size = t->ring_mask + 1;
	unsigned type = (unsigned)(w[0] & 0xff);
	if (LP_UNLIKELY(lp_detached || bytes > size / 2))
		return;
	t->depth++;
	__asm__ volatile("" ::: "memory");
	int nested = t->depth > 1;
	uint64_t pos;
	if (nested) {
		/* Nothing else can touch t->res until we return: check first so
		 * that a record we must drop leaves no hole. */
		if (t->res + bytes > t->tail_seen + size &&
		    lp_wait_space(t, t->res + bytes - size, 1) != 0)
			goto done;
		pos = lp_xadd_local(&t->res, bytes);
	} else {
		pos = lp_xadd_local(&t->res, bytes);
		if (pos + bytes > t->tail_seen + size &&
		    lp_wait_space(t, pos + bytes - size, 0) != 0) {
			/* Detached: nobody reads this ring any more. */
			goto done;
		}
	}
	lp_ring_write(t, pos, w, words, size, type);
done:
	__asm__ volatile("" ::: "memory");
	t->depth--;
	__asm__ volatile("" ::: "memory");
	if (t->depth == 0) {
		__atomic_store_n(&t->slot->head, t->res, __ATOMIC_RELEASE);
		if (LP_UNLIKELY(t->res - t->tail_seen > size / 2))
			lp_put_nudge(t);
	}
}

/* lp_slot_exited marks the thread's slot as exited; the collector frees it
 * once the thread is gone and its ring is drained. */
LP_HIDDEN void lp_slot_exited(struct lp_thread *t)
{
	if (t->slot)
		__atomic_store_n(&t->slot->state, LP_SLOT_EXITED, __ATOMIC_RELEASE);
}

/*
 * lp_hold_regs spills the callee-saved registers into spill (which the
 * caller keeps live in its frame) and notes the stack pointer below it and
 * the thread pointer in h. Caller-saved registers hold nothing of the
 * program's across the calls that led here. The fallback when the
 * program's own state at its exit call is not known.
 */
static inline __attribute__((always_inline)) void lp_hold_regs(struct lp_header *h, uint64_t *spill)
{
#if defined(__x86_64__)
	uint64_t sp;
	__asm__ volatile("mov %%rbx, 0(%1)\n\t"
			 "mov %%rbp, 8(%1)\n\t"
			 "mov %%r12, 16(%1)\n\t"
			 "mov %%r13, 24(%1)\n\t"
			 "mov %%r14, 32(%1)\n\t"
			 "mov %%r15, 40(%1)\n\t"
			 "mov %%rsp, %0"
			 : "=r"(sp)
			 : "r"(spill)
			 : "memory");
	h->hold_sp = sp;
	h->hold_tp = (uint64_t)(uintptr_t)__builtin_thread_pointer();
#else
	(void)spill;
	h->hold_sp = 0;
	h->hold_tp = 0;
#endif
}

/*
 * lp_hold_exit holds the process at its end while the collector scans it
 * (see LP_HOLD_* in lp_wire.h), if the collector asked for that. Once per
 * process image; a second exiting thread passes through. The program's
 * own LeakSanitizer hooks are called first (lsan.c): the suppressions it
 * compiled in, and whether it turned the leak check off. prog is the
 * program's state at its exit call (NULL: not known), which stays live in
 * the caller's frame until this returns.
 */
LP_HIDDEN void lp_hold_exit(const struct lp_ctx *prog)
{
	struct lp_header *h = lp_hdr;
	if (!h || !(h->flags & LP_HF_HOLD_EXIT) || !lp_collector_alive())
		return;
	if (__atomic_load_n(&h->hold, __ATOMIC_ACQUIRE) != LP_HOLD_NONE)
		return;
	int saved = errno;
	const char *supp = NULL;
	h->hold_flags = lp_lsan_hooks(&supp) ? LP_HOLD_F_OFF : 0;
	h->hold_supp = (uint64_t)(uintptr_t)supp;
	/* Signals wait for the release: the scan may read the process while
	 * this thread, its only one, is held here and not stopped. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	uint64_t spill[6] = {0};
	lp_hold_regs(h, spill);
	h->hold_regs = 0;
	if (prog) {
		h->hold_sp = prog->sp;
		h->hold_regs = (uint64_t)(uintptr_t)prog->regs;
	}
	uint32_t expect = LP_HOLD_NONE;
	if (!__atomic_compare_exchange_n(&h->hold, &expect, LP_HOLD_REQUESTED, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		goto out;
	__atomic_add_fetch(&h->doorbell, 1, __ATOMIC_RELEASE);
	lp_futex(&h->doorbell, FUTEX_WAKE, 1, NULL);
	/* A collector that does not take the request in 5 s is not coming:
	 * withdraw it (the collector's own CAS then fails). One that is gone
	 * is not waited for. */
	lp_wait_collector(&h->hold, LP_HOLD_REQUESTED, 500);
	expect = LP_HOLD_REQUESTED;
	if (__atomic_compare_exchange_n(&h->hold, &expect, LP_HOLD_RELEASED, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		goto out;
	/* Scanning: wait for the release, but not for a collector that died. */
	lp_wait_collector(&h->hold, LP_HOLD_SCANNING, -1);
out:
	__asm__ volatile("" : : "r"(spill) : "memory"); /* live until here */
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
}

/*
 * lp_trace_ask asks the collector for a root-cause window on the calling
 * thread, which just allocated p (n bytes) at suspect site sid (see
 * LP_TRACE_* in lp_wire.h), and waits for it to attach, briefly. One
 * window at a time: a thread that finds one open passes through.
 */
LP_HIDDEN void lp_trace_ask(struct lp_thread *t, uint32_t sid, void *p, size_t n)
{
	struct lp_header *h = lp_hdr;
	if (!h || !p || !lp_collector_alive())
		return;
	uint32_t k = __atomic_load_n(&h->suspects_n, __ATOMIC_ACQUIRE);
	int hit = 0;
	for (uint32_t i = 0; i < k && i < LP_SUSPECTS; i++)
		hit |= __atomic_load_n(&h->suspects[i], __ATOMIC_RELAXED) == sid;
	if (!hit || __atomic_load_n(&h->trace_state, __ATOMIC_ACQUIRE) != LP_TRACE_IDLE)
		return;
	/* The collector spreads its windows over the site's allocations
	 * (not always the first after the previous window). */
	uint32_t skip = __atomic_load_n(&h->trace_skip, __ATOMIC_RELAXED);
	while (skip > 0 && !__atomic_compare_exchange_n(&h->trace_skip, &skip, skip - 1, 0, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED))
		;
	if (skip > 0)
		return;
	/* Claim the request's fields with the tid, fill them, then post. */
	int32_t none = 0;
	if (!__atomic_compare_exchange_n(&h->trace_tid, &none, (int32_t)t->tid, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return;
	int saved = errno;
	h->trace_addr = (uint64_t)(uintptr_t)p;
	h->trace_size = n;
	h->trace_stack = sid;
	if (lp_post(&h->trace_state, LP_TRACE_REQUESTED, LP_TRACE_IDLE, LP_TRACE_WAIT_MS) != 0)
		__atomic_store_n(&h->trace_tid, 0, __ATOMIC_RELEASE); /* withdrawn */
	errno = saved;
}

/*
 * lp_post posts a request to the collector: it stores req in *state,
 * rings the doorbell, and waits up to ms milliseconds for the collector to
 * take it (move *state on). Returns 0 when it did; -1 when nobody did, and
 * then the request is withdrawn (*state back to idle), so that a collector
 * that comes late finds nothing to take.
 */
LP_HIDDEN int lp_post(uint32_t *state, uint32_t req, uint32_t idle, int ms)
{
	struct lp_header *h = lp_hdr;
	__atomic_store_n(state, req, __ATOMIC_RELEASE);
	__atomic_add_fetch(&h->doorbell, 1, __ATOMIC_RELEASE);
	lp_futex(&h->doorbell, FUTEX_WAKE, 1, NULL);
	lp_wait_collector(state, req, ms / 10);
	uint32_t expect = req;
	if (__atomic_compare_exchange_n(state, &expect, idle, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return -1;
	return 0;
}
