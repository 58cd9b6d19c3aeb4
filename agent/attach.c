/*
 * attach.c - the agent loaded into a running process (`leakpath attach`).
 *
 * Preloaded, the agent's exported malloc & co preempt libc's by symbol
 * lookup order. Loaded later by dlopen (the injector makes the target call
 * it), every module's calls are already bound: the agent instead rewrites
 * the GOT slots (PLT jump slots and GLOB_DAT entries) that name a hooked
 * function and hold the process's own definition of it (or are not bound
 * yet) in every loaded module but itself, and restores them at detach.
 * The injector calls leakpath_agent_attach and leakpath_agent_detach with
 * every other thread of the target stopped (unless the call outlasts its
 * patience): a slot is one aligned store, so a thread that runs meanwhile
 * calls the old function or the hook, both on the same allocator.
 *
 * Blocks allocated before the attach reach the hooks' free and realloc
 * like any other: the real allocator owns them all, the collector's model
 * knows that the image started by attach.
 */
#include "agent.h"
#include "dynsyms.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

/* agent.c */
LP_HIDDEN int lp_attach_begin(const char *sock);
LP_HIDDEN void lp_attach_end(void);

/* The functions whose slots are redirected: every interposed one but
 * dlopen, which is lp_dlopen below. */
extern void *memalign(size_t, size_t), *pvalloc(size_t);

static void *lp_dlopen(const char *file, int mode);

struct lp_hook {
	const char *name;
	void *fn;
};

/* The agent is linked with -Bsymbolic-functions: these addresses are its
 * own definitions even when the global scope has libc's first. */
static struct lp_hook lp_hooks[] = {
	{"malloc", (void *)malloc}, {"calloc", (void *)calloc}, {"realloc", (void *)realloc},
	{"free", (void *)free}, {"reallocarray", (void *)reallocarray}, {"memalign", (void *)memalign},
	{"posix_memalign", (void *)posix_memalign}, {"aligned_alloc", (void *)aligned_alloc},
	{"valloc", (void *)valloc}, {"pvalloc", (void *)pvalloc},
	{"_Znwm", (void *)_Znwm}, {"_Znam", (void *)_Znam},
	{"_ZnwmSt11align_val_t", (void *)_ZnwmSt11align_val_t},
	{"_ZnamSt11align_val_t", (void *)_ZnamSt11align_val_t},
	{"_ZdlPv", (void *)_ZdlPv}, {"_ZdaPv", (void *)_ZdaPv}, {"_ZdlPvm", (void *)_ZdlPvm},
	{"_ZdaPvm", (void *)_ZdaPvm}, {"_ZdlPvRKSt9nothrow_t", (void *)_ZdlPvRKSt9nothrow_t},
	{"_ZdaPvRKSt9nothrow_t", (void *)_ZdaPvRKSt9nothrow_t},
	{"_ZdlPvSt11align_val_t", (void *)_ZdlPvSt11align_val_t},
	{"_ZdaPvSt11align_val_t", (void *)_ZdaPvSt11align_val_t},
	{"_ZdlPvmSt11align_val_t", (void *)_ZdlPvmSt11align_val_t},
	{"_ZdaPvmSt11align_val_t", (void *)_ZdaPvmSt11align_val_t},
	{"_ZdlPvSt11align_val_tRKSt9nothrow_t", (void *)_ZdlPvSt11align_val_tRKSt9nothrow_t},
	{"_ZdaPvSt11align_val_tRKSt9nothrow_t", (void *)_ZdaPvSt11align_val_tRKSt9nothrow_t},
	{"_exit", (void *)_exit}, {"_Exit", (void *)_Exit},
	{"pthread_setname_np", (void *)pthread_setname_np}, {"fork", (void *)fork},
	{"prctl", (void *)prctl}, {"syscall", (void *)syscall}, /* a seccomp filter installed later */
	{"dlclose", (void *)dlclose}, {"dlopen", (void *)lp_dlopen},
};
#define LP_NHOOKS (sizeof lp_hooks / sizeof lp_hooks[0])

/* lp_patch is one rewritten slot and what it held. */
struct lp_patch {
	void **slot;
	void *old;
	void *hook;
};

