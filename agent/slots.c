/*
 * slots.c - the slot pool for stale objects (LP_HF_STALE, see lp_wire.h).
 *
 * A sampled fraction of small allocations is served from pages of a pool
 * the agent maps: one block per page, at the page's start (any alignment
 * malloc promises holds). Each page is a VMA of its own (every other page
 * MADV_NOHUGEPAGE, so neighbours cannot merge), and the collector reads
 * whether it was touched from /proc/PID/smaps ("Referenced"), clearing the
 * accessed bits after each reading (clear_refs). Nothing faults, nothing
 * is protected: the program, its system calls and its threads use these
 * blocks as any other. No guard page either: an overflow stays in the
 * block's own page, as it would stay in malloc's heap.
 *
 * Sampling is per call site (the return address of the allocator call,
 * hashed into buckets): a site's 1st allocation, then every Kth, the
 * interval growing by K every LP_SAMPLE_DECAY allocations of the site (as
 * SWAT's adaptive sampling: a hot site is sampled less, a rare one fully);
 * and no bucket holds more than a share of the pool, so that one site that
 * keeps its blocks cannot take every slot. A full pool serves nothing
 * more.
 *
 * Lock free (a bitmap claimed by CAS): a fork child inherits a consistent
 * pool whatever its parent's other threads were doing.
 */
#include "agent.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

uintptr_t lp_slot_lo;   /* the first slot page; 0: no pool */
uintptr_t lp_slot_span; /* bytes of slot pages from lp_slot_lo */
int lp_slots_on;        /* serve sampled blocks from the pool */

#define LP_SITE_BUCKETS 4096u
#define LP_SAMPLE_DECAY 65536u

static unsigned lp_page_shift;
static uint32_t lp_nslots;
static uint32_t lp_sample_k;
static uint32_t lp_site_cap;  /* slots one bucket may hold */
static uint32_t lp_slot_hint; /* where the next search starts */
static uint64_t *lp_slot_used; /* bitmap, bit i: slot i holds a block */
static uint32_t *lp_slot_req;  /* the size asked for, per slot */
static uint16_t *lp_slot_site; /* the bucket, per slot */
static uint32_t lp_site_calls[LP_SITE_BUCKETS];
static uint32_t lp_site_live[LP_SITE_BUCKETS];

/* lp_slots_make maps the pool: n slot pages between two spare ones, so
 * that the first and the last slot cannot merge with a neighbouring
 * mapping either. */
static int lp_slots_make(uint32_t n, uint32_t k)
{
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0 || (page & (page - 1)) || n == 0)
		return -1;
	size_t meta = ((size_t)(n + 63) / 64) * 8 + (size_t)n * 4 + (size_t)n * 2;
	unsigned char *m = lp_mmap(meta);
	if (!m)
		return -1;
	unsigned char *base = lp_mmap(((size_t)n + 2) * (size_t)page);
	if (!base) {
		lp_munmap(m, meta);
		return -1;
	}
	for (uint32_t i = 1; i <= n + 1; i += 2) { /* n+1: the spare page after an even n */
		/* Without transparent huge pages the advice does not exist:
		 * MADV_DONTDUMP then (only a core dump would miss the page). */
		if (madvise(base + (size_t)i * (size_t)page, (size_t)page, MADV_NOHUGEPAGE) != 0)
			madvise(base + (size_t)i * (size_t)page, (size_t)page, MADV_DONTDUMP);
	}
	lp_slot_used = (uint64_t *)m;
	lp_slot_req = (uint32_t *)(m + ((size_t)(n + 63) / 64) * 8);
	lp_slot_site = (uint16_t *)(m + ((size_t)(n + 63) / 64) * 8 + (size_t)n * 4);
	lp_page_shift = (unsigned)__builtin_ctzl((unsigned long)page);
	lp_nslots = n;
	lp_sample_k = k ? k : 1;
	lp_site_cap = n / 32 > 4 ? n / 32 : 4;
	/* lo before span: with span 0 no address is a slot */
	lp_slot_lo = (uintptr_t)base + (uintptr_t)page;
	__atomic_store_n(&lp_slot_span, (uintptr_t)n * (uintptr_t)page, __ATOMIC_RELEASE);
	return 0;
}

void lp_slots_start(void)
{
	if (!lp_hdr || !(lp_hdr->flags & LP_HF_STALE)) {
		lp_slots_on = 0; /* blocks already in the pool are still freed to it */
		return;
	}
	if (!lp_slot_lo) {
		int saved = errno;
		uint32_t n = lp_hdr->stale_slots;
		if (n > 1u << 20)
			n = 1u << 20;
		int rc = lp_slots_make(n, lp_hdr->stale_sample);
		errno = saved;
		if (rc != 0)
			return;
	}
	/* A fork child inherits the pool: its collector learns it here. */
	lp_hdr->stale_page = 1u << lp_page_shift;
	lp_hdr->stale_count = lp_nslots;
	__atomic_store_n(&lp_hdr->stale_base, (uint64_t)lp_slot_lo, __ATOMIC_RELEASE);
	lp_slots_on = 1;
}

