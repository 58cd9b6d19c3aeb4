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
#include "dynsyms.h"
#include "families.h"
#include "x86.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int lp_fresh_link;
static uintptr_t lp_real_base; /* the module of the malloc the hooks call */
static void *lp_real_malloc;   /* that malloc */
static int lp_real_libc;       /* it is the C library's */

/* A function found: where, how long, in which module. */
struct lp_found {
	uintptr_t addr;
	size_t size;
	uintptr_t base; /* its module's dli_fbase */
};

/* Functions only these allocators' libraries define. */
static const char *const lp_link_markers[] = {"tc_malloc", "mi_malloc"};

static int lp_find_exported(const char *name, struct lp_found *out);
static void lp_dynmods_read(void);

/* lp_families_init notes the habits of the allocator whose malloc is
 * real_malloc: the module that defines it also defines a marker. */
void lp_families_init(void *real_malloc)
{
	Dl_info mi;
	if (!real_malloc || !dladdr(real_malloc, &mi))
		return;
	lp_real_base = (uintptr_t)mi.dli_fbase;
	lp_real_malloc = real_malloc;
	const char *base = mi.dli_fname ? strrchr(mi.dli_fname, '/') : NULL;
	base = base ? base + 1 : mi.dli_fname;
	lp_real_libc = !base || strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
	if (lp_real_libc)
		lp_fresh_link = LP_FRESH_CHUNK;
	lp_dynmods_read();
	/* The executable's own malloc: known before any operator new the
	 * agent serves (lp_cxx_mode), which must then call through. */
	struct lp_exe exe;
	struct lp_found x;
	lp_exe_module(&exe);
	if (lp_find_exported("malloc", &x) && lp_exe_code(&exe, x.addr, x.size))
		lp_exe_malloc = 1;
	for (unsigned i = 0; i < sizeof lp_link_markers / sizeof lp_link_markers[0]; i++) {
		struct lp_found x;
		if (lp_find_exported(lp_link_markers[i], &x) && x.base == lp_real_base) {
			lp_fresh_link = LP_FRESH_LINK;
			break;
		}
	}
}

/* ==== Allocators no hook sees: patched at their entries ====
 *
 * The agent's hooks see the calls that the dynamic linker binds to the
 * first definition of malloc and the others, the agent's. An executable
 * that defines them itself (an allocator linked statically) binds its
 * own calls, and the C library's, to its own; a family under a prefix
 * (je_malloc, mi_malloc, rpmalloc, tc_malloc, or one the user names) has
 * no hook at all. At start, while the process has one thread, the agent
 * finds such entries and patches each: its first instructions become a
 * jump to a detour of the agent's, which records the call and calls the
 * original through a trampoline holding the instructions moved
 * (agent/x86.h decodes and relocates them). A function whose first
 * instructions cannot be moved, or whose code may branch back into the
 * bytes the jump replaces, is refused, and with it its whole family:
 * its calls are not traced, and the collector says so.
 *
 * One allocation is recorded once: a detour runs the original with the
 * thread's recording suspended (busy), so what the original calls of
 * the agent's hooks or of other detours passes through; the module whose
 * malloc the hooks call is left alone (its prefixed names are aliases or
 * internals of the same allocator), as are the prefixed internals of an
 * allocator linked into the executable.
 */

int lp_exe_malloc;

enum {
	F_MALLOC,
	F_CALLOC,
	F_REALLOC,
	F_FREE,
	F_MEMALIGN,
	F_POSIX_MEMALIGN,
	F_ALIGNED_ALLOC,
	F_VALLOC,
	F_NEW,
	F_NEW_ARRAY,
	F_DELETE,
	F_DELETE_ARRAY,
	F_DELETE_SIZED,
	F_DELETE_ARRAY_SIZED,
	F_N
};

static const char *const lp_fam_fn_names[F_N] = {
	"malloc", "calloc", "realloc", "free", "memalign", "posix_memalign", "aligned_alloc", "valloc",
	"_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm",
};

static const unsigned lp_fam_wire_fn[F_N] = {
	LP_FN_MALLOC, LP_FN_CALLOC, LP_FN_REALLOC, LP_FN_FREE, LP_FN_MEMALIGN, LP_FN_POSIX_MEMALIGN,
	LP_FN_ALIGNED_ALLOC, LP_FN_VALLOC, LP_FN_NEW, LP_FN_NEW_ARRAY, LP_FN_DELETE, LP_FN_DELETE_ARRAY,
	LP_FN_DELETE, LP_FN_DELETE_ARRAY,
};

/* The built-in prefixes: jemalloc's (as a prefixed build names them,
 * and Rust's jemallocator), mimalloc's, rpmalloc's, gperftools'. */
static const char *const lp_fam_prefixes[] = {"je_", "_rjem_", "mi_", "rp", "tc_"};

#define LP_FAM_SLOTS 8 /* slot 0: the executable's own malloc family */
#define LP_FAM_PREFIX_MAX 32

struct lp_fam {
	int live;          /* the slot is taken */
	uintptr_t dl_base; /* its module's, if a dlopen brought it (0: at start) */
	char prefix[LP_FAM_PREFIX_MAX];
	void *tramp[F_N];  /* the original, through the trampoline; NULL: not patched */
	unsigned fn[F_N];  /* LP_FN_* each records */
	int fresh_link;    /* its blocks hold its free list's link (see lp_fresh) */
};

static struct lp_fam lp_fams[LP_FAM_SLOTS];

/* ---- detours ---- */

typedef void *(*lp_f_size_t)(size_t);
typedef void *(*lp_f_size2_t)(size_t, size_t);
typedef int (*lp_f_pm_t)(void **, size_t, size_t);
typedef void *(*lp_f_realloc_t)(void *, size_t);
typedef void (*lp_f_free_t)(void *);
typedef void (*lp_f_free_sized_t)(void *, size_t);

/* A detour runs the original with the thread's recording suspended
 * (busy): what the original calls of the agent's (a wrapper's next
 * malloc is the agent's hook) or of patched functions (a calloc calling
 * its family's malloc) passes through; the detour records the call
 * itself, once. */
#define LP_FAM_ENTER(s, f, type, real)                                                         \
	type real = (type)lp_fams[s].tramp[f];                                                \
	struct lp_thread *t = lp_rec_thread();                                                \
	int record = t != NULL

#define LP_FAM_BUSY()                                                                           \
	if (t)                                                                                \
	lp_enter(&t->busy)

#define LP_FAM_LEAVE()                                                                          \
	if (t)                                                                                \
	lp_leave(&t->busy)

static inline __attribute__((always_inline)) void lp_fam_fresh(int s, void *p)
{
	if (lp_fams[s].fresh_link && p) {
		uint64_t zero = 0;
		memcpy(p, &zero, sizeof zero);
	}
}

