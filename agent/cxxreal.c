/*
 * cxxreal.c - the C++ runtime behind the agent's operator new and delete
 * hooks and __cxa_allocate_exception when the global scope has none.
 *
 * A C program dlopens a C++ plugin RTLD_LOCAL: its runtime (libstdc++, or
 * libc++ and libc++abi) comes as the plugin's dependency, outside the
 * global scope, but the plugin's calls to operator new still bind to the
 * agent's first (the global scope is searched before the plugin's own),
 * where dlsym(RTLD_NEXT) finds no definition. The dynamic linker, without
 * the agent, binds those calls in the plugin's scope: the plugin, then
 * its dependencies breadth first. The agent looks the name up the same
 * way from the caller's module, in the modules' own symbol tables
 * (dynsyms.c: no dlsym, whose failures leave the program an error for
 * dlerror, no malloc), and keeps the answer per caller module.
 *
 * Those lookups run inside dl_iterate_phdr: the loader keeps every module
 * it reports mapped until it returns (a dlclose in another thread waits).
 */
#include "agent.h"
#include "cxxreal.h"
#include "dynsyms.h"

#include <link.h>
#include <string.h>

#define LP_CXX_NAME(n) #n,
const char *const lp_cxx_names[LP_CXX_N] = {LP_CXX_NAMES(LP_CXX_NAME)};
#undef LP_CXX_NAME

/* ---- the global scope ---- */

static int lp_cxx_start_n; /* modules loaded with the program (0: not counted) */
static uintptr_t lp_agent_lo, lp_agent_hi; /* the agent's own module */

static int lp_is_agent(const struct dl_phdr_info *info);
static void lp_cxx_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi);

static int lp_cxx_count_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(*(int *)arg)++;
	if (!lp_agent_hi && lp_is_agent(info))
		lp_cxx_span(info, &lp_agent_lo, &lp_agent_hi);
	return 0;
}

/* The modules loaded with the program come first in dl_iterate_phdr's
 * order (later dlopens are appended): counted before main, while only
 * they are loaded. */
__attribute__((constructor(102))) static void lp_cxx_count_start(void)
{
	int n = 0;
	dl_iterate_phdr(lp_cxx_count_cb, &n);
	__atomic_store_n(&lp_cxx_start_n, n, __ATOMIC_RELEASE);
}

/* lp_cxx_span is the range module info's segments span. */
static void lp_cxx_span(const struct dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi)
{
	*lo = UINTPTR_MAX;
	*hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < *lo)
			*lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > *hi)
			*hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	if (*hi == 0)
		*lo = 0;
}

static int lp_is_agent(const struct dl_phdr_info *info)
{
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return (const void *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr) == (const void *)_DYNAMIC;
	return 0;
}

/* lp_cxx_def is name's definition in d as the loader binds it, or NULL. */
static void *lp_cxx_def(const struct lp_dynsyms *d, const char *name)
{
	const ElfW(Sym) *s = lp_dynsym(d, name);
	if (!s || s->st_shndx == SHN_UNDEF || s->st_value == 0)
		return NULL;
	unsigned bind = ELF64_ST_BIND(s->st_info), type = ELF64_ST_TYPE(s->st_info);
	if (bind != STB_GLOBAL && bind != STB_WEAK)
		return NULL;
	if (type == STT_FUNC)
		return (void *)(d->bias + s->st_value);
	if (type == STT_GNU_IFUNC) /* as the loader does on x86-64 */
		return ((void *(*)(void))(d->bias + s->st_value))();
	return NULL;
}

struct lp_cxx_global_q {
	const char *name;
	int left;  /* modules loaded with the program not looked at yet */
	int after; /* past the agent's module */
	int found;
};

static int lp_cxx_global_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_cxx_global_q *q = arg;
	if (q->left-- <= 0)
		return 1;
	if (lp_is_agent(info)) {
		q->after = 1;
		return 0;
	}
	struct lp_dynsyms d;
	if (q->after && lp_dynsyms_read(info, &d) == 0 && lp_cxx_def(&d, q->name)) {
		q->found = 1;
		return 1;
	}
	return 0;
}

int lp_cxx_global(enum lp_cxx_name k)
{
	static int known[LP_CXX_N]; /* 1: defined there, 2: not */
	int v = __atomic_load_n(&known[k], __ATOMIC_ACQUIRE);
	if (LP_LIKELY(v))
		return v == 1;
	int n = __atomic_load_n(&lp_cxx_start_n, __ATOMIC_ACQUIRE);
	if (!n) /* called by a constructor before the agent's: still at the start */
		dl_iterate_phdr(lp_cxx_count_cb, &n);
	struct lp_cxx_global_q q = {lp_cxx_names[k], n, 0, 0};
	dl_iterate_phdr(lp_cxx_global_cb, &q);
	__atomic_store_n(&known[k], q.found ? 1 : 2, __ATOMIC_RELEASE);
	return q.found;
}

/* ---- a caller's scope ---- */

