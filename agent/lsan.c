/*
 * lsan.c - LeakSanitizer's interface for programs (sanitizer/lsan_interface.h
 * and the hooks it reads at exit), so that a program written for LSan gets
 * the same leak check under leakpath:
 *
 *   __lsan_ignore_object(p)              the block p points into is no leak
 *   __lsan_disable() / __lsan_enable()   what the calling thread allocates
 *                                        in between is no leak (they nest)
 *   __lsan_register_root_region(p, n)    [p, p+n) is scanned as a root
 *   __lsan_unregister_root_region(p, n)  ...no more
 *   __lsan_is_turned_off()               the program's: nonzero, no leak check
 *   __lsan_default_suppressions()        the program's: suppressions compiled in
 *
 * The agent defines the first five with default visibility: a program
 * that declares them weak (as code built for LSan or not does) finds them,
 * and dlsym does. Each writes a record; the collector applies it at the
 * exit scan. The last two the program defines; the agent looks for them
 * in the loaded modules' dynamic symbols (read in place, not by dlsym)
 * and, defined but not exported (an executable
 * built without -rdynamic), in the executable's static symbol table.
 */
#include "agent.h"
#include "dynsyms.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* lp_ignore_write writes that the block p points into is no leak. */
void lp_ignore_write(struct lp_thread *t, const void *p)
{
	uint64_t w[3] = {LP_HDR(LP_REC_IGNORE, 0, 3, 0), 0, (uint64_t)(uintptr_t)p};
	lp_put(t, w, 3);
}

LP_EXPORT void __lsan_ignore_object(const void *p)
{
	struct lp_thread *t = lp_rec_thread();
	if (!t || !p)
		return;
	if (lp_fold_on && !t->in_fold) {
		/* The collector must know the block first: a pending one of any
		 * thread at p, and what this thread keeps pending (p may point
		 * inside one of its blocks). */
		lp_enter(&t->in_fold);
		lp_fold_take(t, (void *)p);
		lp_leave(&t->in_fold);
		lp_fold_flush(t);
	}
	lp_ignore_write(t, p);
}

/* Counted whether or not the thread records, like scopes: disables and
 * enables pair up; an enable with none open does nothing (LSan would
 * abort the program). */
LP_EXPORT void __lsan_disable(void)
{
	lp_tls.ignoring++;
}

LP_EXPORT void __lsan_enable(void)
{
	struct lp_thread *t = &lp_tls;
	if (t->ignoring > 0)
		t->ignoring--;
}

static void lp_root_region(const void *p, size_t n, unsigned reg)
{
	struct lp_thread *t = lp_rec_thread();
	if (!t)
		return;
	uint64_t w[4] = {LP_HDR(LP_REC_ROOT_REGION, 0, 4, reg), 0, (uint64_t)(uintptr_t)p, (uint64_t)n};
	lp_put(t, w, 4);
}

LP_EXPORT void __lsan_register_root_region(const void *p, size_t n)
{
	lp_root_region(p, n, 1);
}

LP_EXPORT void __lsan_unregister_root_region(const void *p, size_t n)
{
	lp_root_region(p, n, 0);
}

/* ---- the program's hooks ---- */

struct lp_static_query {
	const struct lp_exe *m;
	const char *const *names;
	void **out;
	int n;
};

static void lp_static_one(void *arg, const char *sn, size_t room, uintptr_t value, size_t size)
{
	struct lp_static_query *q = arg;
	if (room < 8 || memcmp(sn, "__lsan_", 7) != 0)
		return;
	for (int j = 0; j < q->n; j++) {
		size_t len = strlen(q->names[j]);
		if (q->out[j] || room <= len || memcmp(sn, q->names[j], len + 1) != 0)
			continue;
		uintptr_t a = q->m->bias + value;
		if (lp_exe_code(q->m, a, size))
			q->out[j] = (void *)a;
	}
}

