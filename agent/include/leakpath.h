/*
 * leakpath.h - leakpath's API for programs (C and C++), header only.
 *
 * Scoped monitors (what one block of code costs in memory):
 *
 *   LEAKPATH_SCOPE("parse");          C++: until the end of the block;
 *                                      C (gcc, clang): the same, by a cleanup
 *   leakpath_scope_begin("parse");    C: explicit begin...
 *   leakpath_scope_end();             ...and end (closes the innermost open scope
 *                                      of the calling thread)
 *
 * Under `leakpath run`, each scope name gets: times entered, total and
 * longest duration, bytes and blocks allocated inside, bytes freed inside,
 * what its instances still held when they closed (by address and
 * allocation site), and when it first began and last ended. Scopes nest per
 * thread: an inner scope's allocations count in its parents too. Scopes of
 * different threads are independent.
 *
 * Points of the program's choosing:
 *
 *   leakpath_snapshot("after load");  a snapshot of the live blocks, as
 *                                      `leakpath snapshot PID` takes it
 *   leakpath_leak_check();             a leak check now: the number of blocks
 *                                      leaked so far (definite and possible)
 *
 * Stale objects (`leakpath run --stale`, docs/stale.md):
 *
 *   leakpath_stale_epoch();            the epochs ended so far: what the
 *                                      program touches after reading n
 *                                      counts in epoch n+1; -1 without
 *                                      leakpath --stale
 *
 * Without leakpath the program runs unchanged: the functions are weak
 * references that the agent (libleakpath.so, preloaded by `leakpath run`)
 * defines; each call costs a load and a test when it is absent. Nothing
 * needs linking. The program's behaviour never depends on leakpath: only
 * the return values of leakpath_snapshot, leakpath_leak_check and
 * leakpath_stale_epoch say whether it is there.
 *
 * Scope names are copied when the scope begins (at most 127 bytes kept);
 * any string will do, literals are cheapest to read.
 *
 * Pools and arenas (memory the program hands out itself, from a block it
 * got from malloc or mmap):
 *
 *   LEAKPATH_POOL_CREATE(pool);             pool: any address naming it
 *   LEAKPATH_POOL_ALLOC(pool, addr, size);  an object of size bytes at addr
 *   LEAKPATH_POOL_FREE(pool, addr);         the object at addr is gone
 *   LEAKPATH_POOL_DESTROY(pool);            the pool and all its objects
 *
 * Each object is then a block of its own, with the stack that allocated
 * it, its leak kind and type; a block that holds a pool's objects (the
 * pool's memory) is not listed itself, as memcheck does with
 * VALGRIND_MEMPOOL_ALLOC. A pool destroyed with objects still live
 * reports them. Pools may nest: a pool's memory may be another pool's
 * object. They are valgrind's VALGRIND_CREATE_MEMPOOL,
 * VALGRIND_MEMPOOL_ALLOC, VALGRIND_MEMPOOL_FREE and
 * VALGRIND_DESTROY_MEMPOOL (see docs/allocators.md).
 */
#ifndef LEAKPATH_H
#define LEAKPATH_H