static struct lp_patch *lp_patches;
static size_t lp_npatches, lp_cap_patches;
static int lp_patching;          /* slots are redirected now */
static void *(*real_dlopen)(const char *, int);
static char lp_why[256];         /* why the last attach was refused */

/* The agent's own module is never patched nor searched (lp_dynsyms_read). */

/* ---- the process's own definitions ----
 *
 * The real function behind a hook is the definition the process's own
 * bindings use: the first module, in load order (the global scope's order
 * for those loaded at start), that defines the name, the agent excluded.
 * Not dlsym(RTLD_DEFAULT): a non-PIE executable that takes a function's
 * address (python3 does for malloc and free) exports an undefined symbol
 * with a value, its PLT entry (a canonical PLT entry), which dlsym returns;
 * that entry jumps through the executable's GOT slot, which attach
 * redirects to the hook: the hook would call itself for ever. The modules'
 * own symbol tables are read instead (dynsyms.c).
 */

/* lp_def is one name looked up: its definition (NULL: none) and, when the
 * executable has a canonical PLT entry for it, that entry's address. */
struct lp_def {
	const char *name;
	void *def;
	void *canon;
};

struct lp_defs_q {
	struct lp_def *q;
	size_t n;
	int first; /* the next module is the first one: the executable */
};

static int lp_defs_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_defs_q *q = arg;
	int exe = q->first;
	q->first = 0;
	struct lp_dynsyms d;
	if (lp_dynsyms_read(info, &d) != 0)
		return 0;
	for (size_t i = 0; i < q->n; i++) {
		struct lp_def *e = &q->q[i];
		if (e->def)
			continue;
		const ElfW(Sym) *s = lp_dynsym(&d, e->name);
		if (!s || s->st_value == 0)
			continue;
		if (s->st_shndx == SHN_UNDEF) {
			if (exe && ELF64_ST_TYPE(s->st_info) == STT_FUNC)
				e->canon = (void *)(info->dlpi_addr + s->st_value);
			continue;
		}
		unsigned bind = ELF64_ST_BIND(s->st_info), type = ELF64_ST_TYPE(s->st_info);
		if (bind != STB_GLOBAL && bind != STB_WEAK)
			continue;
		if (type == STT_FUNC)
			e->def = (void *)(info->dlpi_addr + s->st_value);
		else if (type == STT_GNU_IFUNC) /* as the loader does on x86-64 */
			e->def = ((void *(*)(void))(info->dlpi_addr + s->st_value))();
	}
	return 0;
}

/* lp_defs looks every name of q up in one pass over the modules. */
static void lp_defs(struct lp_def *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		q[i].def = q[i].canon = NULL;
	struct lp_defs_q dq = {q, n, 1};
	dl_iterate_phdr(lp_defs_cb, &dq);
}

/* The hooks' names and the other functions the agent calls through, looked
 * up at each attach and each refresh, with the process at a safe point. */
static const char *const lp_extra_names[] = {"_ZSt15get_new_handlerv", "_ZSt17__throw_bad_allocv"};
#define LP_NEXTRA (sizeof lp_extra_names / sizeof lp_extra_names[0])
static struct lp_def lp_known[LP_NHOOKS + LP_NEXTRA];

/* lp_defs_refresh looks the names up again: computed aside, then each
 * entry stored whole, so that a hook reading one meanwhile (a dlopen in
 * another thread refreshes too) never sees it emptied. */
static void lp_defs_refresh(void)
{
	struct lp_def q[LP_NHOOKS + LP_NEXTRA];
	for (size_t i = 0; i < LP_NHOOKS; i++)
		q[i].name = lp_hooks[i].name;
	for (size_t i = 0; i < LP_NEXTRA; i++)
		q[LP_NHOOKS + i].name = lp_extra_names[i];
	lp_defs(q, LP_NHOOKS + LP_NEXTRA);
	for (size_t i = 0; i < LP_NHOOKS + LP_NEXTRA; i++) {
		__atomic_store_n(&lp_known[i].name, q[i].name, __ATOMIC_RELAXED);
		__atomic_store_n(&lp_known[i].canon, q[i].canon, __ATOMIC_RELAXED);
		if (q[i].def) /* a definition does not go away while the agent runs */
			__atomic_store_n(&lp_known[i].def, q[i].def, __ATOMIC_RELEASE);
	}
}