#define LP_FAM_DETOURS(s)                                                                      \
	static void *lp_d_malloc_##s(size_t n)                                                \
	{                                                                                     \
		LP_FAM_ENTER(s, F_MALLOC, lp_f_size_t, real);                           \
		LP_FAM_BUSY();                                                                \
		void *p = real(n);                                                            \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_MALLOC], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_new_##s(size_t n)                                                   \
	{                                                                                     \
		LP_FAM_ENTER(s, F_NEW, lp_f_size_t, real);                        \
		void *p;                                                                      \
		LP_BUSY_CALL(t, p = real(n)); /* it may throw */                              \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_NEW], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_new_array_##s(size_t n)                                             \
	{                                                                                     \
		LP_FAM_ENTER(s, F_NEW_ARRAY, lp_f_size_t, real);                        \
		void *p;                                                                      \
		LP_BUSY_CALL(t, p = real(n)); /* it may throw */                              \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_NEW_ARRAY], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_valloc_##s(size_t n)                                                \
	{                                                                                     \
		LP_FAM_ENTER(s, F_VALLOC, lp_f_size_t, real);                           \
		LP_FAM_BUSY();                                                                \
		void *p = real(n);                                                            \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_VALLOC], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_calloc_##s(size_t a, size_t b)                                      \
	{                                                                                     \
		LP_FAM_ENTER(s, F_CALLOC, lp_f_size2_t, real);                   \
		LP_FAM_BUSY();                                                                \
		void *p = real(a, b);                                                         \
		LP_FAM_LEAVE();                                                               \
		size_t n;                                                                     \
		if (__builtin_mul_overflow(a, b, &n))                                         \
			n = SIZE_MAX;                                                         \
		if (record)                                                                   \
			lp_note_alloc(lp_fams[s].fn[F_CALLOC], p, n, __builtin_frame_address(0)); \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_memalign_##s(size_t al, size_t n)                                   \
	{                                                                                     \
		LP_FAM_ENTER(s, F_MEMALIGN, lp_f_size2_t, real);                 \
		LP_FAM_BUSY();                                                                \
		void *p = real(al, n);                                                        \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_MEMALIGN], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void *lp_d_aligned_alloc_##s(size_t al, size_t n)                              \
	{                                                                                     \
		LP_FAM_ENTER(s, F_ALIGNED_ALLOC, lp_f_size2_t, real);            \
		LP_FAM_BUSY();                                                                \
		void *p = real(al, n);                                                        \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_ALIGNED_ALLOC], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static int lp_d_posix_memalign_##s(void **out, size_t al, size_t n)                   \
	{                                                                                     \
		LP_FAM_ENTER(s, F_POSIX_MEMALIGN, lp_f_pm_t, real);    \
		LP_FAM_BUSY();                                                                \
		int rc = real(out, al, n);                                                    \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			void *p = rc == 0 ? *out : NULL;                                      \
			lp_fam_fresh(s, p);                                                   \
			lp_note_alloc(lp_fams[s].fn[F_POSIX_MEMALIGN], p, n, __builtin_frame_address(0)); \
		}                                                                             \
		return rc;                                                                    \
	}                                                                                     \
	static void *lp_d_realloc_##s(void *old, size_t n)                                    \
	{                                                                                     \
		LP_FAM_ENTER(s, F_REALLOC, lp_f_realloc_t, real);                  \
		uint32_t sid = record ? lp_note_realloc_begin(old, __builtin_frame_address(0)) : 0; \
		LP_FAM_BUSY();                                                                \
		void *p = real(old, n);                                                       \
		LP_FAM_LEAVE();                                                               \
		if (record) {                                                                 \
			if (!old)                                                             \
				lp_fam_fresh(s, p);                                           \
			lp_note_realloc(old, p, n, __builtin_frame_address(0), sid);          \
		}                                                                             \
		return p;                                                                     \
	}                                                                                     \
	static void lp_d_free_##s(void *p)                                                    \
	{                                                                                     \
		LP_FAM_ENTER(s, F_FREE, lp_f_free_t, real);                              \
		if (record)                                                                   \
			lp_note_free(lp_fams[s].fn[F_FREE], p, __builtin_frame_address(0));   \
		LP_FAM_BUSY();                                                                \
		real(p);                                                                      \
		LP_FAM_LEAVE();                                                               \
	}                                                                                     \
	static void lp_d_delete_##s(void *p)                                                  \
	{                                                                                     \
		LP_FAM_ENTER(s, F_DELETE, lp_f_free_t, real);                            \
		if (record)                                                                   \
			lp_note_free(lp_fams[s].fn[F_DELETE], p, __builtin_frame_address(0)); \
		LP_FAM_BUSY();                                                                \
		real(p);                                                                      \
		LP_FAM_LEAVE();                                                               \
	}                                                                                     \
	static void lp_d_delete_array_##s(void *p)                                            \
	{                                                                                     \
		LP_FAM_ENTER(s, F_DELETE_ARRAY, lp_f_free_t, real);                      \
		if (record)                                                                   \
			lp_note_free(lp_fams[s].fn[F_DELETE_ARRAY], p, __builtin_frame_address(0)); \
		LP_FAM_BUSY();                                                                \
		real(p);                                                                      \
		LP_FAM_LEAVE();                                                               \
	}                                                                                     \
	static void lp_d_delete_sized_##s(void *p, size_t n)                                  \
	{                                                                                     \
		LP_FAM_ENTER(s, F_DELETE_SIZED, lp_f_free_sized_t, real);              \
		if (record)                                                                   \
			lp_note_free(lp_fams[s].fn[F_DELETE_SIZED], p, __builtin_frame_address(0)); \
		LP_FAM_BUSY();                                                                \
		real(p, n);                                                                   \
		LP_FAM_LEAVE();                                                               \
	}                                                                                     \
	static void lp_d_delete_array_sized_##s(void *p, size_t n)                            \
	{                                                                                     \
		LP_FAM_ENTER(s, F_DELETE_ARRAY_SIZED, lp_f_free_sized_t, real);        \
		if (record)                                                                   \
			lp_note_free(lp_fams[s].fn[F_DELETE_ARRAY_SIZED], p, __builtin_frame_address(0)); \
		LP_FAM_BUSY();                                                                \
		real(p, n);                                                                   \
		LP_FAM_LEAVE();                                                               \
	}

LP_FAM_DETOURS(0)
LP_FAM_DETOURS(1)
LP_FAM_DETOURS(2)
LP_FAM_DETOURS(3)
LP_FAM_DETOURS(4)
LP_FAM_DETOURS(5)
LP_FAM_DETOURS(6)
LP_FAM_DETOURS(7)

#define LP_FAM_TABLE(s)                                                                         \
	{                                                                                      \
		(void *)lp_d_malloc_##s, (void *)lp_d_calloc_##s, (void *)lp_d_realloc_##s,    \
		(void *)lp_d_free_##s, (void *)lp_d_memalign_##s, (void *)lp_d_posix_memalign_##s, \
		(void *)lp_d_aligned_alloc_##s, (void *)lp_d_valloc_##s, (void *)lp_d_new_##s, \
		(void *)lp_d_new_array_##s, (void *)lp_d_delete_##s, (void *)lp_d_delete_array_##s, \
		(void *)lp_d_delete_sized_##s, (void *)lp_d_delete_array_sized_##s,            \
	}

static void *const lp_detours[LP_FAM_SLOTS][F_N] = {
	LP_FAM_TABLE(0), LP_FAM_TABLE(1), LP_FAM_TABLE(2), LP_FAM_TABLE(3),
	LP_FAM_TABLE(4), LP_FAM_TABLE(5), LP_FAM_TABLE(6), LP_FAM_TABLE(7),
};


/* The near pages: the trampolines and the jumps to the detours lie
 * within a rel32 of the code they serve (the executable is far from the
 * agent). */
struct lp_near {
	uint8_t *page;
	size_t used;
};

