/*
 * dynsyms.h - the loaded modules' dynamic symbol tables (dynsyms.c), read
 * in memory for attach.c, families.c and lsan.c.
 */
#ifndef LP_DYNSYMS_H
#define LP_DYNSYMS_H

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

/* One module's dynamic symbol table. */
struct lp_dynsyms {
	uintptr_t bias;
	const ElfW(Phdr) *phdr; /* its program headers (in memory) */
	int phnum;
	const ElfW(Dyn) *dyn;
	const ElfW(Sym) *sym;
	const char *str;
	size_t strsz;
	const uint32_t *gnu, *sysv; /* its hash tables: GNU's, or else SysV's */
	const ElfW(Half) *versym;
};

/* lp_dynsyms_read reads module info's table into *d: 0, or -1 when it has
 * none to read (no dynamic section, no symbols or no hash table), or it is
 * the agent (whose definitions are its hooks) or the vDSO. */
LP_HIDDEN int lp_dynsyms_read(const struct dl_phdr_info *info, struct lp_dynsyms *d);

/* lp_dynsym returns the symbol named name in d's table as the loader binds
 * it by name (a hidden version is not), defined or not (an executable's
 * undefined function with a value is its canonical PLT entry), or NULL. */
LP_HIDDEN const ElfW(Sym) *lp_dynsym(const struct lp_dynsyms *d, const char *name);

/* lp_dynsym_func returns the address of name's definition in d as a
 * function's code, or NULL (not defined there, or an IFUNC, whose
 * address is its resolver's). */
LP_HIDDEN void *lp_dynsym_func(const struct lp_dynsyms *d, const char *name, size_t *size);

/* lp_dyn_ptr turns a d_ptr of d's dynamic section into an address. */
LP_HIDDEN uintptr_t lp_dyn_ptr(const struct lp_dynsyms *d, uintptr_t v);

/* The executable's module: the first dl_iterate_phdr reports. */
struct lp_exe {
	uintptr_t bias;
	const ElfW(Phdr) *phdr; /* NULL: not known */
	int phnum;
};
LP_HIDDEN void lp_exe_module(struct lp_exe *m);

/* lp_exe_code reports whether [a, a+n) lies in an executable segment of
 * module m. */
LP_HIDDEN int lp_exe_code(const struct lp_exe *m, uintptr_t a, size_t n);

#endif