/* lp_attach_real is the process's own definition of name (see above),
 * NULL if none. */
LP_HIDDEN void *lp_attach_real(const char *name)
{
	for (size_t i = 0; i < LP_NHOOKS + LP_NEXTRA; i++) {
		const char *n = __atomic_load_n(&lp_known[i].name, __ATOMIC_RELAXED);
		void *def = __atomic_load_n(&lp_known[i].def, __ATOMIC_ACQUIRE);
		if (n && def && strcmp(n, name) == 0)
			return def;
	}
	struct lp_def q = {name, NULL, NULL};
	lp_defs(&q, 1);
	return q.def;
}

static const struct lp_hook *lp_hook_of(const char *name)
{
	for (size_t i = 0; i < LP_NHOOKS; i++)
		if (strcmp(lp_hooks[i].name, name) == 0)
			return &lp_hooks[i];
	return NULL;
}

static int lp_note_patch(void **slot, void *old, void *hook)
{
	for (size_t i = 0; i < lp_npatches; i++)
		if (lp_patches[i].slot == slot)
			return 0; /* patched already (a module seen again) */
	if (lp_npatches == lp_cap_patches) {
		size_t cap = lp_cap_patches ? lp_cap_patches * 2 : 256;
		struct lp_patch *n = lp_mmap(cap * sizeof *n);
		if (!n)
			return -1;
		if (lp_patches) {
			memcpy(n, lp_patches, lp_npatches * sizeof *n);
			lp_munmap(lp_patches, lp_cap_patches * sizeof *n);
		}
		lp_patches = n;
		lp_cap_patches = cap;
	}
	lp_patches[lp_npatches++] = (struct lp_patch){slot, old, hook};
	return 1;
}

/* lp_store writes v into slot, lifting a read-only (RELRO) page's
 * protection for the write. */
static void lp_store(void **slot, void *v, int relro)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(pg - 1);
	if (relro && mprotect((void *)page, (size_t)pg, PROT_READ | PROT_WRITE) != 0)
		return;
	__atomic_store_n(slot, v, __ATOMIC_RELEASE);
	if (relro)
		mprotect((void *)page, (size_t)pg, PROT_READ);
}

/* lp_slots_q is one pass over every module's slots: counting those the
 * attach would redirect (patch 0), or redirecting them. */
struct lp_slots_q {
	int patch;
	unsigned can[LP_NHOOKS]; /* slots redirected, or that would be */
	unsigned foreign;        /* slots bound to another definition: left alone */
};

/* lp_slot_ours says whether a slot holding old may be redirected to hook
 * k: it holds the process's definition, or it is not bound yet (a lazy
 * slot points back into its own module's PLT). A slot bound to another
 * definition (a module bound to itself or to another allocator by
 * -Bsymbolic or RTLD_DEEPBIND) keeps it: the hook would hand its blocks
 * to an allocator that did not make them. A slot holding the executable's
 * canonical PLT entry is left too: that entry jumps through the
 * executable's own slot, which is redirected. */
static int lp_slot_ours(size_t k, void *old, const struct lp_dynsyms *d, uintptr_t bias, uintptr_t lo,
			uintptr_t hi)
{
	const struct lp_def *e = &lp_known[k];
	if (!old || !e->def || old == e->canon)
		return 0;
	if (old == e->def)
		return 1;
	if ((uintptr_t)old < lo || (uintptr_t)old >= hi)
		return 0;
	const ElfW(Sym) *own = lp_dynsym(d, lp_hooks[k].name);
	return !(own && own->st_shndx != SHN_UNDEF && (void *)(bias + own->st_value) == old);
}

