/*
 * families.h - what the agent knows of the allocator behind the hooks
 * (families.c).
 */
#ifndef LP_FAMILIES_H
#define LP_FAMILIES_H

#include <stdint.h>
#include <string.h>

/* lp_fresh_link: the allocator hands out blocks whose first word still
 * holds its free list's link to another block, as is (gperftools'
 * tcmalloc, mimalloc; glibc mangles its own). */
extern int lp_fresh_link __attribute__((visibility("hidden")));

LP_HIDDEN void lp_families_init(void *real_malloc);
LP_HIDDEN void lp_families_start(void);

/* lp_exe_malloc: the executable defines malloc itself (an allocator
 * linked statically): the agent's malloc is not the program's. */
extern int lp_exe_malloc __attribute__((visibility("hidden")));

/* agent.c: records for the allocators patched at their entries. */
LP_HIDDEN void lp_note_alloc(unsigned fn, void *p, size_t n, void *fp);
LP_HIDDEN void lp_note_free(unsigned fn, void *p, void *fp);
LP_HIDDEN uint32_t lp_note_realloc_begin(void *old, void *fp);
LP_HIDDEN void lp_note_realloc(void *old, void *p, size_t n, void *fp, uint32_t sid);

/* lp_fresh clears the allocator's link in block p, just handed out and
 * not yet the program's: the scan would take it for the program's
 * pointer to another block (what the allocator hands out next, often).
 * Every such allocator's smallest block holds the link, 8 bytes. */
static inline void lp_fresh(void *p)
{
	if (LP_UNLIKELY(lp_fresh_link) && p) {
		uint64_t zero = 0;
		memcpy(p, &zero, sizeof zero);
	}
}

#endif
