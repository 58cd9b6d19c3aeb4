/*
 * modules.c - the loaded modules (executable, shared libraries, vdso): for
 * the unwinder (where is .eh_frame_hdr for this pc) and for the collector
 * (MODULE and MODULE_UNLOAD records with path, load bias, segments and
 * build id, so that addresses can be symbolized after the run).
 *
 * Readers (the unwinder, on any thread) take no lock: they read a published
 * snapshot. Writers (init, dlopen, dlclose, an unknown pc) serialise on a
 * spinlock, build a new snapshot and publish it. Old snapshots are never
 * freed, since a reader may still hold one; they are small and rare.
 */
#include "agent.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

struct lp_modsnap {
	uint32_t n, cap;
	struct lp_module m[];
};

static struct lp_modsnap *lp_mods;     /* published snapshot, sorted by lo */
static int lp_mod_lock;
uint64_t lp_mod_gen = 1;               /* bumped when a module goes away */
static unsigned long long lp_adds = ~0ull, lp_subs = ~0ull;
static char lp_exe[PATH_MAX];
static size_t lp_exe_len;

/* Scratch for one refresh, guarded by lp_mod_lock. */
static struct lp_modsnap *lp_next;
static size_t lp_next_bytes;
static uint64_t lp_modrec[3 + 255 * 3 + 8 + PATH_MAX / 8 + 1];
static char lp_maps_buf[8192];
static char lp_abs_path[PATH_MAX];