static uint8_t *lp_near_page(uintptr_t target)
{
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		pg = 4096;
	for (int d = 1; d <= 128; d++) {
		for (int sign = -1; sign <= 1; sign += 2) {
			uintptr_t hint = (target & ~(uintptr_t)0xffff) + (uintptr_t)((intptr_t)sign * d * 0x100000);
			void *p = mmap((void *)hint, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				       -1, 0);
			if (p == MAP_FAILED)
				continue;
			intptr_t dist = (intptr_t)((uintptr_t)p - target);
			if (dist > -((intptr_t)1 << 30) && dist < ((intptr_t)1 << 30))
				return p;
			munmap(p, (size_t)pg);
		}
	}
	return NULL;
}

/*
 * lp_patch makes entry (a function of size bytes) jump to detour; its
 * original, from a trampoline in near, is *tramp. Returns 0, or an
 * LP_FAMILY_* outcome.
 */
static int lp_patch(struct lp_near *near, uint8_t *entry, size_t size, void *detour, void **tramp)
{
	if (lp_patchable(entry, size) != 0)
		return LP_FAMILY_REFUSED;
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		pg = 4096;
	size_t need = LP_TRAMP_MAX + LP_ABS_JMP_LEN * 2;
	if (!near->page || near->used + need > (size_t)pg) {
		near->page = lp_near_page((uintptr_t)entry);
		near->used = 0;
		if (!near->page)
			return LP_FAMILY_FAILED;
	} else if (mprotect(near->page, (size_t)pg, PROT_READ | PROT_WRITE) != 0) {
		return LP_FAMILY_FAILED;
	}
	uint8_t *t = near->page + near->used;
	int k, o = lp_relocate(entry, size, (uintptr_t)t, t, &k);
	/* The trampoline: the moved instructions, then a jump back; then
	 * the jump to the detour, which the entry's rel32 reaches. */
	uint8_t *back = t + (o > 0 ? o : 0);
	uint64_t ret = (uint64_t)(uintptr_t)(entry + k);
	uint8_t *stub = back + LP_ABS_JMP_LEN;
	uint64_t det = (uint64_t)(uintptr_t)detour;
	int32_t rel = 0;
	if (o > 0) {
		back[0] = 0xff;
		back[1] = 0x25;
		memset(back + 2, 0, 4);
		memcpy(back + 6, &ret, 8);
		stub[0] = 0xff;
		stub[1] = 0x25;
		memset(stub + 2, 0, 4);
		memcpy(stub + 6, &det, 8);
	}
	if (mprotect(near->page, (size_t)pg, PROT_READ | PROT_EXEC) != 0)
		return LP_FAMILY_FAILED;
	if (o <= 0 || lp_rel32((uintptr_t)entry + LP_JMP_LEN, (uintptr_t)stub, &rel) != 0)
		return LP_FAMILY_FAILED;
	near->used += (size_t)(((stub + LP_ABS_JMP_LEN) - t + 15) & ~15);
	/* The entry: jmp rel32 to the stub; the rest of the moved bytes
	 * int3 (nothing branches there: checked above). */
	uintptr_t lo = (uintptr_t)entry & ~((uintptr_t)pg - 1);
	uintptr_t hi = ((uintptr_t)entry + (uintptr_t)k + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
		return LP_FAMILY_FAILED;
	uint8_t code[LP_MOVED_MAX];
	code[0] = 0xe9;
	memcpy(code + 1, &rel, 4);
	memset(code + LP_JMP_LEN, 0xcc, (size_t)(k - LP_JMP_LEN));
	memcpy(entry, code, (size_t)k);
	mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
	*tramp = t;
	return 0;
}

/* ---- finding the entries ---- */


/*
 * The modules' exported symbols, read in memory (dynsyms.c), not with
 * dlsym: a name it does not find costs an error message the loader
 * allocates, and frees, through the program's allocator, which hands that
 * memory, pointers and all, to the program's next blocks.
 */
#define LP_DYNMODS 256
static struct lp_dynsyms lp_dynmods[LP_DYNMODS];
static int lp_ndynmods;

static int lp_dynmods_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (lp_ndynmods >= LP_DYNMODS)
		return 1;
	if (lp_dynsyms_read(info, &lp_dynmods[lp_ndynmods]) == 0)
		lp_ndynmods++;
	return 0;
}

/* lp_dynmods_read lists the modules loaded now. */
static void lp_dynmods_read(void)
{
	lp_ndynmods = 0;
	dl_iterate_phdr(lp_dynmods_cb, NULL);
}

/* lp_find_in finds name's definition in module m: 1 found (*out), 0
 * not defined there, -1 defined but not as a function's code. */
static int lp_find_in(const struct lp_dynsyms *m, const char *name, struct lp_found *out)
{
	const ElfW(Sym) *s = lp_dynsym(m, name);
	if (!s || s->st_shndx == SHN_UNDEF || s->st_value == 0)
		return 0;
	if (ELF64_ST_TYPE(s->st_info) != STT_FUNC)
		return -1; /* an IFUNC's address is its resolver's choice, not its code */
	out->addr = m->bias + (uintptr_t)s->st_value;
	out->size = s->st_size;
	out->base = m->bias;
	return 1;
}

/* lp_find_exported finds name's first exported definition (as the
 * program's calls bind), the agent's aside. */
static int lp_find_exported(const char *name, struct lp_found *out)
{
	for (int i = 0; i < lp_ndynmods; i++) {
		int rc = lp_find_in(&lp_dynmods[i], name, out);
		if (rc)
			return rc > 0;
	}
	return 0;
}

struct lp_exe_query {
	const struct lp_exe *m;
	const char *const *names;
	int n;
	struct lp_found *found;
};

static void lp_exe_symtab_one(void *arg, const char *sn, size_t room, uintptr_t value, size_t size)
{
	struct lp_exe_query *q = arg;
	for (int j = 0; j < q->n; j++) {
		size_t len = strlen(q->names[j]);
		if (q->found[j].addr || room <= len || memcmp(sn, q->names[j], len + 1) != 0)
			continue;
		uintptr_t a = q->m->bias + value;
		if (lp_exe_code(q->m, a, size)) {
			q->found[j].addr = a;
			q->found[j].size = size;
			q->found[j].base = q->m->bias;
		}
	}
}

/*
 * lp_exe_symtab looks up names[0, n) among the executable's static
 * symbols (.symtab of /proc/self/exe, the file that runs), for the
 * functions it does not export: found[i].addr stays 0 for those it does
 * not find (exesyms.c reads the file); an address must lie in the
 * executable's code.
 */
static void lp_exe_symtab(const struct lp_exe *m, const char *const *names, int n, struct lp_found *found)
{
	struct lp_exe_query q = {m, names, n, found};
	lp_exe_funcs(lp_exe_symtab_one, &q);
}

/* lp_one_thread reports whether the process has one thread now. */
static int lp_one_thread(void)
{
	char buf[1024];
	int n = lp_read_small("/proc/self/stat", buf, sizeof buf - 1);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the command may hold anything */
	if (!p)
		return 0;
	/* Field 20, num_threads: 18 fields after the command. */
	for (int field = 2; field < 20 && *p; p++)
		if (*p == ' ')
			field++;
	return atoi(p) == 1;
}

/* lp_family_record tells the collector what became of an entry. */
static void lp_family_record(struct lp_thread *t, unsigned fn, uintptr_t addr, unsigned outcome, const char *name)
{
	uint64_t w[4 + (LP_FAMILY_NAME_MAX + 1) / 8] = {0};
	size_t n = strnlen(name, LP_FAMILY_NAME_MAX);
	unsigned nw = (unsigned)(n + 8) / 8;
	w[0] = LP_HDR(LP_REC_FAMILY, 0, 4 + nw, fn);
	w[2] = addr;
	w[3] = outcome;
	memcpy(&w[4], name, n);
	lp_put(t, w, 4 + nw);
}