/*
 * lp_static_syms looks up the functions names[0, n) in the executable's
 * static symbol table (.symtab, read from /proc/self/exe: the very file
 * that runs), filling out[i] with each one's address, and leaves NULL
 * for those it does not find (exesyms.c reads the file); an address must
 * lie in the executable's code as mapped. Not under a seccomp filter the
 * program installed (it may kill for openat).
 */
static void lp_static_syms(const char *const *names, void **out, int n)
{
	if (__atomic_load_n(&lp_sandboxed, __ATOMIC_RELAXED) == LP_SANDBOX_LATER)
		return;
	struct lp_exe m;
	lp_exe_module(&m);
	if (!m.phdr)
		return;
	struct lp_static_query q = {&m, names, out, n};
	lp_exe_funcs(lp_static_one, &q);
}

/* ---- exported symbols, without dlsym ----
 *
 * dlsym would do, but it is a dynamic-loader call of the program's own
 * thread: glibc frees the message the program's last failed call left
 * for dlerror (the program's block, freed unrecorded behind its back)
 * and, failing, leaves one of its own. So the loaded modules' dynamic
 * symbol tables are read in place (dynsyms.c), in load order (the
 * executable first). */

struct lp_dyn_query {
	const char *const *names;
	void **out;
	int n;
};

static int lp_dyn_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct lp_dyn_query *q = arg;
	(void)size;
	struct lp_dynsyms d;
	if (lp_dynsyms_read(info, &d) != 0)
		return 0;
	int left = 0;
	for (int j = 0; j < q->n; j++) {
		if (!q->out[j])
			q->out[j] = lp_dynsym_func(&d, q->names[j], NULL);
		left |= !q->out[j];
	}
	return !left; /* all found: stop */
}

/* lp_dyn_syms fills out[i] with the first exported definition of
 * names[i], in load order, leaving NULL for those no module exports. */
static void lp_dyn_syms(const char *const *names, void **out, int n)
{
	struct lp_dyn_query q = {names, out, n};
	dl_iterate_phdr(lp_dyn_cb, &q);
}

static const char *const lp_hook_names[2] = {"__lsan_is_turned_off", "__lsan_default_suppressions"};
static void *lp_static_hooks[2]; /* in the executable's static symbols, as lp_hook_names */
static int lp_hooks_looked;

/* lp_lsan_prepare looks for the program's hooks in the executable's
 * static symbols, once a process image (~30-60 us): at the start, so that
 * fork children, which share the executable, find the answer made, and
 * before the program may install a seccomp filter (a file is opened).
 * Not when the agent is attached to a program that runs already: it may
 * be in a sandbox the agent did not see made. */
void lp_lsan_prepare(void)
{
	if (lp_hooks_looked)
		return;
	int saved = errno;
	lp_static_syms(lp_hook_names, lp_static_hooks, 2);
	lp_hooks_looked = 1;
	errno = saved;
}

/* lp_lsan_hooks calls the program's __lsan_is_turned_off and
 * __lsan_default_suppressions, at its exit, as LeakSanitizer does:
 * exported (by any module), or else in the executable's static symbols.
 * 1 when the first says no leak check; *supp the second's string, or
 * NULL. */
int lp_lsan_hooks(const char **supp)
{
	const char *const *names = lp_hook_names;
	int saved = errno;
	void *fns[2];
	int missing = 0;
	fns[0] = fns[1] = NULL;
	lp_dyn_syms(names, fns, 2);
	for (int i = 0; i < 2; i++)
		missing |= fns[i] == NULL;
	if (missing) {
		/* Looked for at the start, or not at all (attach mode). */
		for (int i = 0; i < 2; i++)
			if (!fns[i])
				fns[i] = lp_static_hooks[i];
	}
	int (*off)(void) = (int (*)(void))fns[0];
	const char *(*deflt)(void) = (const char *(*)(void))fns[1];
	int rc = off && off() != 0;
	*supp = deflt ? deflt() : NULL;
	errno = saved;
	return rc;
}