LP_HIDDEN void lp_mod_lock_acquire(void)
{
	while (__atomic_exchange_n(&lp_mod_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

LP_HIDDEN void lp_mod_lock_release(void)
{
	__atomic_store_n(&lp_mod_lock, 0, __ATOMIC_RELEASE);
}

const struct lp_module *lp_module_of(uintptr_t pc)
{
	struct lp_modsnap *s = __atomic_load_n(&lp_mods, __ATOMIC_ACQUIRE);
	if (!s)
		return NULL;
	uint32_t lo = 0, hi = s->n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (s->m[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct lp_module *m = &s->m[lo - 1];
	return pc < m->hi ? m : NULL;
}

static const struct lp_module *lp_find_load(struct lp_modsnap *s, const void *phdr, uintptr_t bias)
{
	if (!s)
		return NULL;
	for (uint32_t i = 0; i < s->n; i++)
		if (s->m[i].phdr == phdr && s->m[i].bias == bias)
			return &s->m[i];
	return NULL;
}

static size_t lp_build_id(const struct dl_phdr_info *info, const unsigned char **out)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
		const unsigned char *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const unsigned char *name = p + sizeof *nh;
			const unsigned char *desc = name + ((nh->n_namesz + 3) & ~3u);
			const unsigned char *next = desc + ((nh->n_descsz + 3) & ~3u);
			if (next > end)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
			    memcmp(name, "GNU", 4) == 0 && nh->n_descsz > 0 && nh->n_descsz <= 64) {
				*out = desc;
				return nh->n_descsz;
			}
			p = next;
		}
	}
	return 0;
}

static void lp_emit_module(struct lp_thread *t, const struct dl_phdr_info *info,
			   const char *path, size_t plen, uint32_t id)
{
	if (!t || t->state != 1)
		return;
	if (plen > PATH_MAX - 1)
		plen = PATH_MAX - 1;
	const unsigned char *bid = NULL;
	size_t blen = lp_build_id(info, &bid);
	uint64_t *w = lp_modrec;
	unsigned n = 4, nseg = 0;
	for (int i = 0; i < info->dlpi_phnum && nseg < 255; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		w[n++] = ph->p_vaddr;
		w[n++] = ph->p_memsz;
		w[n++] = (uint64_t)ph->p_flags | (uint64_t)ph->p_offset << 32;
		nseg++;
	}
	size_t bw = (blen + 7) / 8, pw = (plen + 7) / 8;
	memset(&w[n], 0, (bw + pw) * 8);
	if (blen)
		memcpy(&w[n], bid, blen);
	n += (unsigned)bw;
	memcpy(&w[n], path, plen);
	n += (unsigned)pw;
	w[0] = LP_HDR(LP_REC_MODULE, 0, n, id);
	w[1] = 0;
	w[2] = info->dlpi_addr;
	w[3] = (uint64_t)plen | (uint64_t)blen << 32 | (uint64_t)nseg << 48;
	lp_put(t, w, n);
}

/* lp_hex parses the hexadecimal number at *p, advancing it. */
static uintptr_t lp_hex(const char **p, const char *end)
{
	uintptr_t v = 0;
	for (; *p < end; (*p)++) {
		char c = **p;
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (d < 0)
			break;
		v = v << 4 | (uintptr_t)d;
	}
	return v;
}

/* lp_maps_line looks at one line of /proc/self/maps ("lo-hi perms offset
 * dev inode   path"): if its range holds addr and its path is absolute,
 * copies the path to lp_abs_path and returns its length; else 0. */
static size_t lp_maps_line(const char *p, const char *end, uintptr_t addr)
{
	uintptr_t lo = lp_hex(&p, end);
	if (p >= end || *p != '-')
		return 0;
	p++;
	uintptr_t hi = lp_hex(&p, end);
	if (addr < lo || addr >= hi)
		return 0;
	for (int field = 0; field < 4; field++) { /* perms, offset, dev, inode */
		while (p < end && *p == ' ')
			p++;
		while (p < end && *p != ' ')
			p++;
	}
	while (p < end && *p == ' ')
		p++;
	size_t n = (size_t)(end - p);
	if (n == 0 || *p != '/' || n >= sizeof lp_abs_path)
		return 0;
	memcpy(lp_abs_path, p, n);
	lp_abs_path[n] = 0;
	return n;
}

/*
 * lp_maps_path finds the file mapped at addr in /proc/self/maps, for a
 * module the dynamic loader names by a relative path (dlopen("./lib.so")):
 * that name is relative to the working directory at dlopen, which the
 * collector cannot know, while the kernel names the mapping's file by its
 * absolute path. It returns the length of the path in lp_abs_path, or 0.
 * Under a filter the program installed, and after an attach (which cannot
 * tell whether one is installed), no file is opened: it may kill for
 * openat. Called with lp_mod_lock held (the buffers are static).
 */
static size_t lp_maps_path(uintptr_t addr)
{
	if (lp_attach_mode || __atomic_load_n(&lp_sandboxed, __ATOMIC_RELAXED) == LP_SANDBOX_LATER)
		return 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	size_t have = 0, found = 0;
	for (;;) {
		ssize_t n = read(fd, lp_maps_buf + have, sizeof lp_maps_buf - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		const char *line = lp_maps_buf, *end = lp_maps_buf + have;
		for (const char *nl; (nl = memchr(line, '\n', (size_t)(end - line))) != NULL; line = nl + 1)
			if ((found = lp_maps_line(line, nl, addr)) != 0)
				goto done;
		have = (size_t)(end - line);
		if (have == sizeof lp_maps_buf)
			have = 0; /* a line longer than the buffer: dropped */
		else
			memmove(lp_maps_buf, line, have);
	}
done:
	close(fd);
	return found;
}

struct lp_refresh {
	struct lp_thread *t;
	struct lp_modsnap *old;
	int announce_all;
	int overflow;
};

static int lp_refresh_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct lp_refresh *r = arg;
	(void)size;
	if (lp_next->n >= lp_next->cap) {
		r->overflow = 1;
		return 1;
	}
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	const unsigned char *eh = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD) {
			uintptr_t a = info->dlpi_addr + ph->p_vaddr;
			if (a < lo)
				lo = a;
			if (a + ph->p_memsz > hi)
				hi = a + ph->p_memsz;
		} else if (ph->p_type == PT_GNU_EH_FRAME) {
			eh = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
		}
	}
	if (hi <= lo)
		return 0;
	const struct lp_module *prev = lp_find_load(r->old, info->dlpi_phdr, info->dlpi_addr);
	struct lp_module *m = &lp_next->m[lp_next->n++];
	m->lo = lo;
	m->hi = hi;
	m->bias = info->dlpi_addr;
	m->eh_hdr = eh;
	m->phdr = info->dlpi_phdr;
	m->seen = 0;
	if (prev && !r->announce_all) {
		m->id = prev->id;
		return 0;
	}
	m->id = lp_hdr ? (uint32_t)__atomic_add_fetch(&lp_hdr->next_module_id, 1, __ATOMIC_RELAXED) : 0;
	const char *path = info->dlpi_name;
	size_t plen = path ? strlen(path) : 0;
	if (plen == 0 && lp_next->n == 1) {
		path = lp_exe;
		plen = lp_exe_len;
	} else if (plen > 0 && path[0] != '/' && memchr(path, '/', plen)) {
		/* A name with no slash is not a file's (the vdso's). */
		size_t n = lp_maps_path(lo);
		if (n > 0) {
			path = lp_abs_path;
			plen = n;
		}
	}
	lp_emit_module(r->t, info, path ? path : "", plen, m->id);
	return 0;
}