/* Every name that is a family's: F_MALLOC..F_VALLOC under the prefix,
 * and the C++ operators for the executable's own family. */
static int lp_fam_names(const char *prefix, int cxx, char names[F_N][LP_FAM_PREFIX_MAX + 16])
{
	int n = cxx ? F_N : F_VALLOC + 1;
	for (int f = 0; f < n; f++) {
		size_t a = strlen(prefix), b = strlen(lp_fam_fn_names[f]);
		if (a + b + 1 > LP_FAM_PREFIX_MAX + 16)
			return 0;
		memcpy(names[f], prefix, a);
		memcpy(names[f] + a, lp_fam_fn_names[f], b + 1);
	}
	return n;
}

/* lp_fam_slot takes a free slot for a family under a prefix, or one a
 * dlopen brought: -1 when all are taken. */
static int lp_fam_slot(void)
{
	for (int s = 1; s < LP_FAM_SLOTS; s++) {
		if (!lp_fams[s].live) {
			lp_fams[s].live = 1;
			return s;
		}
	}
	return -1;
}

#define LP_FAM_PREFIXES (LP_FAM_SLOTS + 8)

/* lp_fam_prefix_list lists the prefixes to look for in prefixes
 * (LP_FAM_PREFIXES of them at most): the built-in ones (*nbuiltin), then
 * those of --alloc-family, copied into user (LP_FAMILIES_MAX bytes). */
static int lp_fam_prefix_list(char *user, const char **prefixes, int *nbuiltin)
{
	memcpy(user, lp_hdr->alloc_families, LP_FAMILIES_MAX);
	user[LP_FAMILIES_MAX - 1] = 0;
	int np = 0;
	*nbuiltin = (int)(sizeof lp_fam_prefixes / sizeof lp_fam_prefixes[0]);
	for (int i = 0; i < *nbuiltin; i++)
		prefixes[np++] = lp_fam_prefixes[i];
	for (char *p = user, *q; *p && np < LP_FAM_PREFIXES; p = q) {
		q = p + strcspn(p, ",");
		if (*q)
			*q++ = 0;
		if (*p && strlen(p) < LP_FAM_PREFIX_MAX)
			prefixes[np++] = p;
	}
	return np;
}

/*
 * lp_family_patch patches the functions of one family found (found[f].addr
 * 0: absent) into slot s, skipping addresses in done[0, *ndone) (one
 * function under two names), and records each outcome.
 */
static void lp_family_patch(struct lp_thread *t, int s, const char *prefix, char names[F_N][LP_FAM_PREFIX_MAX + 16],
			    struct lp_found *found, int nf, int veto, uintptr_t *done, int *ndone, struct lp_near *near)
{
	struct lp_fam *fam = &lp_fams[s];
	size_t pl = strnlen(prefix, LP_FAM_PREFIX_MAX - 1);
	memcpy(fam->prefix, prefix, pl);
	fam->prefix[pl] = 0;
	/* An allocator whose delete is its free (tcmalloc) cannot tell
	 * them apart: record its operators as the C functions, or every
	 * delete of a new'd block would read as a mismatch. */
	int same = nf > F_DELETE && found[F_DELETE].addr && found[F_DELETE].addr == found[F_FREE].addr;
	/* All or nothing: the blocks of an allocating function left out
	 * would be freed unknown, the frees of one left out leaked. */
	for (int f = 0; f < nf && !veto; f++)
		if (found[f].addr)
			veto = lp_patchable((const uint8_t *)found[f].addr, found[f].size) ? LP_FAMILY_REFUSED : 0;
	for (int f = 0; f < nf; f++) {
		fam->fn[f] = lp_fam_wire_fn[f];
		if (same && (f == F_NEW || f == F_NEW_ARRAY))
			fam->fn[f] = LP_FN_MALLOC;
		if (same && f >= F_DELETE)
			fam->fn[f] = LP_FN_FREE;
		if (!found[f].addr)
			continue;
		int dup = 0;
		for (int i = 0; i < *ndone; i++)
			dup |= done[i] == found[f].addr;
		if (dup)
			continue;
		int outcome = veto;
		if (!veto) {
			void *tramp = NULL;
			outcome = lp_patch(near, (uint8_t *)found[f].addr, found[f].size, lp_detours[s][f], &tramp);
			if (outcome == 0) {
				__atomic_store_n(&fam->tramp[f], tramp, __ATOMIC_RELEASE);
				outcome = LP_FAMILY_TRACED;
			}
		}
		if (*ndone < LP_FAM_SLOTS * F_N)
			done[(*ndone)++] = found[f].addr;
		lp_family_record(t, fam->fn[f], found[f].addr, (unsigned)outcome, names[f]);
	}
}

/* lp_family_noslot reports the functions of a family found when every
 * slot is taken: not traced, and said so. */
static void lp_family_noslot(struct lp_thread *t, char names[F_N][LP_FAM_PREFIX_MAX + 16], const struct lp_found *found,
			     int nf)
{
	for (int f = 0; f < nf; f++)
		if (found[f].addr)
			lp_family_record(t, lp_fam_wire_fn[f], found[f].addr, LP_FAMILY_NOSLOT, names[f]);
}

static int lp_fam_started; /* lp_families_start ran */
static int lp_examined_cb(struct dl_phdr_info *info, size_t size, void *arg);
static void lp_dbg_install(void);

