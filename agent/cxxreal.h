/*
 * cxxreal.h - the C++ runtime behind the agent's operator new and delete
 * hooks and __cxa_allocate_exception when the program's global scope has
 * none (cxxreal.c).
 */
#ifndef LP_CXXREAL_H
#define LP_CXXREAL_H

#include <stddef.h>

/* The C++ runtime's functions the agent defines, by mangled name. */
#define LP_CXX_NAMES(X)                                                                        \
	X(_Znwm)                                                                               \
	X(_Znam)                                                                               \
	X(_ZnwmSt11align_val_t)                                                                \
	X(_ZnamSt11align_val_t)                                                                \
	X(_ZdlPv)                                                                              \
	X(_ZdaPv)                                                                              \
	X(_ZdlPvm)                                                                             \
	X(_ZdaPvm)                                                                             \
	X(_ZdlPvRKSt9nothrow_t)                                                                \
	X(_ZdaPvRKSt9nothrow_t)                                                                \
	X(_ZdlPvSt11align_val_t)                                                               \
	X(_ZdaPvSt11align_val_t)                                                               \
	X(_ZdlPvmSt11align_val_t)                                                              \
	X(_ZdaPvmSt11align_val_t)                                                              \
	X(_ZdlPvSt11align_val_tRKSt9nothrow_t)                                                 \
	X(_ZdaPvSt11align_val_tRKSt9nothrow_t)                                                 \
	X(__cxa_allocate_exception)                                                            \
	X(_ZSt15get_new_handlerv)                                                              \
	X(_ZSt17__throw_bad_allocv)

#define LP_CXX_ENUM(n) LP_CXX_##n,
enum lp_cxx_name { LP_CXX_NAMES(LP_CXX_ENUM) LP_CXX_N };
#undef LP_CXX_ENUM

LP_HIDDEN extern const char *const lp_cxx_names[LP_CXX_N];

/* lp_cxx_global reports whether a module loaded with the program, after
 * the agent, defines name k: dlsym(RTLD_NEXT) finds it, and fails (and
 * leaves an error for the program's dlerror) when none does. */
LP_HIDDEN int lp_cxx_global(enum lp_cxx_name k);

/* lp_cxx_local is name k's definition for a call from caller when the
 * global scope has none: the one the caller's own module and its
 * dependencies have (those of a C++ plugin dlopen'ed RTLD_LOCAL with its
 * runtime), else the first loaded module's that defines it; NULL if no
 * loaded module but the agent does. *rt (if rt) says whether that module
 * is a C++ runtime's (libstdc++, libc++, libc++abi); own (if own) gets
 * the same caller's std::get_new_handler and std::__throw_bad_alloc. A
 * caller inside the agent (a runtime's operator new[] that tail-calls
 * operator new, called by a hook) stands for the thread's last caller
 * from outside. Never dlsym, never malloc. */
LP_HIDDEN void *lp_cxx_local(enum lp_cxx_name k, const void *caller, int *rt, void *own[2]);

/* lp_cxx_runtime_file reports whether the module at path is a C++
 * runtime's library (libstdc++, libc++, libc++abi), whose operator new is
 * malloc's loop with its new-handler, and delete free. */
LP_HIDDEN int lp_cxx_runtime_file(const char *path);

/* lp_cxx_forget drops what lp_cxx_local found: a module was unloaded, and
 * another may come at its addresses. */
LP_HIDDEN void lp_cxx_forget(void);

#endif
