/*
 * families.h - what the agent knows of the allocator behind the hooks
 * (families.c).
 */
#ifndef LP_FAMILIES_H
#define LP_FAMILIES_H

#include <stdint.h>
#include <string.h>

/* lp_fresh_link: what the allocator leaves of its own in a block it hands
 * out, which the program never wrote: LP_FRESH_LINK, its free list's
 * link to another block, as is, in the first word (gperftools' tcmalloc,
 * mimalloc); LP_FRESH_CHUNK, glibc's free-chunk fields (fd, bk,
 * fd_nextsize, bk_nextsize: the first 32 bytes; only a tcache or fastbin
 * link is mangled); 0, nothing (jemalloc). */
extern int lp_fresh_link __attribute__((visibility("hidden")));
#define LP_FRESH_LINK 1
#define LP_FRESH_CHUNK 2

LP_HIDDEN void lp_families_init(void *real_malloc);
LP_HIDDEN void lp_families_start(void);

/* The modules loaded before a dlopen, for telling those it brought. */
#define LP_DLSNAP_MAX 512
struct lp_dlsnap {
	int n, overflow, others;
	unsigned long start;
	uintptr_t bias[LP_DLSNAP_MAX];
};
LP_HIDDEN void lp_families_dlopen_begin(struct lp_dlsnap *s);
LP_HIDDEN void lp_families_dlopen_end(const struct lp_dlsnap *s, int loaded);
LP_HIDDEN void lp_families_dlclose(void);
LP_HIDDEN void lp_families_fork(int prepare, int child);
LP_HIDDEN void lp_families_exit(struct lp_thread *t);

/* lp_exe_malloc: the executable defines malloc itself (an allocator
 * linked statically): the agent's malloc is not the program's. */
extern int lp_exe_malloc __attribute__((visibility("hidden")));

/* agent.c: records for the allocators patched at their entries. */
LP_HIDDEN void lp_note_alloc(unsigned fn, void *p, size_t n, void *fp);
LP_HIDDEN void lp_note_free(unsigned fn, void *p, void *fp);
LP_HIDDEN uint32_t lp_note_realloc_begin(void *old, void *fp);
LP_HIDDEN void lp_note_realloc(void *old, void *p, size_t n, void *fp, uint32_t sid);

/* LP_FRESH_MAX: the most of a glibc block lp_fresh clears. Blocks this
 * large are rare outside glibc's own mmap threshold, and clearing more
 * would commit pages a program may never touch. */
#define LP_FRESH_MAX (1u << 20)

/* lp_fresh clears the allocator's words in block p of n bytes, just
 * handed out and not yet the program's: the scan would take them for the
 * program's pointers (to another block, or into one: a stale chunk
 * pointer whose low byte the program overwrote). memcheck reads them as
 * undefined and ignores them. Every such allocator's smallest block holds
 * the link, 8 bytes. glibc leaves its free-chunk fields not only in the
 * block's first 32 bytes but wherever a chunk it merged into this one
 * began, so the whole block is cleared (up to LP_FRESH_MAX). A chunk glibc
 * mapped for the block alone (IS_MMAPPED in its size word) is zero
 * already. */
static inline void lp_fresh(void *p, size_t n)
{
	if (lp_fresh_link && p) {
		if (lp_fresh_link == LP_FRESH_LINK) {
			uint64_t zero = 0;
			memcpy(p, &zero, sizeof zero);
		} else if (!(((const size_t *)p)[-1] & 2)) {
			size_t k = n > 32 ? n : n > 24 ? 32 : 24;
			memset(p, 0, k < LP_FRESH_MAX ? k : LP_FRESH_MAX);
		}
	}
}

/* lp_fresh_had is how many bytes of glibc block p a realloc keeps (its
 * usable size), read before the realloc; 0 when blocks are not cleared. */
static inline size_t lp_fresh_had(const void *p)
{
	if (lp_fresh_link != LP_FRESH_CHUNK || !p)
		return 0;
	size_t size = ((const size_t *)p)[-1];
	return (size & ~(size_t)7) - (size & 2 ? 16 : 8);
}

/* lp_fresh_tail clears what a realloc that grew a glibc block to n bytes
 * added past the had it kept: glibc grows a block into the next chunk, or
 * moves it into a free one, whose old contents (the program's pointers of
 * a block it freed) the scan would take for live ones; memcheck reads
 * them as undefined. */
static inline void lp_fresh_tail(void *p, size_t had, size_t n)
{
	if (had && p && !(((const size_t *)p)[-1] & 2)) {
		size_t end = n < LP_FRESH_MAX ? n : LP_FRESH_MAX;
		if (end > had)
			memset((char *)p + had, 0, end - had);
	}
}

#endif