#ifdef __cplusplus
extern "C" {
#endif

/* The agent's entry points: weak references, null without the agent. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/*
 * Read through the GOT: in an executable built without -fPIE, the linker
 * resolves a weak reference to an undefined function to 0 for good, and the
 * preloaded agent could not fill it in. A load through the GOT always gets
 * a dynamic relocation.
 */
__asm__(".weak __leakpath_scope_begin\n\t.weak __leakpath_scope_end\n\t"
	".weak __leakpath_snapshot\n\t.weak __leakpath_leak_check\n\t"
	".weak __leakpath_pool_create\n\t.weak __leakpath_pool_destroy\n\t"
	".weak __leakpath_pool_alloc\n\t.weak __leakpath_pool_free\n\t"
	".weak __leakpath_stale_epoch");
#define LEAKPATH__FN(sym, type)                                                   \
	static inline type leakpath__fn_##sym(void)                               \
	{                                                                         \
		type f;                                                           \
		__asm__("movq " #sym "@GOTPCREL(%%rip), %0" : "=r"(f));            \
		return f;                                                         \
	}
#else
void __leakpath_scope_begin(const char *name) __attribute__((weak));
void __leakpath_scope_end(void) __attribute__((weak));
int __leakpath_snapshot(const char *label) __attribute__((weak));
int __leakpath_leak_check(void) __attribute__((weak));
void __leakpath_pool_create(const void *pool) __attribute__((weak));
void __leakpath_pool_destroy(const void *pool) __attribute__((weak));
void __leakpath_pool_alloc(const void *pool, const void *addr, __SIZE_TYPE__ size) __attribute__((weak));
void __leakpath_pool_free(const void *pool, const void *addr) __attribute__((weak));
long __leakpath_stale_epoch(void) __attribute__((weak));
#define LEAKPATH__FN(sym, type)                                                   \
	static inline type leakpath__fn_##sym(void) { return &sym; }
#endif

typedef void (*leakpath__begin_fn)(const char *);
typedef void (*leakpath__end_fn)(void);
typedef int (*leakpath__label_fn)(const char *);
typedef int (*leakpath__check_fn)(void);
typedef void (*leakpath__pool_fn)(const void *);
typedef void (*leakpath__pool_alloc_fn)(const void *, const void *, __SIZE_TYPE__);
typedef void (*leakpath__pool_free_fn)(const void *, const void *);
typedef long (*leakpath__epoch_fn)(void);

LEAKPATH__FN(__leakpath_scope_begin, leakpath__begin_fn)
LEAKPATH__FN(__leakpath_scope_end, leakpath__end_fn)
LEAKPATH__FN(__leakpath_snapshot, leakpath__label_fn)
LEAKPATH__FN(__leakpath_leak_check, leakpath__check_fn)
LEAKPATH__FN(__leakpath_pool_create, leakpath__pool_fn)
LEAKPATH__FN(__leakpath_pool_destroy, leakpath__pool_fn)
LEAKPATH__FN(__leakpath_pool_alloc, leakpath__pool_alloc_fn)
LEAKPATH__FN(__leakpath_pool_free, leakpath__pool_free_fn)
LEAKPATH__FN(__leakpath_stale_epoch, leakpath__epoch_fn)

/* leakpath_scope_begin opens scope name on the calling thread, inside
 * the scopes it has open. */
static inline void leakpath_scope_begin(const char *name)
{
	leakpath__begin_fn f = leakpath__fn___leakpath_scope_begin();
	if (f)
		f(name);
}

/* leakpath_scope_end closes the innermost scope the calling thread has
 * open (none open: nothing happens). */
static inline void leakpath_scope_end(void)
{
	leakpath__end_fn f = leakpath__fn___leakpath_scope_end();
	if (f)
		f();
}

/* leakpath_snapshot asks leakpath for a snapshot of the live blocks now,
 * named label, and returns when it was taken: 0. -1: not taken (not
 * running under leakpath, or the snapshot failed). The program is paused
 * while its memory is scanned. */
static inline int leakpath_snapshot(const char *label)
{
	leakpath__label_fn f = leakpath__fn___leakpath_snapshot();
	return f ? f(label) : -1;
}

/* leakpath_leak_check scans the program's memory now and returns the
 * number of blocks leaked so far (of the kinds `leakpath run
 * --check-kinds` names: definite and possible by default, suppressions
 * applied). 0: none, or not running under leakpath; -1: the check
 * failed. */
static inline int leakpath_leak_check(void)
{
	leakpath__check_fn f = leakpath__fn___leakpath_leak_check();
	return f ? f() : 0;
}

/* leakpath_stale_epoch returns how many stale epochs (`--stale-epoch`)
 * have ended: each ends once the collector has read and cleared the
 * accessed bits, so what the program touches after it reads n counts in
 * epoch n+1 (after a system call, on some virtual machines: see
 * docs/stale.md). -1: no epochs are counted (not running under leakpath
 * --stale, or the collector is gone), and none will be. For a program,
 * a test say, that paces itself by epochs rather than by the clock. */
static inline long leakpath_stale_epoch(void)
{
	leakpath__epoch_fn f = leakpath__fn___leakpath_stale_epoch();
	return f ? f() : -1;
}

/* The pool calls are inlined even without optimisation: the object's
 * stack then starts in the program's function, not in this header. */
#if defined(__GNUC__) || defined(__clang__)
#define LEAKPATH__INLINE static inline __attribute__((always_inline))
#else
#define LEAKPATH__INLINE static inline
#endif

/* leakpath_pool_create names a new pool by any address (the pool's
 * descriptor, usually). */
LEAKPATH__INLINE void leakpath_pool_create(const void *pool)
{
	leakpath__pool_fn f = leakpath__fn___leakpath_pool_create();
	if (f)
		f(pool);
}

/* leakpath_pool_alloc says the program handed out size bytes at addr from
 * pool: an object of its own, allocated here (NULL: nothing). */
LEAKPATH__INLINE void leakpath_pool_alloc(const void *pool, const void *addr, __SIZE_TYPE__ size)
{
	leakpath__pool_alloc_fn f = leakpath__fn___leakpath_pool_alloc();
	if (f)
		f(pool, addr, size);
}

/* leakpath_pool_free says the object at addr of pool is gone. */
LEAKPATH__INLINE void leakpath_pool_free(const void *pool, const void *addr)
{
	leakpath__pool_free_fn f = leakpath__fn___leakpath_pool_free();
	if (f)
		f(pool, addr);
}

/* leakpath_pool_destroy says pool is gone, and with it every object it
 * still had (they are reported: live objects at a pool's end). */
LEAKPATH__INLINE void leakpath_pool_destroy(const void *pool)
{
	leakpath__pool_fn f = leakpath__fn___leakpath_pool_destroy();
	if (f)
		f(pool);
}

#define LEAKPATH_POOL_CREATE(pool) leakpath_pool_create(pool)
#define LEAKPATH_POOL_ALLOC(pool, addr, size) leakpath_pool_alloc(pool, addr, size)
#define LEAKPATH_POOL_FREE(pool, addr) leakpath_pool_free(pool, addr)
#define LEAKPATH_POOL_DESTROY(pool) leakpath_pool_destroy(pool)

#ifdef __cplusplus
}
#endif

#define LEAKPATH__CAT2(a, b) a##b
#define LEAKPATH__CAT(a, b) LEAKPATH__CAT2(a, b)
#ifdef __COUNTER__
#define LEAKPATH__UNIQUE(p) LEAKPATH__CAT(p, __COUNTER__)
#else
#define LEAKPATH__UNIQUE(p) LEAKPATH__CAT(p, __LINE__)
#endif

#ifdef __cplusplus
namespace leakpath {
/* scope is the RAII guard behind LEAKPATH_SCOPE: it begins a scope when
 * made and ends it when destroyed (exceptions included). */
class scope {
public:
	explicit scope(const char *name) noexcept { leakpath_scope_begin(name); }
	~scope() { leakpath_scope_end(); }
	scope(const scope &) = delete;
	scope &operator=(const scope &) = delete;
};
} // namespace leakpath
#define LEAKPATH_SCOPE(name) ::leakpath::scope LEAKPATH__UNIQUE(leakpath_scope_)(name)
#elif defined(__GNUC__) || defined(__clang__)
static inline void leakpath__scope_cleanup(int *unused)
{
	(void)unused;
	leakpath_scope_end();
}
/* In C, LEAKPATH_SCOPE ends the scope where the enclosing block ends (a
 * cleanup attribute): on return, break and goto out of it too. */
#define LEAKPATH_SCOPE(name)                                                        \
	int LEAKPATH__UNIQUE(leakpath_scope_)                                       \
	    __attribute__((cleanup(leakpath__scope_cleanup), unused)) =             \
		(leakpath_scope_begin(name), 0)
#endif

#endif