void lp_families_start(void)
{
	if (lp_fam_started)
		return;
	lp_fam_started = 1;
	struct lp_thread *t = lp_rec_thread();
	if (!t || !lp_hdr)
		return; /* not recording: nothing to trace them for */
	dl_iterate_phdr(lp_examined_cb, NULL);
	int saved = errno;
	lp_enter(&t->busy);
	/* No signal handler may call into an entry half written. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (lp_real_malloc && !lp_real_libc && !lp_exe_malloc)
		lp_family_record(t, LP_FN_MALLOC, (uintptr_t)lp_real_malloc, LP_FAMILY_HOOKED, "malloc");
	struct lp_exe exe;
	lp_exe_module(&exe);
	uintptr_t real_base = lp_real_base;
	char names[F_N][LP_FAM_PREFIX_MAX + 16];
	struct lp_found found[F_N];
	uintptr_t done[LP_FAM_SLOTS * F_N];
	int ndone = 0, threads = -1;
	struct lp_near near = {0};
	lp_dynmods_read();
	/* The executable's own malloc family (an allocator linked in). */
	int nf = lp_fam_names("", 1, names);
	memset(found, 0, sizeof found);
	struct lp_found x0;
	if (lp_find_exported(names[F_MALLOC], &x0) && lp_exe_code(&exe, x0.addr, x0.size)) {
		for (int f = 0; f < nf; f++) {
			struct lp_found x;
			if (lp_find_exported(names[f], &x) && lp_exe_code(&exe, x.addr, x.size))
				found[f] = x;
		}
	}
	if (found[F_MALLOC].addr && found[F_FREE].addr) {
		lp_exe_malloc = 1;
		/* Its blocks: tcmalloc's or mimalloc's, with their links? */
		static const char *const markers[] = {"tc_malloc", "mi_malloc"};
		struct lp_found mk[2];
		memset(mk, 0, sizeof mk);
		lp_exe_symtab(&exe, markers, 2, mk);
		lp_fams[0].fresh_link = mk[0].addr || mk[1].addr;
		threads = !lp_one_thread();
		lp_fams[0].live = 1;
		lp_family_patch(t, 0, "", names, found, nf, threads ? LP_FAMILY_THREADS : 0, done, &ndone, &near);
	}
	/* Families under a prefix: the built-in ones, then the user's. A
	 * family counts when its malloc and free are there: exported, or,
	 * for the user's, in the executable's static symbols (read only
	 * then: the file is opened and mapped). */
	char user[LP_FAMILIES_MAX];
	const char *prefixes[LP_FAM_PREFIXES];
	int nbuiltin, np = lp_fam_prefix_list(user, prefixes, &nbuiltin);
	for (int i = 0; i < np; i++) {
		nf = lp_fam_names(prefixes[i], 0, names);
		if (!nf)
			continue;
		memset(found, 0, sizeof found);
		int user_family = i >= nbuiltin;
		struct lp_found x;
		if (!lp_find_exported(names[F_MALLOC], &x) && !user_family)
			continue; /* the common case: no such family */
		for (int f = 0; f < nf; f++) {
			if (!lp_find_exported(names[f], &x))
				continue;
			/* The module whose malloc the hooks call: its prefixed
			 * names are the same allocator, traced already. */
			if (x.base == real_base && real_base)
				continue;
			if (lp_exe_code(&exe, x.addr, x.size) && lp_exe_malloc)
				continue; /* the executable's allocator's internals */
			found[f] = x;
		}
		if (user_family && !lp_exe_malloc && (!found[F_MALLOC].addr || !found[F_FREE].addr)) {
			const char *miss[F_N];
			int idx[F_N], nm = 0;
			for (int f = 0; f < nf; f++) {
				if (!found[f].addr) {
					idx[nm] = f;
					miss[nm++] = names[f];
				}
			}
			struct lp_found sf[F_N];
			memset(sf, 0, sizeof sf);
			lp_exe_symtab(&exe, miss, nm, sf);
			for (int j = 0; j < nm; j++)
				if (sf[j].addr)
					found[idx[j]] = sf[j];
		}
		if (!found[F_MALLOC].addr || !found[F_FREE].addr)
			continue;
		int s = lp_fam_slot();
		if (s < 0) {
			lp_family_noslot(t, names, found, nf);
			continue;
		}
		if (threads < 0)
			threads = !lp_one_thread();
		lp_family_patch(t, s, prefixes[i], names, found, nf, threads ? LP_FAMILY_THREADS : 0, done, &ndone, &near);
	}
	if (threads < 0)
		threads = !lp_one_thread();
	if (!threads)
		lp_dbg_install();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	lp_leave(&t->busy);
	errno = saved;
}

/* ==== Modules that arrive through dlopen ====
 *
 * The agent's dlopen (agent.c) notes the modules loaded before it calls
 * the real one (lp_families_dlopen_begin); after it, the modules that
 * came with the call get their families patched as at the start
 * (lp_families_dlopen_end): the standard names defined by the module
 * itself (a malloc of its own that the program reaches through dlsym, or
 * the module's own calls, bound to it by -Bsymbolic or a protected
 * symbol), and the families under a prefix that it exports. Patching
 * code is safe then even with threads: the module's code has been in no
 * thread's hands but the loading thread's, inside dlopen (its
 * constructors), which is the thread patching now. Not so for a module
 * that came while another thread's dlopen ran (it may be that one's, and
 * in use), nor for one a dlopen the agent did not follow brought (see
 * agent.c): their families are reported as not traced, when the next
 * dlopen or the exit finds them. All this is the fallback: where the
 * loader's stop for debuggers is patched (lp_dbg_hit, below), each
 * module is looked at there first, before its constructors run.
 */

static int lp_dl_active;           /* hooked dlopens running */
static unsigned long lp_dl_starts; /* hooked dlopens started */
static int lp_fam_lock;

/* lp_fam_take takes lp_fam_lock with every signal blocked (*old gets the
 * mask before): no signal handler may fork, or call into an entry half
 * written, while it is held. try: give up rather than wait, and return
 * 0 with the mask as it was. */
static int lp_fam_take(sigset_t *old, int try)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
	while (__atomic_exchange_n(&lp_fam_lock, 1, __ATOMIC_ACQUIRE)) {
		if (try) {
			pthread_sigmask(SIG_SETMASK, old, NULL);
			return 0;
		}
		sched_yield();
	}
	return 1;
}

static void lp_fam_give(const sigset_t *old)
{
	__atomic_store_n(&lp_fam_lock, 0, __ATOMIC_RELEASE);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

/* The modules looked at (their load biases): at the start, or since. */
#define LP_EXAMINED_MAX 1024
static uintptr_t lp_examined[LP_EXAMINED_MAX];
static int lp_nexamined;

static int lp_dlsnap_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_dlsnap *s = arg;
	if (s->n >= LP_DLSNAP_MAX) {
		s->overflow = 1;
		return 1;
	}
	s->bias[s->n++] = info->dlpi_addr;
	return 0;
}

/* lp_dlsnap_has reports whether snapshot s lists the module at bias. */
static int lp_dlsnap_has(const struct lp_dlsnap *s, uintptr_t bias)
{
	for (int i = 0; i < s->n; i++)
		if (s->bias[i] == bias)
			return 1;
	return 0;
}

static int lp_examined_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (lp_nexamined < LP_EXAMINED_MAX)
		lp_examined[lp_nexamined++] = info->dlpi_addr;
	return 0;
}

/* lp_examined_prune forgets the modules looked at that are not in now
 * (unloaded): the next one at the same address is another. Under
 * lp_fam_lock. */
static void lp_examined_prune(const struct lp_dlsnap *now)
{
	int k = 0;
	for (int i = 0; i < lp_nexamined; i++)
		if (lp_dlsnap_has(now, lp_examined[i]))
			lp_examined[k++] = lp_examined[i];
	lp_nexamined = k;
}

void lp_families_dlopen_begin(struct lp_dlsnap *s)
{
	s->n = 0;
	s->overflow = 0;
	s->others = __atomic_fetch_add(&lp_dl_active, 1, __ATOMIC_ACQ_REL);
	s->start = __atomic_add_fetch(&lp_dl_starts, 1, __ATOMIC_ACQ_REL);
	dl_iterate_phdr(lp_dlsnap_cb, s);
}

/* The modules not looked at yet, and whether each was loaded before the
 * dlopen being followed. Guarded by lp_fam_lock. */
#define LP_NEWMODS 128
struct lp_newmod {
	struct lp_dynsyms m;
	int before;
};
static struct lp_newmod lp_newmods[LP_NEWMODS];
static int lp_nnewmods;

/* lp_textrel reports whether module m has relocations in its code: the
 * loader, relocating it after the debugger's hook (lp_dbg_hit), could
 * write over an entry patched there. */
static int lp_textrel(const struct lp_dynsyms *m)
{
	for (const ElfW(Dyn) *d = m->dyn; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL)))
			return 1;
	return 0;
}

struct lp_newmods_q {
	const struct lp_dlsnap *s;
	int fresh; /* lp_dbg_hit's look: modules not relocated yet */
};

