package symbolize

import (
	"path/filepath"
	"strings"
)

// libcMallocFuncs are glibc's allocator entry points and internals.
var libcMallocFuncs = map[string]bool{
	"malloc": true, "calloc": true, "realloc": true, "reallocarray": true, "free": true,
	"cfree": true, "memalign": true, "posix_memalign": true, "aligned_alloc": true,
	"valloc": true, "pvalloc": true, "malloc_usable_size": true,
	"__libc_malloc": true, "__libc_calloc": true, "__libc_realloc": true,
	"__libc_reallocarray": true, "__libc_free": true, "__libc_memalign": true,
	"__libc_valloc": true, "__libc_pvalloc": true, "__libc_alloc_buffer_allocate": true,
	"__posix_memalign": true, "_mid_memalign": true, "__malloc_usable_size": true,
	"malloc_consolidate": true, "sysmalloc": true, "sysmalloc_mmap": true, "sysmalloc_mmap_fallback": true,
	"systrim": true, "munmap_chunk": true, "mremap_chunk": true,
	"ptmalloc_init": true, "malloc_hook_ini": true, "realloc_hook_ini": true, "memalign_hook_ini": true,
	"tcache_init": true, "tcache_get": true, "tcache_put": true, "tcache_thread_shutdown": true,
	"arena_get2": true, "arena_get_retry": true, "get_free_list": true, "reused_arena": true,
	"_int_new_arena": true, "new_heap": true, "alloc_new_heap": true, "grow_heap": true, "shrink_heap": true,
	"heap_trim": true, "alloc_perturb": true, "free_perturb": true, "unlink_chunk": true,
	"malloc_printerr": true, "__malloc_arena_thread_freeres": true,
}

// libcMallocFiles are glibc source files whose code is the allocator (for
// frames inlined from them).
var libcMallocFiles = map[string]bool{"malloc.c": true, "arena.c": true, "hooks.c": true, "morecore.c": true}

// IsAllocatorFrame reports whether frame f, symbolized in the module at
// modulePath, is the allocator itself and must not be shown at the top of a
// leak stack. Those are:
//   - C++ operator new, new[], delete and delete[], any overload, in any
//     module (matched on the demangled name, or the mangled _Znw/_Zna/_Zdl/_Zda
//     prefix if demangling failed);
//   - glibc's allocator functions and internals (malloc, calloc, realloc, free,
//     memalign family, __libc_malloc, _int_malloc, tcache_*, ...) and any
//     frame whose file is glibc's malloc.c/arena.c, when the module's base name
//     starts with "libc.so" or "libc-";
//   - every frame of a module whose base name starts with "libleakpath"
//     (the leakpath agent);
//   - the pool calls of leakpath.h (leakpath_pool_*), inlined into the
//     program's pool.
//
// A frame with no function name is an allocator frame only by its module.
func IsAllocatorFrame(f Frame, modulePath string) bool {
	base := filepath.Base(modulePath)
	if strings.HasPrefix(base, "libleakpath") {
		return true
	}
	fn := f.Function
	if fn == "" {
		return false
	}
	if isOperatorNewDelete(fn) {
		return true
	}
	if strings.HasPrefix(fn, "leakpath_pool_") && filepath.Base(f.File) == "leakpath.h" {
		return true
	}
	if strings.HasPrefix(base, "libc.so") || strings.HasPrefix(base, "libc-") {
		if libcMallocFuncs[fn] || strings.HasPrefix(fn, "_int_") {
			return true
		}
		if f.File != "" && libcMallocFiles[filepath.Base(f.File)] {
			return true
		}
	}
	return false
}

// isOperatorNewDelete reports whether fn names a global operator new, new[],
// delete or delete[].
func isOperatorNewDelete(fn string) bool {
	fn = strings.TrimPrefix(fn, "::")
	for _, op := range [...]string{"operator new", "operator delete"} {
		if rest, ok := strings.CutPrefix(fn, op); ok {
			return rest == "" || rest[0] == '(' || strings.HasPrefix(rest, "[]")
		}
	}
	for _, p := range [...]string{"_Znw", "_Zna", "_Zdl", "_Zda"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}