static int lp_counts_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

static void lp_sort(struct lp_modsnap *s)
{
	for (uint32_t i = 1; i < s->n; i++) {
		struct lp_module m = s->m[i];
		uint32_t j = i;
		while (j > 0 && s->m[j - 1].lo > m.lo) {
			s->m[j] = s->m[j - 1];
			j--;
		}
		s->m[j] = m;
	}
}

/*
 * lp_modules_refresh brings the module table up to date with the dynamic
 * loader and tells the collector what changed. announce_all re-announces
 * every module (a fresh region after fork). Cheap when nothing changed.
 */
void lp_modules_refresh(struct lp_thread *t, int announce_all)
{
	int saved = errno;
	lp_enter(&t->busy);
	lp_mod_lock_acquire();
	unsigned long long c[2] = {0, 0};
	dl_iterate_phdr(lp_counts_cb, c);
	struct lp_modsnap *old = lp_mods;
	if (!announce_all && old && c[0] == lp_adds && c[1] == lp_subs)
		goto out;
	for (uint32_t cap = old ? old->n + 16 : 64;; cap *= 2) {
		size_t bytes = sizeof *lp_next + (size_t)cap * sizeof(struct lp_module);
		if (bytes > lp_next_bytes) {
			lp_munmap(lp_next, lp_next_bytes);
			lp_next = lp_mmap(bytes);
			lp_next_bytes = lp_next ? bytes : 0;
			if (!lp_next)
				goto out;
		}
		lp_next->n = 0;
		lp_next->cap = cap;
		struct lp_refresh r = {.t = t, .old = old, .announce_all = announce_all};
		dl_iterate_phdr(lp_refresh_cb, &r);
		if (!r.overflow)
			break;
	}
	/* Modules of the old table that are gone. */
	int gone = 0;
	for (uint32_t i = 0; old && !announce_all && i < old->n; i++) {
		if (lp_find_load(lp_next, old->m[i].phdr, old->m[i].bias))
			continue;
		gone = 1;
		if (t->state == 1) {
			uint64_t w[2] = {LP_HDR(LP_REC_MODULE_UNLOAD, 0, 2, old->m[i].id), 0};
			lp_put(t, w, 2);
		}
	}
	lp_sort(lp_next);
	__atomic_store_n(&lp_mods, lp_next, __ATOMIC_RELEASE);
	lp_next = NULL;
	lp_next_bytes = 0;
	lp_adds = c[0];
	lp_subs = c[1];
	if (gone)
		__atomic_add_fetch(&lp_mod_gen, 1, __ATOMIC_RELEASE);
	/* After an attach: modules loaded since get their allocator calls
	 * redirected too (a no-op when not attached). */
	lp_attach_patch();
out:
	lp_mod_lock_release();
	lp_leave(&t->busy);
	errno = saved;
}

void lp_modules_init(void)
{
	ssize_t n = readlink("/proc/self/exe", lp_exe, sizeof lp_exe - 1);
	lp_exe_len = n > 0 ? (size_t)n : 0;
	lp_exe[lp_exe_len] = 0;
}