static int lp_newmods_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	const struct lp_newmods_q *q = arg;
	const struct lp_dlsnap *s = q->s;
	for (int i = 0; i < lp_nexamined; i++)
		if (lp_examined[i] == info->dlpi_addr)
			return 0;
	if (lp_nexamined >= LP_EXAMINED_MAX || lp_nnewmods >= LP_NEWMODS)
		return 1; /* too many to tell: none looked at */
	struct lp_newmod *n = &lp_newmods[lp_nnewmods];
	int rc = lp_dynsyms_read(info, &n->m);
	if (rc == 0 && q->fresh && lp_textrel(&n->m))
		return 0; /* looked at once relocated, after dlopen */
	lp_examined[lp_nexamined++] = info->dlpi_addr;
	if (rc != 0)
		return 0;
	n->before = s ? lp_dlsnap_has(s, info->dlpi_addr) : 1;
	lp_nnewmods++;
	return 0;
}

/* lp_module_families finds the families module m defines and patches
 * them (veto 0) or records them as not traced (veto, an LP_FAMILY_*). */
static void lp_module_families(struct lp_thread *t, const struct lp_dynsyms *m, int veto)
{
	struct lp_exe code = {m->bias, m->phdr, m->phnum};
	char names[F_N][LP_FAM_PREFIX_MAX + 16];
	struct lp_found found[F_N];
	uintptr_t done[LP_FAM_SLOTS * F_N];
	int ndone = 0, own = 0;
	struct lp_near near = {0};
	char user[LP_FAMILIES_MAX];
	const char *prefixes[LP_FAM_PREFIXES + 1];
	int nbuiltin;
	prefixes[0] = "";
	int np = 1 + lp_fam_prefix_list(user, prefixes + 1, &nbuiltin);
	for (int i = 0; i < np; i++) {
		int nf = lp_fam_names(prefixes[i], i == 0, names);
		if (!nf || (i > 0 && own))
			continue; /* a module's own malloc family: its prefixed names are its internals */
		memset(found, 0, sizeof found);
		for (int f = 0; f < nf; f++) {
			struct lp_found x;
			if (lp_find_in(m, names[f], &x) > 0 && lp_exe_code(&code, x.addr, x.size))
				found[f] = x;
			else if (f == F_MALLOC)
				break; /* the common case: no such family */
		}
		if (!found[F_MALLOC].addr || !found[F_FREE].addr)
			continue;
		own |= i == 0;
		int s = lp_fam_slot();
		if (s < 0) {
			lp_family_noslot(t, names, found, nf);
			continue;
		}
		struct lp_fam *fam = &lp_fams[s];
		memset(fam->tramp, 0, sizeof fam->tramp);
		fam->dl_base = m->bias;
		fam->fresh_link = 0;
		static const char *const markers[] = {"tc_malloc", "mi_malloc"};
		for (int k = 0; k < 2; k++) {
			struct lp_found x;
			if (lp_find_in(m, markers[k], &x) > 0)
				fam->fresh_link = 1;
		}
		lp_family_patch(t, s, prefixes[i], names, found, nf, veto, done, &ndone, &near);
		if (veto)
			fam->live = 0; /* nothing patched: the slot is free again */
	}
}

/* lp_families_new looks at the modules loaded since the last look: those
 * that came with the dlopen followed (not in s; s NULL: none) are
 * patched when alone, the others reported; fresh: s is the modules of
 * the loader's last stop (lp_dbg_hit), whose caller holds the loader's
 * lock: a fork's or another thread's holding lp_fam_lock could wait for
 * it (the modules are then left to the look after dlopen). */
static void lp_families_new(struct lp_thread *t, const struct lp_dlsnap *s, int alone, int fresh)
{
	int saved = errno;
	lp_enter(&t->busy);
	sigset_t old;
	if (lp_fam_take(&old, fresh)) {
		lp_nnewmods = 0;
		struct lp_newmods_q q = {s, fresh};
		dl_iterate_phdr(lp_newmods_cb, &q);
		for (int i = 0; i < lp_nnewmods; i++)
			lp_module_families(t, &lp_newmods[i].m,
					   lp_newmods[i].before || !alone ? LP_FAMILY_UNFOLLOWED : 0);
		lp_fam_give(&old);
	}
	lp_leave(&t->busy);
	errno = saved;
}

void lp_families_dlopen_end(const struct lp_dlsnap *s, int loaded)
{
	int alone = s->others == 0 && __atomic_load_n(&lp_dl_starts, __ATOMIC_ACQUIRE) == s->start;
	__atomic_sub_fetch(&lp_dl_active, 1, __ATOMIC_ACQ_REL);
	if (!loaded || s->overflow || !lp_fam_started)
		return;
	struct lp_thread *t = lp_rec_thread();
	if (!t || !lp_hdr)
		return;
	/* The collector learns of the modules first: the report names the
	 * allocator after its module. */
	lp_modules_refresh(t, 0);
	lp_families_new(t, s, alone, 0);
}

void lp_families_exit(struct lp_thread *t)
{
	if (!lp_fam_started || !lp_hdr)
		return;
	lp_modules_refresh(t, 0);
	lp_families_new(t, NULL, 0, 0);
}

/* lp_fams_loaded_cb marks in *loaded (bit s) the family slots whose
 * module info is. Under lp_fam_lock. */
static int lp_fams_loaded_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	unsigned *loaded = arg;
	for (int s = 1; s < LP_FAM_SLOTS; s++)
		if (lp_fams[s].dl_base == info->dlpi_addr)
			*loaded |= 1u << s;
	return 0;
}

/* lp_families_fork holds the families' lock over a fork (prepare 1),
 * for the child to have a whole slot table, and lets it go after
 * (prepare 0); the child's count of dlopens running starts again. */
void lp_families_fork(int prepare, int child)
{
	if (prepare) {
		while (__atomic_exchange_n(&lp_fam_lock, 1, __ATOMIC_ACQUIRE))
			sched_yield();
		return;
	}
	if (child)
		lp_dl_active = 0;
	__atomic_store_n(&lp_fam_lock, 0, __ATOMIC_RELEASE);
}

void lp_families_dlclose(void)
{
	if (!lp_fam_started)
		return;
	sigset_t old;
	lp_fam_take(&old, 0);
	struct lp_dlsnap now = {0};
	dl_iterate_phdr(lp_dlsnap_cb, &now);
	if (!now.overflow)
		lp_examined_prune(&now);
	/* The slots of families whose module is gone: their code with it. */
	unsigned loaded = 0;
	dl_iterate_phdr(lp_fams_loaded_cb, &loaded);
	for (int s = 1; s < LP_FAM_SLOTS; s++)
		if (lp_fams[s].live && lp_fams[s].dl_base && !(loaded >> s & 1))
			lp_fams[s].live = 0;
	lp_fam_give(&old);
}

/* ==== The unwinder, for LP_BUSY_CALL's cleanups ====
 *
 * Built with -fexceptions, the agent's cleanups (LP_BUSY_CALL) are
 * landing pads: C's personality routine and _Unwind_Resume are the
 * unwinder's. Linked to one, the agent would load it into every program;
 * these forward to the unwinder that calls them instead: the module
 * holding the personality's return address (the unwinder's phase loop).
 * libgcc_s exports its C personality, which gets the call; LLVM's
 * libunwind (libc++'s) exports the _Unwind_* accessors only, with which
 * lp_c_personality does what libgcc's does. An unwinder that exports
 * neither (one linked into the program) has the cleanup passed over.
 */