/* One loaded module, as the lookup sees it. */
struct lp_cxx_mod {
	struct lp_dynsyms d;
	int ok;    /* d was read (not the agent, not the vDSO) */
	int agent; /* the agent's own */
	uintptr_t lo, hi;
	const char *name, *soname;
};

/* The answers for one caller module, found together: a seqlock (seq odd
 * while written) lets the hooks read them without a lock. */
struct lp_cxx_ent {
	unsigned seq;
	uintptr_t lo, hi; /* hi 0: free */
	void *fn[LP_CXX_N];
	unsigned rt; /* bit k: fn[k] is a C++ runtime's */
};

#define LP_CXX_CACHE 64  /* caller modules remembered (more are looked up each call) */
#define LP_CXX_SCOPE 64  /* a scope's modules looked at, at most */
#define LP_CXX_MODS 4096 /* loaded modules looked at, at most */

static struct lp_cxx_ent lp_cxx_cache[LP_CXX_CACHE];

struct lp_cxx_snap {
	struct lp_cxx_mod *m;
	int n, cap;
	uintptr_t pc;
	void *fn[LP_CXX_N];
	unsigned rt;
};

static int lp_cxx_fill_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_cxx_snap *s = arg;
	if (s->n >= s->cap)
		return 1;
	struct lp_cxx_mod *m = &s->m[s->n++];
	memset(m, 0, sizeof *m);
	m->name = info->dlpi_name ? info->dlpi_name : "";
	lp_cxx_span(info, &m->lo, &m->hi);
	m->agent = lp_is_agent(info);
	m->ok = lp_dynsyms_read(info, &m->d) == 0;
	for (int i = 0; m->ok && i < 4096 && m->d.dyn[i].d_tag != DT_NULL; i++)
		if (m->d.dyn[i].d_tag == DT_SONAME && m->d.dyn[i].d_un.d_val < m->d.strsz)
			m->soname = m->d.str + m->d.dyn[i].d_un.d_val;
	return 0;
}

/* lp_cxx_needs reports whether module m is the one a DT_NEEDED of want
 * names: by its soname, or by its file's name (a path, if want has one). */
static int lp_cxx_needs(const char *want, const struct lp_cxx_mod *m)
{
	if (strchr(want, '/'))
		return strcmp(want, m->name) == 0;
	if (m->soname && strcmp(want, m->soname) == 0)
		return 1;
	const char *base = strrchr(m->name, '/');
	return strcmp(want, base ? base + 1 : m->name) == 0;
}

int lp_cxx_runtime_file(const char *path)
{
	static const char *const libs[] = {"libstdc++.so", "libc++.so", "libc++abi.so"};
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	for (unsigned i = 0; i < sizeof libs / sizeof libs[0]; i++)
		if (strncmp(base, libs[i], strlen(libs[i])) == 0)
			return 1;
	return 0;
}

/* lp_cxx_scope lists the caller module c and its dependencies breadth
 * first, as the loader orders a dlopen'ed module's own scope. */
static int lp_cxx_scope(const struct lp_cxx_snap *s, int c, int *scope)
{
	int n = 0;
	scope[n++] = c;
	for (int j = 0; j < n; j++) {
		const struct lp_cxx_mod *m = &s->m[scope[j]];
		if (!m->ok)
			continue;
		for (int i = 0; i < 4096 && m->d.dyn[i].d_tag != DT_NULL && n < LP_CXX_SCOPE; i++) {
			if (m->d.dyn[i].d_tag != DT_NEEDED || m->d.dyn[i].d_un.d_val >= m->d.strsz)
				continue;
			const char *want = m->d.str + m->d.dyn[i].d_un.d_val;
			for (int x = 0; x < s->n; x++) {
				if (!lp_cxx_needs(want, &s->m[x]))
					continue;
				int seen = 0;
				for (int y = 0; y < n && !seen; y++)
					seen = scope[y] == x;
				if (!seen)
					scope[n++] = x;
				break;
			}
		}
	}
	return n;
}

/* lp_cxx_resolve_cb runs once, for the first module: the others are
 * listed by a nested dl_iterate_phdr, and every lookup made, while the
 * loader holds them all. */