static void lp_patch_relocs(struct lp_slots_q *q, uintptr_t bias, const ElfW(Rela) *r, size_t bytes,
			    const struct lp_dynsyms *d, uintptr_t lo, uintptr_t hi, uintptr_t relro_lo,
			    uintptr_t relro_hi)
{
	for (size_t i = 0; i < bytes / sizeof *r; i++) {
		unsigned type = ELF64_R_TYPE(r[i].r_info);
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		size_t si = ELF64_R_SYM(r[i].r_info);
		if (si == 0 || d->sym[si].st_name >= d->strsz)
			continue;
		const struct lp_hook *h = lp_hook_of(d->str + d->sym[si].st_name);
		if (!h)
			continue;
		size_t k = (size_t)(h - lp_hooks);
		void **slot = (void **)(bias + r[i].r_offset);
		void *old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (old == h->fn) {
			q->can[k]++; /* redirected already */
			continue;
		}
		if (!lp_slot_ours(k, old, d, bias, lo, hi)) {
			if (old && old != lp_known[k].canon)
				q->foreign++;
			continue;
		}
		q->can[k]++;
		if (!q->patch || lp_note_patch(slot, old, h->fn) != 1)
			continue;
		lp_store(slot, h->fn, (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi);
	}
}

static int lp_patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_slots_q *q = arg;
	uintptr_t bias = info->dlpi_addr;
	uintptr_t relro_lo = 0, relro_hi = 0, lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD) {
			if (bias + ph->p_vaddr < lo)
				lo = bias + ph->p_vaddr;
			if (bias + ph->p_vaddr + ph->p_memsz > hi)
				hi = bias + ph->p_vaddr + ph->p_memsz;
		} else if (ph->p_type == PT_GNU_RELRO) {
			relro_lo = bias + ph->p_vaddr;
			relro_hi = relro_lo + ph->p_memsz;
		}
	}
	struct lp_dynsyms d;
	if (lp_dynsyms_read(info, &d) != 0)
		return 0;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	size_t jmpsz = 0, relasz = 0;
	for (const ElfW(Dyn) *e = d.dyn; e->d_tag != DT_NULL; e++) {
		switch (e->d_tag) {
		case DT_JMPREL: jmprel = (const ElfW(Rela) *)lp_dyn_ptr(&d, e->d_un.d_ptr); break;
		case DT_PLTRELSZ: jmpsz = e->d_un.d_val; break;
		case DT_RELA: rela = (const ElfW(Rela) *)lp_dyn_ptr(&d, e->d_un.d_ptr); break;
		case DT_RELASZ: relasz = e->d_un.d_val; break;
		}
	}
	if (jmprel)
		lp_patch_relocs(q, bias, jmprel, jmpsz, &d, lo, hi, relro_lo, relro_hi);
	if (rela)
		lp_patch_relocs(q, bias, rela, relasz, &d, lo, hi, relro_lo, relro_hi);
	return 0;
}

/* lp_attach_patch redirects the slots of every module loaded now (those
 * redirected already are left as they are). */
LP_HIDDEN void lp_attach_patch(void)
{
	if (!__atomic_load_n(&lp_patching, __ATOMIC_ACQUIRE))
		return;
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	lp_defs_refresh(); /* a module loaded since may define a hooked name first */
	struct lp_slots_q q = {.patch = 1};
	dl_iterate_phdr(lp_patch_cb, &q);
	lp_leave(&t->busy);
}

/* lp_hook_index is the index of name in lp_hooks. */
static size_t lp_hook_index(const char *name)
{
	return (size_t)(lp_hook_of(name) - lp_hooks);
}

/* lp_attach_check says whether an attach can work, before anything is
 * written: the allocator's functions are found, and malloc and free have
 * slots to redirect. Else lp_why says why. */
static int lp_attach_check(void)
{
	static const char *const need[] = {"malloc", "free", "calloc", "realloc", "memalign",
					   "posix_memalign", "aligned_alloc", "valloc", "pvalloc"};
	for (size_t i = 0; i < sizeof need / sizeof need[0]; i++) {
		const struct lp_def *e = &lp_known[lp_hook_index(need[i])];
		if (!e->def) {
			snprintf(lp_why, sizeof lp_why, "no module of the process defines %s", need[i]);
			return -1;
		}
	}
	struct lp_slots_q q = {.patch = 0};
	dl_iterate_phdr(lp_patch_cb, &q);
	static const char *const slots[] = {"malloc", "free"};
	for (size_t i = 0; i < 2; i++)
		if (q.can[lp_hook_index(slots[i])] == 0) {
			snprintf(lp_why, sizeof lp_why,
				 "no GOT slot of any module calls %s through the dynamic linker "
				 "(its calls are bound in place, or to another allocator): nothing to redirect",
				 slots[i]);
			return -1;
		}
	return 0;
}

/* lp_relro_of says whether slot lies in a module's RELRO range. */
struct lp_relro_q {
	uintptr_t addr;
	int in;
};