typedef int (*lp_personality_t)(int, int, uint64_t, void *, void *);
typedef void (*lp_resume_t)(void *);

struct lp_unwinder {
	uintptr_t lo, hi;             /* its module's code */
	lp_personality_t personality; /* its C personality, if exported */
	lp_resume_t resume;
	void *(*lsda)(void *);
	uintptr_t (*ip_info)(void *, int *);
	uintptr_t (*region_start)(void *);
	void (*set_gr)(void *, int, uintptr_t);
	void (*set_ip)(void *, uintptr_t);
};

#define LP_UNWINDERS 4
static struct lp_unwinder lp_unwinders[LP_UNWINDERS];
static int lp_nunwinders;
static int lp_unwinder_lock;
/* The unwinder whose personality chose this thread's landing pad. */
static __thread lp_resume_t lp_resume_next;
static __thread struct lp_unwinder lp_unwinder_spare; /* the table is full */

struct lp_unwinder_q {
	uintptr_t pc;
	struct lp_unwinder u;
	int found;
};

static int lp_unwinder_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct lp_unwinder_q *q = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	int in = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
		in |= q->pc >= a && q->pc < b;
		lo = a < lo ? a : lo;
		hi = b > hi ? b : hi;
	}
	if (!in)
		return 0;
	struct lp_dynsyms m;
	if (lp_dynsyms_read(info, &m) != 0)
		return 1;
	q->u.lo = lo;
	q->u.hi = hi;
	q->u.personality = (lp_personality_t)lp_dynsym_func(&m, "__gcc_personality_v0", NULL);
	q->u.resume = (lp_resume_t)lp_dynsym_func(&m, "_Unwind_Resume", NULL);
	q->u.lsda = (void *(*)(void *))lp_dynsym_func(&m, "_Unwind_GetLanguageSpecificData", NULL);
	q->u.ip_info = (uintptr_t(*)(void *, int *))lp_dynsym_func(&m, "_Unwind_GetIPInfo", NULL);
	q->u.region_start = (uintptr_t(*)(void *))lp_dynsym_func(&m, "_Unwind_GetRegionStart", NULL);
	q->u.set_gr = (void (*)(void *, int, uintptr_t))lp_dynsym_func(&m, "_Unwind_SetGR", NULL);
	q->u.set_ip = (void (*)(void *, uintptr_t))lp_dynsym_func(&m, "_Unwind_SetIP", NULL);
	q->found = q->u.resume &&
		   (q->u.personality || (q->u.lsda && q->u.ip_info && q->u.region_start && q->u.set_gr && q->u.set_ip));
	return 1;
}

