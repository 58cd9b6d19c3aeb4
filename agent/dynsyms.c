/*
 * dynsyms.c - the loaded modules' dynamic symbol tables, read in memory
 * through their hash tables as the loader reads them: the process's own
 * definitions and the slots an attach redirects (attach.c), the allocator
 * families (families.c), the program's LeakSanitizer hooks (lsan.c).
 *
 * Not dlsym: it is a dynamic-loader call of the program's own thread. A
 * name it does not find costs an error message the loader allocates, and
 * frees, through the program's allocator, which hands that memory,
 * pointers and all, to the program's next blocks; and glibc frees the
 * message the program's last failed call left for dlerror. A non-PIE
 * executable's canonical PLT entry, which dlsym returns for a function
 * whose address it takes, is told apart here (see attach.c).
 */
#include "agent.h"
#include "dynsyms.h"

#include <string.h>

uintptr_t lp_dyn_ptr(const struct lp_dynsyms *d, uintptr_t v)
{
	/* glibc relocates most in place, not those of a read-only dynamic
	 * section (the vDSO's): the one that lies in a PT_LOAD. */
	for (int pass = 0; pass < 2; pass++) {
		uintptr_t a = pass ? v + d->bias : v;
		for (int i = 0; i < d->phnum; i++) {
			const ElfW(Phdr) *ph = &d->phdr[i];
			if (ph->p_type == PT_LOAD && a - (d->bias + ph->p_vaddr) < ph->p_memsz)
				return a;
		}
	}
	return 0;
}

int lp_dynsyms_read(const struct dl_phdr_info *info, struct lp_dynsyms *d)
{
	memset(d, 0, sizeof *d);
	d->bias = info->dlpi_addr;
	d->phdr = info->dlpi_phdr;
	d->phnum = info->dlpi_phnum;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			d->dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	if (!d->dyn || d->dyn == _DYNAMIC || (info->dlpi_name && strstr(info->dlpi_name, "linux-vdso")))
		return -1;
	for (int i = 0; i < 4096 && d->dyn[i].d_tag != DT_NULL; i++) {
		uintptr_t v = d->dyn[i].d_un.d_ptr;
		switch (d->dyn[i].d_tag) {
		case DT_SYMTAB: d->sym = (const ElfW(Sym) *)lp_dyn_ptr(d, v); break;
		case DT_STRTAB: d->str = (const char *)lp_dyn_ptr(d, v); break;
		case DT_STRSZ: d->strsz = d->dyn[i].d_un.d_val; break;
		case DT_GNU_HASH: d->gnu = (const uint32_t *)lp_dyn_ptr(d, v); break;
		case DT_HASH: d->sysv = (const uint32_t *)lp_dyn_ptr(d, v); break;
		case DT_VERSYM: d->versym = (const ElfW(Half) *)lp_dyn_ptr(d, v); break;
		}
	}
	return d->sym && d->str && d->strsz && (d->gnu || d->sysv) ? 0 : -1;
}

/* lp_sym_is reports whether symbol i is name, as the loader binds it. */
static int lp_sym_is(const struct lp_dynsyms *d, uint32_t i, const char *name, size_t len)
{
	const ElfW(Sym) *s = &d->sym[i];
	if (s->st_name >= d->strsz || d->strsz - s->st_name <= len || memcmp(d->str + s->st_name, name, len + 1) != 0)
		return 0;
	/* A hidden version (an old one beside the default) is not bound by
	 * name alone. */
	return !d->versym || !(d->versym[i] & 0x8000);
}

static uint32_t lp_elf_hash(const char *s)
{
	uint32_t h = 0;
	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		uint32_t g = h & 0xf0000000u;
		h ^= g >> 24;
		h &= ~g;
	}
	return h;
}

/* lp_gnu_hash is the hash a DT_GNU_HASH table is keyed by (the loader's). */
LP_HIDDEN uint32_t lp_gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

const ElfW(Sym) *lp_dynsym(const struct lp_dynsyms *d, const char *name)
{
	size_t len = strlen(name);
	if (d->gnu) {
		const uint32_t *g = d->gnu;
		uint32_t nb = g[0], symoff = g[1], bloom_size = g[2], shift = g[3];
		if (!nb || !bloom_size || (bloom_size & (bloom_size - 1)) || nb > (1u << 24) || bloom_size > (1u << 24))
			return NULL;
		const ElfW(Addr) *bloom = (const ElfW(Addr) *)&g[4];
		const uint32_t *buckets = (const uint32_t *)&bloom[bloom_size];
		const uint32_t *chain = &buckets[nb];
		uint32_t h = lp_gnu_hash(name);
		const unsigned bits = 8 * sizeof(ElfW(Addr));
		ElfW(Addr) word = bloom[(h / bits) & (bloom_size - 1)];
		ElfW(Addr) mask = (ElfW(Addr))1 << (h % bits) | (ElfW(Addr))1 << ((h >> shift) % bits);
		if ((word & mask) != mask)
			return NULL;
		uint32_t i = buckets[h % nb];
		if (i < symoff)
			return NULL;
		/* A chain ends at an odd hash; a bound for a broken one. */
		for (uint32_t n = 0; n < (1u << 22); n++, i++) {
			uint32_t ch = chain[i - symoff];
			if ((ch | 1) == (h | 1) && lp_sym_is(d, i, name, len))
				return &d->sym[i];
			if (ch & 1)
				break;
		}
		return NULL;
	}
	uint32_t nb = d->sysv[0], nc = d->sysv[1];
	if (nb == 0)
		return NULL;
	const uint32_t *b = d->sysv + 2, *c = b + nb;
	for (uint32_t i = b[lp_elf_hash(name) % nb], n = 0; i != 0 && i < nc && n < nc; i = c[i], n++)
		if (lp_sym_is(d, i, name, len))
			return &d->sym[i];
	return NULL;
}

void *lp_dynsym_func(const struct lp_dynsyms *d, const char *name, size_t *size)
{
	const ElfW(Sym) *s = lp_dynsym(d, name);
	if (!s || s->st_shndx == SHN_UNDEF || s->st_value == 0 || ELF64_ST_TYPE(s->st_info) != STT_FUNC)
		return NULL;
	if (size)
		*size = s->st_size;
	return (void *)(d->bias + (uintptr_t)s->st_value);
}

static int lp_exe_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct lp_exe *m = arg;
	(void)size;
	m->bias = info->dlpi_addr; /* the first object is the executable */
	m->phdr = info->dlpi_phdr;
	m->phnum = info->dlpi_phnum;
	return 1;
}

void lp_exe_module(struct lp_exe *m)
{
	memset(m, 0, sizeof *m);
	dl_iterate_phdr(lp_exe_cb, m);
}

int lp_exe_code(const struct lp_exe *m, uintptr_t a, size_t n)
{
	for (int i = 0; m->phdr && i < m->phnum; i++) {
		const ElfW(Phdr) *ph = &m->phdr[i];
		uintptr_t lo = m->bias + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && a >= lo && a - lo <= ph->p_memsz &&
		    n <= ph->p_memsz - (a - lo))
			return 1;
	}
	return 0;
}
