/*
 * pool.c - the program's own pools and arenas (agent/include/leakpath.h:
 * LEAKPATH_POOL_CREATE, _ALLOC, _FREE, _DESTROY).
 *
 * Each call is one record; the collector keeps a pool's objects as blocks
 * of their own (docs/allocators.md). Nothing is folded: a pool object
 * often starts where the block the pool carved it from starts, and a
 * fold matches by address. The records carry their own ordered time
 * (lp_ts_after), as the allocator's do: an object allocated by one thread
 * may be freed by another.
 */
#include "agent.h"

#include <errno.h>

/* Inlined: fp is the frame of the exported function the program called,
 * which must still be there while the stack is walked. */
static inline __attribute__((always_inline)) void lp_pool_put(unsigned type, int stack, uint64_t a, uint64_t b, uint64_t c, unsigned words,
			void *fp)
{
	struct lp_thread *t = lp_rec_thread();
	if (!t)
		return;
	int saved = errno;
	uint32_t sid = stack ? lp_stack_id(t, fp) : 0;
	uint64_t w[5] = {LP_HDR(type, 0, words, sid), lp_ts_after(), a, b, c};
	lp_put(t, w, words);
	errno = saved;
}

LP_EXPORT void __leakpath_pool_create(const void *pool)
{
	lp_pool_put(LP_REC_POOL, 1, (uint64_t)(uintptr_t)pool, LP_POOL_CREATE, 0, 4, __builtin_frame_address(0));
}

LP_EXPORT void __leakpath_pool_destroy(const void *pool)
{
	lp_pool_put(LP_REC_POOL, 1, (uint64_t)(uintptr_t)pool, LP_POOL_DESTROY, 0, 4, __builtin_frame_address(0));
}

LP_EXPORT void __leakpath_pool_alloc(const void *pool, const void *addr, size_t size)
{
	if (!addr)
		return;
	lp_pool_put(LP_REC_POOL_ALLOC, 1, (uint64_t)(uintptr_t)addr, (uint64_t)size, (uint64_t)(uintptr_t)pool, 5,
		    __builtin_frame_address(0));
}

LP_EXPORT void __leakpath_pool_free(const void *pool, const void *addr)
{
	if (!addr)
		return;
	lp_pool_put(LP_REC_POOL_FREE, lp_free_stacks, (uint64_t)(uintptr_t)addr, (uint64_t)(uintptr_t)pool, 0, 4,
		    __builtin_frame_address(0));
}