static int lp_cxx_resolve_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)info;
	(void)size;
	struct lp_cxx_snap *s = arg;
	int count = 0;
	dl_iterate_phdr(lp_cxx_count_cb, &count);
	s->cap = count < LP_CXX_MODS ? count : LP_CXX_MODS;
	size_t bytes = (size_t)s->cap * sizeof *s->m;
	s->m = s->cap ? lp_mmap(bytes) : NULL;
	if (!s->m)
		return 1;
	dl_iterate_phdr(lp_cxx_fill_cb, s);
	int c = -1;
	for (int i = 0; i < s->n && c < 0; i++)
		if (s->m[i].hi && s->pc - s->m[i].lo < s->m[i].hi - s->m[i].lo)
			c = i;
	if (c >= 0 && s->m[c].agent) /* no outside caller known yet */
		c = -1;
	int scope[LP_CXX_SCOPE], ns = c >= 0 ? lp_cxx_scope(s, c, scope) : 0;
	for (int k = 0; k < LP_CXX_N; k++) {
		int at = -1;
		for (int j = 0; j < ns && !s->fn[k]; j++)
			if (s->m[scope[j]].ok && (s->fn[k] = lp_cxx_def(&s->m[scope[j]].d, lp_cxx_names[k])))
				at = scope[j];
		/* Else the first module loaded that defines it. */
		for (int j = 0; j < s->n && !s->fn[k]; j++)
			if (s->m[j].ok && (s->fn[k] = lp_cxx_def(&s->m[j].d, lp_cxx_names[k])))
				at = j;
		if (at >= 0 && lp_cxx_runtime_file(s->m[at].name))
			s->rt |= 1u << k;
	}
	if (c >= 0) {
		s->n = 1; /* the caller's range, for the cache */
		s->m[0].lo = s->m[c].lo;
		s->m[0].hi = s->m[c].hi;
	} else {
		s->n = 0;
	}
	return 1;
}

/* lp_cxx_keep remembers fn for the module [lo, hi), in a free entry if
 * any. */
static void lp_cxx_keep(uintptr_t lo, uintptr_t hi, void *const *fn, unsigned rt)
{
	for (int i = 0; i < LP_CXX_CACHE; i++) {
		struct lp_cxx_ent *e = &lp_cxx_cache[i];
		unsigned s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
		if ((s & 1) || __atomic_load_n(&e->hi, __ATOMIC_RELAXED) != 0 ||
		    !__atomic_compare_exchange_n(&e->seq, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		if (__atomic_load_n(&e->hi, __ATOMIC_RELAXED) != 0) { /* taken meanwhile */
			__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
			continue;
		}
		__atomic_store_n(&e->lo, lo, __ATOMIC_RELAXED);
		for (int k = 0; k < LP_CXX_N; k++)
			__atomic_store_n(&e->fn[k], fn[k], __ATOMIC_RELAXED);
		__atomic_store_n(&e->rt, rt, __ATOMIC_RELAXED);
		__atomic_store_n(&e->hi, hi, __ATOMIC_RELAXED);
		__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
		return;
	}
}

/* The thread's last caller of lp_cxx_local from outside the agent. */
static __thread uintptr_t lp_cxx_outer __attribute__((tls_model("initial-exec")));

void *lp_cxx_local(enum lp_cxx_name k, const void *caller, int *rt, void *own[2])
{
	uintptr_t pc = (uintptr_t)caller;
	if (pc - lp_agent_lo < lp_agent_hi - lp_agent_lo)
		pc = lp_cxx_outer;
	else
		lp_cxx_outer = pc;
	for (int i = 0; i < LP_CXX_CACHE; i++) {
		struct lp_cxx_ent *e = &lp_cxx_cache[i];
		unsigned s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
		if (s & 1)
			continue;
		uintptr_t lo = __atomic_load_n(&e->lo, __ATOMIC_RELAXED), hi = __atomic_load_n(&e->hi, __ATOMIC_RELAXED);
		if (pc - lo >= hi - lo)
			continue;
		void *f = __atomic_load_n(&e->fn[k], __ATOMIC_RELAXED);
		unsigned bits = __atomic_load_n(&e->rt, __ATOMIC_RELAXED);
		void *gh = __atomic_load_n(&e->fn[LP_CXX__ZSt15get_new_handlerv], __ATOMIC_RELAXED);
		void *thr = __atomic_load_n(&e->fn[LP_CXX__ZSt17__throw_bad_allocv], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) != s)
			continue;
		if (rt)
			*rt = (bits >> k) & 1;
		if (own) {
			own[0] = gh;
			own[1] = thr;
		}
		return f;
	}
	struct lp_thread *t = &lp_tls;
	lp_enter(&t->busy);
	struct lp_cxx_snap s;
	memset(&s, 0, sizeof s);
	s.pc = pc;
	dl_iterate_phdr(lp_cxx_resolve_cb, &s);
	if (s.m) {
		if (s.n == 1)
			lp_cxx_keep(s.m[0].lo, s.m[0].hi, s.fn, s.rt);
		lp_munmap(s.m, (size_t)s.cap * sizeof *s.m);
	}
	lp_leave(&t->busy);
	if (rt)
		*rt = (s.rt >> k) & 1;
	if (own) {
		own[0] = s.fn[LP_CXX__ZSt15get_new_handlerv];
		own[1] = s.fn[LP_CXX__ZSt17__throw_bad_allocv];
	}
	return s.fn[k];
}

void lp_cxx_forget(void)
{
	for (int i = 0; i < LP_CXX_CACHE; i++) {
		struct lp_cxx_ent *e = &lp_cxx_cache[i];
		unsigned s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
		if ((s & 1) || __atomic_load_n(&e->hi, __ATOMIC_RELAXED) == 0 ||
		    !__atomic_compare_exchange_n(&e->seq, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&e->hi, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->lo, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->seq, s + 2, __ATOMIC_RELEASE);
	}
}
