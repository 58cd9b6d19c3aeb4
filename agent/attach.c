/*
 * attach.c - the agent loaded into a running process (`leakpath attach`).
 *
 * Preloaded, the agent's exported malloc & co preempt libc's by symbol
 * lookup order. Loaded later by dlopen (the injector makes the target call
 * it), every module's calls are already bound to libc: the agent instead
 * rewrites the GOT slots (PLT jump slots and GLOB_DAT entries) that name an
 * allocator function in every loaded module but itself, and restores them
 * at detach. The injector calls leakpath_agent_attach and
 * leakpath_agent_detach with every thread of the target stopped, so no
 * thread races a slot being written (a lazy binding in progress included).
 *
 * Blocks allocated before the attach reach the hooks' free and realloc
 * like any other: the real allocator owns them all, the collector's model
 * knows that the image started by attach.
 */
#include "agent.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
static uintptr_t lp_self_base;   /* the agent's own load address: not patched */

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

/* lp_ptr turns a d_ptr of the dynamic section into an address: glibc
 * relocates most in place, not those of a read-only dynamic section. */
static uintptr_t lp_ptr(uintptr_t bias, uintptr_t v)
{
	return v < bias ? bias + v : v;
}

static void lp_patch_relocs(uintptr_t bias, const ElfW(Rela) *r, size_t bytes, const ElfW(Sym) *sym,
			    const char *str, uintptr_t relro_lo, uintptr_t relro_hi)
{
	for (size_t i = 0; i < bytes / sizeof *r; i++) {
		unsigned type = ELF64_R_TYPE(r[i].r_info);
		if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
			continue;
		size_t si = ELF64_R_SYM(r[i].r_info);
		if (si == 0)
			continue;
		const struct lp_hook *h = lp_hook_of(str + sym[si].st_name);
		if (!h)
			continue;
		void **slot = (void **)(bias + r[i].r_offset);
		void *old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
		if (old == h->fn)
			continue;
		if (lp_note_patch(slot, old, h->fn) != 1)
			continue;
		lp_store(slot, h->fn, (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi);
	}
}

static int lp_patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	uintptr_t bias = info->dlpi_addr;
	if (bias == lp_self_base)
		return 0;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t relro_lo = 0, relro_hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(bias + ph->p_vaddr);
		else if (ph->p_type == PT_GNU_RELRO) {
			relro_lo = bias + ph->p_vaddr;
			relro_hi = relro_lo + ph->p_memsz;
		}
	}
	if (!dyn || (info->dlpi_name && strstr(info->dlpi_name, "linux-vdso")))
		return 0;
	const ElfW(Sym) *sym = NULL;
	const char *str = NULL;
	const ElfW(Rela) *jmprel = NULL, *rela = NULL;
	size_t jmpsz = 0, relasz = 0;
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB: sym = (const ElfW(Sym) *)lp_ptr(bias, d->d_un.d_ptr); break;
		case DT_STRTAB: str = (const char *)lp_ptr(bias, d->d_un.d_ptr); break;
		case DT_JMPREL: jmprel = (const ElfW(Rela) *)lp_ptr(bias, d->d_un.d_ptr); break;
		case DT_PLTRELSZ: jmpsz = d->d_un.d_val; break;
		case DT_RELA: rela = (const ElfW(Rela) *)lp_ptr(bias, d->d_un.d_ptr); break;
		case DT_RELASZ: relasz = d->d_un.d_val; break;
		}
	}
	if (!sym || !str)
		return 0;
	if (jmprel)
		lp_patch_relocs(bias, jmprel, jmpsz, sym, str, relro_lo, relro_hi);
	if (rela)
		lp_patch_relocs(bias, rela, relasz, sym, str, relro_lo, relro_hi);
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
	dl_iterate_phdr(lp_patch_cb, NULL);
	lp_leave(&t->busy);
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
 * $ORIGIN): when that can matter, the call goes to the real dlopen as a
 * tail call, the caller's return address intact, and the new modules are
 * redirected at the next attach-mode refresh instead. */
static int lp_caller_paths(const void *caller)
{
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return 1;
	if (lm->l_name == NULL || lm->l_name[0] == 0)
		return 0; /* the executable: its RPATH applies to any caller */
	for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_RPATH || d->d_tag == DT_RUNPATH)
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
	if (file && (strchr(file, '$') || (!strchr(file, '/') && lp_caller_paths(__builtin_return_address(0)))))
		return real_dlopen(file, mode); /* a tail call at -O2 */
	return lp_dlopen_as_agent(file, mode);
}

/* leakpath_agent_attach starts recording in a process the agent was
 * dlopen'ed into: registers with the collector listening on sock, then
 * redirects the allocator slots of every module. 0: recording; -1: not
 * (the process is left as it was). Called by the injector, again after a
 * detach for a new attach. */
LP_EXPORT int leakpath_agent_attach(const char *sock)
{
	int saved = errno;
	Dl_info self;
	if (!lp_self_base && dladdr((void *)lp_patch_cb, &self))
		lp_self_base = (uintptr_t)self.dli_fbase;
	if (!real_dlopen)
		real_dlopen = (void *(*)(const char *, int))dlsym(RTLD_DEFAULT, "dlopen");
	int rc = lp_attach_begin(sock);
	if (rc == 0) {
		__atomic_store_n(&lp_patching, 1, __ATOMIC_RELEASE);
		lp_attach_patch();
	}
	errno = saved;
	return rc;
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
