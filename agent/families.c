/*
 * families.c - the allocator behind the hooks, and its habits.
 *
 * An allocator that keeps its free lists inside the free blocks leaves
 * the link in a block it hands out: gperftools' tcmalloc and mimalloc
 * store the next free block's address, as is, in the first word. A
 * program that never writes that word (it writes a byte, or part of a
 * struct) leaves a pointer the leak scan cannot tell from the program's:
 * leaked blocks read as reached from each other (a chain of "indirect"
 * leaks, one "definite" at its head). The agent clears that word as the
 * block comes out of the allocator, before the program has it: the
 * block's contents are undefined to the program until it writes them
 * (glibc's own tcache clears a word of each block it hands out, too).
 * glibc mangles its links (safe-linking) and jemalloc keeps no links in
 * blocks: nothing to do for them.
 */
#include "agent.h"
#include "families.h"

#include <dlfcn.h>

int lp_fresh_link;

/* Functions only these allocators' libraries define. */
static const char *const lp_link_markers[] = {"tc_malloc", "mi_malloc"};

/* lp_families_init notes the habits of the allocator whose malloc is
 * real_malloc: the module that defines it also defines a marker. */
void lp_families_init(void *real_malloc)
{
	Dl_info mi, fi;
	if (!real_malloc || !dladdr(real_malloc, &mi))
		return;
	for (unsigned i = 0; i < sizeof lp_link_markers / sizeof lp_link_markers[0]; i++) {
		void *f = dlsym(RTLD_DEFAULT, lp_link_markers[i]);
		if (f && dladdr(f, &fi) && fi.dli_fbase == mi.dli_fbase) {
			lp_fresh_link = 1;
			break;
		}
	}
}