static inline uint32_t lp_bucket(const void *ra)
{
	uint64_t h = (uint64_t)(uintptr_t)ra; /* a mix of all its bits */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return (uint32_t)(h & (LP_SITE_BUCKETS - 1));
}

void *lp_slot_alloc(size_t n, const void *ra, int zero)
{
	if (n > LP_STALE_MAX_SIZE || !lp_slot_lo)
		return NULL;
	uint32_t b = lp_bucket(ra);
	/* A load and a store, not a locked add: a count lost to a race
	 * only shifts the sample. */
	uint32_t c = __atomic_load_n(&lp_site_calls[b], __ATOMIC_RELAXED);
	__atomic_store_n(&lp_site_calls[b], c + 1, __ATOMIC_RELAXED);
	uint32_t step = lp_sample_k * (1 + c / LP_SAMPLE_DECAY);
	if (c % step != 0 || __atomic_load_n(&lp_site_live[b], __ATOMIC_RELAXED) >= lp_site_cap)
		return NULL;
	uint32_t words = (lp_nslots + 63) / 64;
	uint32_t w0 = __atomic_load_n(&lp_slot_hint, __ATOMIC_RELAXED) % words;
	for (uint32_t k = 0; k < words; k++) {
		uint32_t w = (w0 + k) % words;
		uint64_t v = __atomic_load_n(&lp_slot_used[w], __ATOMIC_RELAXED);
		while (~v) {
			unsigned bit = (unsigned)__builtin_ctzll(~v);
			uint32_t i = w * 64 + bit;
			if (i >= lp_nslots)
				break;
			if (__atomic_compare_exchange_n(&lp_slot_used[w], &v, v | 1ull << bit, 0,
							 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
				lp_slot_req[i] = (uint32_t)n;
				lp_slot_site[i] = (uint16_t)b;
				__atomic_fetch_add(&lp_site_live[b], 1, __ATOMIC_RELAXED);
				__atomic_store_n(&lp_slot_hint, w, __ATOMIC_RELAXED);
				void *p = (void *)(lp_slot_lo + ((uintptr_t)i << lp_page_shift));
				if (zero)
					memset(p, 0, n); /* a slot keeps what its last block held */
				return p;
			}
		}
	}
	return NULL;
}

/* lp_slot_index returns the slot of block p, or -1 when p is not the start
 * of a block in the pool (then nothing is done with it). */
static long lp_slot_index(const void *p)
{
	uintptr_t off = (uintptr_t)p - lp_slot_lo;
	if (off >= lp_slot_span || (off & (((uintptr_t)1 << lp_page_shift) - 1)))
		return -1;
	uint32_t i = (uint32_t)(off >> lp_page_shift);
	if (!(__atomic_load_n(&lp_slot_used[i / 64], __ATOMIC_ACQUIRE) >> (i % 64) & 1))
		return -1;
	return i;
}

void lp_slot_free(void *p)
{
	long i = lp_slot_index(p);
	if (i < 0)
		return;
	__atomic_fetch_sub(&lp_site_live[lp_slot_site[i]], 1, __ATOMIC_RELAXED);
	__atomic_fetch_and(&lp_slot_used[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELEASE);
}

void *lp_slot_realloc(void *old, size_t n, void *(*real_malloc)(size_t))
{
	long i = lp_slot_index(old);
	if (n == 0) {
		/* glibc frees and returns NULL */
		lp_slot_free(old);
		return NULL;
	}
	void *p = real_malloc(n);
	if (!p)
		return NULL;
	size_t had = i < 0 ? 0 : lp_slot_req[i];
	memcpy(p, old, had < n ? had : n);
	lp_slot_free(old);
	return p;
}

/* malloc_usable_size of a slot block says what glibc would say of a chunk
 * of its size, so that a program sees the same numbers. */
LP_EXPORT size_t malloc_usable_size(void *p)
{
	static size_t (*real)(void *);
	if (LP_UNLIKELY(lp_is_slot(p))) {
		long i = lp_slot_index(p);
		size_t n = i < 0 ? 0 : lp_slot_req[i];
		size_t chunk = n + 8 + 15 < 32 ? 32 : (n + 8 + 15) & ~(size_t)15;
		return chunk - 8;
	}
	if (LP_UNLIKELY(!real)) {
		lp_enter(&lp_tls.busy);
		real = (size_t (*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
		lp_leave(&lp_tls.busy);
		if (!real)
			return 0;
	}
	return real(p);
}
