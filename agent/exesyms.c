/*
 * exesyms.c - the executable's static symbol table (.symtab), for the
 * functions it defines without exporting them: LeakSanitizer's hooks
 * (lsan.c) and an allocator linked into the executable (families.c).
 */
#include "agent.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/*
 * lp_exe_funcs calls each(arg, name, room, value, size) for every defined
 * function of the executable's .symtab, read from /proc/self/exe (the
 * very file that runs): name has room bytes before its table's end (not
 * always its terminator: the caller compares within room), value is the
 * symbol's link-time address. Every offset and count read from the file
 * is checked against its size.
 */
LP_HIDDEN void lp_exe_funcs(void (*each)(void *arg, const char *name, size_t room, uintptr_t value, size_t size),
			    void *arg)
{
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(ElfW(Ehdr)) || st.st_size > ((off_t)1 << 40)) {
		close(fd);
		return;
	}
	size_t size = (size_t)st.st_size;
	const unsigned char *f = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)f;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(ElfW(Shdr)) || eh->e_shoff > size ||
	    (size - eh->e_shoff) / sizeof(ElfW(Shdr)) < eh->e_shnum)
		goto out;
	const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(f + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum || sh[i].sh_entsize != sizeof(ElfW(Sym)))
			continue;
		const ElfW(Shdr) *ss = &sh[sh[i].sh_link];
		if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset || ss->sh_offset > size ||
		    ss->sh_size > size - ss->sh_offset)
			continue;
		const ElfW(Sym) *sym = (const ElfW(Sym) *)(f + sh[i].sh_offset);
		const char *str = (const char *)(f + ss->sh_offset);
		size_t nsym = sh[i].sh_size / sizeof(ElfW(Sym));
		for (size_t k = 0; k < nsym; k++) {
			const ElfW(Sym) *s = &sym[k];
			if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF || s->st_value == 0 ||
			    s->st_name >= ss->sh_size)
				continue;
			each(arg, str + s->st_name, ss->sh_size - s->st_name, (uintptr_t)s->st_value, s->st_size);
		}
	}
out:
	munmap((void *)f, size);
}
