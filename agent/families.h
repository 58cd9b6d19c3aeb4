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