static int lp_relro_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_relro_q *q = arg;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_GNU_RELRO && q->addr >= lo && q->addr < lo + ph->p_memsz) {
			q->in = 1;
			return 1;
		}
	}
	return 0;
}

/* lp_dlopen is dlopen for modules bound before the attach: the new module
 * and its dependencies get their slots redirected before their code runs
 * further. dlopen looks the file up on behalf of its caller (its RUNPATH,
 * $ORIGIN): when that can matter (lp_dlopen_as_caller), the call goes to
 * the real dlopen as a tail call, the caller's return address intact, and
 * the new modules are redirected at the next attach-mode refresh instead. */

/* lp_dlopen_as_caller reports whether dlopen of file may find another
 * module when called from the agent than from caller: a name with $
 * ($ORIGIN), or a bare name that the caller's RPATH or RUNPATH may
 * resolve (an executable's RPATH applies to any caller, the agent too,
 * but not its RUNPATH, which ld's --enable-new-dtags writes). */
int lp_dlopen_as_caller(const char *file, const void *caller)
{
	if (!file)
		return 1;
	if (strchr(file, '$'))
		return 1;
	if (strchr(file, '/'))
		return 0;
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return 1;
	int exe = lm->l_name == NULL || lm->l_name[0] == 0;
	for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_RUNPATH || (d->d_tag == DT_RPATH && !exe))
			return 1;
	return 0;
}

__attribute__((noinline)) static void *lp_dlopen_as_agent(const char *file, int mode)
{
	void *h = real_dlopen(file, mode);
	int saved = errno;
	lp_attach_patch();
	errno = saved;
	return h;
}

static void *lp_dlopen(const char *file, int mode)
{
	if (!real_dlopen)
		return NULL;
	if (file && lp_dlopen_as_caller(file, __builtin_return_address(0)))
		return real_dlopen(file, mode); /* a tail call at -O2 */
	return lp_dlopen_as_agent(file, mode);
}

/* leakpath_agent_attach starts recording in a process the agent was
 * dlopen'ed into: checks that the attach can work, registers with the
 * collector listening on sock, then redirects the allocator slots of every
 * module. 0: recording; -1: not, and nothing was redirected
 * (leakpath_agent_why says why). Called by the injector with every thread
 * stopped, again after a detach for a new attach. */
LP_EXPORT int leakpath_agent_attach(const char *sock)
{
	int saved = errno;
	lp_why[0] = 0;
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	lp_defs_refresh();
	int rc = lp_attach_check();
	lp_leave(&t->busy);
	if (rc == 0) {
		if (!real_dlopen)
			real_dlopen = (void *(*)(const char *, int))lp_known[lp_hook_index("dlopen")].def;
		rc = lp_attach_begin(sock);
		if (rc != 0)
			snprintf(lp_why, sizeof lp_why, "the agent could not register with the collector (%s)", sock);
	}
	if (rc == 0) {
		__atomic_store_n(&lp_patching, 1, __ATOMIC_RELEASE);
		lp_attach_patch();
	}
	errno = saved;
	return rc;
}

/* leakpath_agent_why says why the last leakpath_agent_attach failed. */
LP_EXPORT const char *leakpath_agent_why(void)
{
	return lp_why;
}

/* leakpath_agent_detach stops recording: every redirected slot gets back
 * what it held (unless something rewrote it since), the calling thread's
 * folded counts are written out, and no record is written any more. The
 * shared region stays mapped: a thread stopped inside a hook finishes its
 * record there harmlessly. Returns the number of slots restored. */
LP_EXPORT int leakpath_agent_detach(void)
{
	int saved = errno;
	__atomic_store_n(&lp_patching, 0, __ATOMIC_RELEASE);
	int n = 0;
	for (size_t i = 0; i < lp_npatches; i++) {
		struct lp_patch *p = &lp_patches[i];
		if (__atomic_load_n(p->slot, __ATOMIC_ACQUIRE) != p->hook)
			continue;
		struct lp_relro_q q = {(uintptr_t)p->slot, 0};
		dl_iterate_phdr(lp_relro_cb, &q);
		lp_store(p->slot, p->old, q.in);
		n++;
	}
	lp_npatches = 0;
	lp_attach_end();
	errno = saved;
	return n;
}