/* lp_unwinder_at returns the unwinder whose code holds pc, or NULL. */
static const struct lp_unwinder *lp_unwinder_at(uintptr_t pc)
{
	int n = __atomic_load_n(&lp_nunwinders, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++)
		if (pc >= lp_unwinders[i].lo && pc < lp_unwinders[i].hi)
			return &lp_unwinders[i];
	struct lp_unwinder_q q = {.pc = pc};
	dl_iterate_phdr(lp_unwinder_cb, &q);
	if (!q.found)
		return NULL;
	while (__atomic_exchange_n(&lp_unwinder_lock, 1, __ATOMIC_ACQUIRE))
		sched_yield();
	n = lp_nunwinders;
	int i;
	for (i = 0; i < n; i++)
		if (lp_unwinders[i].lo == q.u.lo)
			break;
	if (i == n && n < LP_UNWINDERS) {
		lp_unwinders[n] = q.u;
		__atomic_store_n(&lp_nunwinders, n + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&lp_unwinder_lock, 0, __ATOMIC_RELEASE);
	if (i < LP_UNWINDERS)
		return &lp_unwinders[i];
	lp_unwinder_spare = q.u;
	return &lp_unwinder_spare;
}

/* lp_leb reads a LEB128 number at p (signed: sign-extended). */
static const uint8_t *lp_leb(const uint8_t *p, int sign, uint64_t *v)
{
	uint64_t r = 0;
	unsigned sh = 0;
	uint8_t b;
	do {
		b = *p++;
		if (sh < 64)
			r |= (uint64_t)(b & 0x7f) << sh;
		sh += 7;
	} while (b & 0x80);
	if (sign && sh < 64 && (b & 0x40))
		r |= ~(uint64_t)0 << sh;
	*v = r;
	return p;
}

/* lp_encoded reads a value of DWARF pointer encoding enc (DW_EH_PE_*) at
 * p into *v: NULL for an encoding a C cleanup's table does not use. */
static const uint8_t *lp_encoded(const uint8_t *p, uint8_t enc, uintptr_t *v)
{
	const uint8_t *at = p;
	uint64_t u = 0;
	uint32_t u4;
	uint16_t u2;
	switch (enc & 0x0f) {
	case 0x00: /* absptr */
	case 0x04: /* udata8 */
	case 0x0c: /* sdata8 */
		memcpy(&u, p, 8);
		p += 8;
		break;
	case 0x01: /* uleb128 */
	case 0x09: /* sleb128 */
		p = lp_leb(p, enc & 0x08, &u);
		break;
	case 0x02: /* udata2 */
	case 0x0a: /* sdata2 */
		memcpy(&u2, p, 2);
		u = enc & 0x08 ? (uint64_t)(int64_t)(int16_t)u2 : u2;
		p += 2;
		break;
	case 0x03: /* udata4 */
	case 0x0b: /* sdata4 */
		memcpy(&u4, p, 4);
		u = enc & 0x08 ? (uint64_t)(int64_t)(int32_t)u4 : u4;
		p += 4;
		break;
	default:
		return NULL;
	}
	if ((enc & 0x70) == 0x10 && u) /* pcrel */
		u += (uintptr_t)at;
	else if (enc & 0x70)
		return NULL;
	if ((enc & 0x80) && u) /* indirect */
		memcpy(&u, (const void *)(uintptr_t)u, 8);
	*v = (uintptr_t)u;
	return p;
}

#define LP_URC_FATAL_PHASE1_ERROR 3
#define LP_URC_INSTALL_CONTEXT 7
#define LP_URC_CONTINUE_UNWIND 8
#define LP_UA_CLEANUP_PHASE 2

/* lp_c_personality is C's personality routine (GCC's unwind-c.c) through
 * unwinder u's accessors: a frame's cleanup runs in the second phase. */
static int lp_c_personality(const struct lp_unwinder *u, int version, int actions, void *ue, void *ctx)
{
	if (version != 1)
		return LP_URC_FATAL_PHASE1_ERROR;
	if (!(actions & LP_UA_CLEANUP_PHASE))
		return LP_URC_CONTINUE_UNWIND;
	const uint8_t *p = u->lsda(ctx);
	if (!p)
		return LP_URC_CONTINUE_UNWIND;
	uintptr_t start = u->region_start(ctx), lpstart = start;
	uint64_t skip, len;
	uint8_t enc = *p++;
	if (enc != 0xff && !(p = lp_encoded(p, enc, &lpstart)))
		return LP_URC_CONTINUE_UNWIND;
	if (*p++ != 0xff) /* a type table's offset: none in C */
		p = lp_leb(p, 0, &skip);
	uint8_t cs = *p++;
	p = lp_leb(p, 0, &len);
	const uint8_t *end = p + len;
	int before = 0;
	uintptr_t ip = u->ip_info(ctx, &before);
	if (!before)
		ip--;
	while (p < end) {
		uintptr_t cs_start, cs_len, cs_lp;
		if (!(p = lp_encoded(p, cs, &cs_start)) || !(p = lp_encoded(p, cs, &cs_len)) ||
		    !(p = lp_encoded(p, cs, &cs_lp)))
			return LP_URC_CONTINUE_UNWIND;
		p = lp_leb(p, 0, &skip); /* its action */
		if (ip < start + cs_start)
			break; /* the table is sorted: not there */
		if (ip >= start + cs_start + cs_len)
			continue;
		if (!cs_lp)
			break;
		u->set_gr(ctx, __builtin_eh_return_data_regno(0), (uintptr_t)ue);
		u->set_gr(ctx, __builtin_eh_return_data_regno(1), 0);
		u->set_ip(ctx, lpstart + cs_lp);
		return LP_URC_INSTALL_CONTEXT;
	}
	return LP_URC_CONTINUE_UNWIND;
}

__attribute__((used, noinline)) int __gcc_personality_v0(int version, int actions, uint64_t cls, void *ue, void *ctx)
{
	const struct lp_unwinder *u = lp_unwinder_at((uintptr_t)__builtin_return_address(0));
	if (!u)
		return LP_URC_CONTINUE_UNWIND;
	lp_resume_next = u->resume;
	if (u->personality)
		return u->personality(version, actions, cls, ue, ctx);
	return lp_c_personality(u, version, actions, ue, ctx);
}

/* Reached only from a landing pad the personality above chose, on the
 * same thread, with the unwinder that called it. */
__attribute__((used, noreturn)) void _Unwind_Resume(void *ue)
{
	lp_resume_next(ue);
	__builtin_unreachable();
}

/* ==== The loader's stop for debuggers ====
 *
 * The dynamic linker calls _dl_debug_state (r_debug's r_brk, where
 * debuggers break) once a load has mapped its modules, before it
 * relocates them and runs their constructors. The agent patches that
 * empty function to stop there too (lp_dbg_hit): a module mapped since
 * the last stop has run no code yet, in any thread, so its families are
 * patched then, whichever dlopen brought it (the program's, one the
 * agent could not follow, the C library's own), and the blocks its
 * constructors allocate through them are seen. Installed only at the
 * start while the process has one thread, and only over the function
 * glibc has there (a ret, or endbr64; ret, then padding); otherwise
 * the agent's dlopen looks once dlopen returns, as before.
 */

static struct lp_dlsnap lp_dbg_prev; /* the modules at the last stop */
static int lp_dbg_on;

/* The patched entry jumps here, in place of _dl_debug_state's ret: the
 * loader's registers are kept whole, caller-saved ones included. */
__asm__(".text\n"
	".p2align 4\n"
	".globl lp_dbg_stub\n"
	".hidden lp_dbg_stub\n"
	".type lp_dbg_stub, @function\n"
	"lp_dbg_stub:\n"
	"\t.cfi_startproc\n"
	"\tpush %rax\n\tpush %rcx\n\tpush %rdx\n\tpush %rsi\n\tpush %rdi\n"
	"\tpush %r8\n\tpush %r9\n\tpush %r10\n\tpush %r11\n"
	"\t.cfi_adjust_cfa_offset 72\n"
	"\tsub $512, %rsp\n"
	"\t.cfi_adjust_cfa_offset 512\n"
	"\tfxsave64 (%rsp)\n"
	"\tcall lp_dbg_hit\n"
	"\tfxrstor64 (%rsp)\n"
	"\tadd $512, %rsp\n"
	"\t.cfi_adjust_cfa_offset -512\n"
	"\tpop %r11\n\tpop %r10\n\tpop %r9\n\tpop %r8\n"
	"\tpop %rdi\n\tpop %rsi\n\tpop %rdx\n\tpop %rcx\n\tpop %rax\n"
	"\t.cfi_adjust_cfa_offset -72\n"
	"\tret\n"
	"\t.cfi_endproc\n"
	".size lp_dbg_stub, .-lp_dbg_stub\n");
void lp_dbg_stub(void);

static void lp_dbg_snap(void)
{
	lp_dbg_prev.n = 0;
	lp_dbg_prev.overflow = 0;
	dl_iterate_phdr(lp_dlsnap_cb, &lp_dbg_prev);
}

__attribute__((used)) void lp_dbg_hit(void)
{
	/* Under the loader's lock: one stop at a time. RT_ADD: nothing
	 * mapped yet. */
	if (!__atomic_load_n(&lp_dbg_on, __ATOMIC_ACQUIRE) || _r_debug.r_state == RT_ADD)
		return;
	int saved = errno;
	struct lp_thread *t = lp_hdr ? lp_rec_thread() : NULL;
	if (t && !lp_dbg_prev.overflow) {
		lp_modules_refresh(t, 0);
		lp_families_new(t, &lp_dbg_prev, 1, 1);
	}
	lp_dbg_snap();
	/* A module unloaded: the next one at its address is another (also
	 * done after dlclose, which another dlopen may follow first). */
	sigset_t old;
	if (!lp_dbg_prev.overflow && lp_fam_take(&old, 1)) { /* as above: else pruned at the next stop */
		lp_examined_prune(&lp_dbg_prev);
		lp_fam_give(&old);
	}
	errno = saved;
}

/* lp_dbg_install patches _dl_debug_state to jump to lp_dbg_stub, through
 * an absolute jump on a page near it. */
static void lp_dbg_install(void)
{
	uint8_t *e = (uint8_t *)_r_debug.r_brk;
	if (!e)
		return;
	/* The function and the padding after it, up to the next 16 bytes:
	 * ret, or endbr64; ret, then no-operation bytes. */
	static const uint8_t endbr[] = {0xf3, 0x0f, 0x1e, 0xfa, 0xc3};
	int ok = memcmp(e, endbr, sizeof endbr) == 0;
	if (!ok && e[0] == 0xc3 && ((uintptr_t)e & 15) <= 16 - LP_JMP_LEN) {
		ok = 1;
		for (int i = 1; i < LP_JMP_LEN; i++)
			ok &= e[i] == 0x90 || e[i] == 0x66 || e[i] == 0x2e || e[i] == 0x0f || e[i] == 0x1f ||
			      e[i] == 0xcc;
	}
	if (!ok)
		return;
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		pg = 4096;
	uint8_t *page = lp_near_page((uintptr_t)e);
	if (!page)
		return;
	uint64_t stub = (uint64_t)(uintptr_t)lp_dbg_stub;
	page[0] = 0xff;
	page[1] = 0x25;
	memset(page + 2, 0, 4);
	memcpy(page + 6, &stub, 8);
	int32_t rel;
	if (mprotect(page, (size_t)pg, PROT_READ | PROT_EXEC) != 0 ||
	    lp_rel32((uintptr_t)e + LP_JMP_LEN, (uintptr_t)page, &rel) != 0) {
		munmap(page, (size_t)pg);
		return;
	}
	lp_dbg_snap();
	__atomic_store_n(&lp_dbg_on, 1, __ATOMIC_RELEASE);
	uintptr_t lo = (uintptr_t)e & ~((uintptr_t)pg - 1);
	uintptr_t hi = ((uintptr_t)e + LP_JMP_LEN + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
		lp_dbg_on = 0;
		return;
	}
	uint8_t code[LP_JMP_LEN] = {0xe9};
	memcpy(code + 1, &rel, 4);
	memcpy(e, code, LP_JMP_LEN);
	mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
}
