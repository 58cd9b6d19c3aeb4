/*
 * scope.c - the program's own calls (agent/include/leakpath.h): scoped
 * monitors, snapshots and leak checks at points of its choosing, and the
 * count of stale epochs.
 *
 * A scope is two records in the thread's ring, SCOPE_BEGIN (with its name
 * and depth) and SCOPE_END; the collector attributes what the thread
 * allocates and frees in between. While a thread has a scope open it
 * folds nothing: a folded pair reaches the collector as an aggregate,
 * read when the agent writes it, not where the pair happened. The first
 * begin therefore writes out what the thread holds pending, so that no
 * pending block from before the scope can fold inside it.
 *
 * The depth is counted whether or not the thread records (before the
 * agent is ready, in pass-through), so begins and ends always pair up; an
 * end with no scope open does nothing.
 */
#include "agent.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <time.h>

LP_EXPORT void __leakpath_scope_begin(const char *name)
{
	struct lp_thread *t = &lp_tls;
	int depth = ++t->scopes;
	t = lp_rec_thread();
	if (!t)
		return;
	if (depth == 1)
		lp_fold_flush(t);
	size_t n = name ? strnlen(name, LP_SCOPE_NAME_MAX) : 0;
	unsigned nw = (unsigned)(n + 8) / 8; /* at least one NUL */
	uint64_t w[2 + (LP_SCOPE_NAME_MAX + 8) / 8];
	w[0] = LP_HDR(LP_REC_SCOPE_BEGIN, 0, 2 + nw, (uint32_t)depth);
	w[1] = 0;
	w[1 + nw] = 0;
	if (n)
		memcpy(&w[2], name, n);
	lp_put(t, w, 2 + nw);
}

LP_EXPORT void __leakpath_scope_end(void)
{
	struct lp_thread *t = &lp_tls;
	int depth = t->scopes;
	if (depth <= 0)
		return;
	t->scopes = depth - 1;
	t = lp_rec_thread();
	if (!t)
		return;
	uint64_t w[2] = {LP_HDR(LP_REC_SCOPE_END, 0, 2, (uint32_t)depth), 0};
	lp_put(t, w, 2);
}

static void lp_ask_wake(struct lp_header *h)
{
	lp_futex(&h->ask_state, FUTEX_WAKE, INT_MAX, NULL);
}

/*
 * lp_ask asks the collector for a snapshot or a leak check (see LP_ASK_*
 * in lp_wire.h) and waits for the answer. Returns the collector's result
 * (>= 0), -1 when it did not answer or failed, or LP_ASK_UNRECORDED
 * when this process is not recorded. fn is the exported function the
 * program called: the scan of this thread starts at the program's frame
 * that called it, with the registers it had there, not at the agent's
 * stack pointer (the dead frames of earlier calls below the program's
 * frame hold stale pointers that hid leaks).
 */
#define LP_ASK_UNRECORDED (-2)

static int64_t lp_ask(unsigned kind, const char *label, const void *fn)
{
	struct lp_thread *t = lp_rec_thread();
	struct lp_header *h = lp_hdr;
	if (!t || !h || !lp_collector_alive())
		return LP_ASK_UNRECORDED;
	int saved = errno;
	int64_t result = -1;
	/* One request at a time: wait for the one under way, if any (a scan
	 * of a big heap takes a while), as long as the collector lives. */
	struct lp_beat beat = {0};
	for (;;) {
		uint32_t expect = LP_ASK_IDLE;
		if (__atomic_compare_exchange_n(&h->ask_state, &expect, LP_ASK_CLAIMED, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			break;
		struct timespec to = {.tv_nsec = 10 * 1000 * 1000};
		lp_futex(&h->ask_state, FUTEX_WAIT, expect, &to);
		if (__atomic_load_n(&h->ask_state, __ATOMIC_ACQUIRE) != LP_ASK_IDLE && lp_collector_lost(&beat))
			goto out;
	}
	h->ask_tid = t->tid;
	h->ask_kind = kind;
	h->ask_result = -1;
	size_t n = label ? strnlen(label, LP_ASK_LABEL_MAX - 1) : 0;
	if (n)
		memcpy(h->ask_label, label, n);
	h->ask_label[n] = 0;
	struct lp_ctx prog;
	h->ask_sp = h->ask_regs = 0;
	lp_enter(&t->busy); /* the unwind may refresh the modules, which allocates */
	if (lp_caller_ctx(t, &prog, fn) == 0) {
		h->ask_sp = prog.sp;
		h->ask_regs = (uint64_t)(uintptr_t)prog.regs;
	}
	lp_leave(&t->busy);
	if (lp_post(&h->ask_state, LP_ASK_REQUESTED, LP_ASK_IDLE, LP_ASK_WAIT_MS) != 0) {
		lp_ask_wake(h); /* withdrawn: nobody took it */
		goto out;
	}
	/* Taken: the scan may take long; do not wait for a dead collector. */
	lp_wait_collector(&h->ask_state, LP_ASK_TAKEN, -1);
	if (__atomic_load_n(&h->ask_state, __ATOMIC_ACQUIRE) == LP_ASK_DONE)
		result = __atomic_load_n(&h->ask_result, __ATOMIC_ACQUIRE);
	__asm__ volatile("" : : "r"(&prog) : "memory"); /* read by the scan until here */
	__atomic_store_n(&h->ask_state, LP_ASK_IDLE, __ATOMIC_RELEASE);
	lp_ask_wake(h);
out:
	errno = saved;
	return result;
}

LP_EXPORT int __leakpath_snapshot(const char *label)
{
	return lp_ask(LP_ASK_SNAPSHOT, label, (const void *)__leakpath_snapshot) < 0 ? -1 : 0;
}

LP_EXPORT int __leakpath_leak_check(void)
{
	int64_t r = lp_ask(LP_ASK_LEAK_CHECK, NULL, (const void *)__leakpath_leak_check);
	if (r == LP_ASK_UNRECORDED)
		return 0; /* as without leakpath */
	if (r < 0)
		return -1;
	if (r > INT_MAX)
		return INT_MAX;
	return (int)r;
}

/* The stale epochs ended so far (lp_header.stale_epochs), for a program
 * that paces itself by them, not by the clock; -1 when no epochs are
 * counted: not recorded, no --stale, no slot pool, or no collector. */
LP_EXPORT long __leakpath_stale_epoch(void)
{
	struct lp_header *h = lp_hdr;
	if (!h || !(h->flags & LP_HF_STALE) || !__atomic_load_n(&h->stale_base, __ATOMIC_ACQUIRE) ||
	    !lp_collector_alive())
		return -1;
	return (long)(__atomic_load_n(&h->stale_epochs, __ATOMIC_ACQUIRE) & LONG_MAX);
}

/* lp_ask_fns notes the functions the program asks through, for the scan
 * of its stack from where it called them (lp_caller_ctx). */
LP_HIDDEN void lp_ask_fns(void)
{
	lp_caller_fn((const void *)__leakpath_snapshot);
	lp_caller_fn((const void *)__leakpath_leak_check);
}
