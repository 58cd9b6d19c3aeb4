package symbolize

import (
	"debug/elf"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// symbol is one function-like ELF symbol.
type symbol struct {
	value, size uint64
	name        string
	file        string // source file from the preceding STT_FILE symbol, as binutils assigns it
	dem         string // demangled name, valid when demDone
	section     elf.SectionIndex
	isFunc      bool // STT_FUNC or STT_GNU_IFUNC, preferred over STT_NOTYPE
	demDone     bool
}

// span returns the size used to compare candidates; a zero size counts as 1,
// as in binutils.
func (sy *symbol) span() uint64 {
	if sy.size == 0 {
		return 1
	}
	return sy.size
}

// demangled returns the demangled name, computing it once.
func (sy *symbol) demangled() string {
	if !sy.demDone {
		sy.dem = demangleName(sy.name)
		sy.demDone = true
	}
	return sy.dem
}

// secRange is the address range of an allocated section.
type secRange struct {
	lo, hi uint64
	idx    elf.SectionIndex
}

// symtab is a sorted ELF symbol table for name lookups by address.
type symtab struct {
	syms     []symbol   // sorted by value, stable in table order
	sections []secRange // allocated, non-TLS sections sorted by lo
	full     bool       // read from .symtab (not only .dynsym)
	vtables  []Vtable   // _ZTV objects, sorted by Lo
}

// readSymtab reads f's .symtab, or .dynsym when there is none. Errors leave
// an empty table: names are then simply unknown.
func readSymtab(f *elf.File) *symtab {
	t := &symtab{}
	raw, err := f.Symbols()
	if err == nil && len(raw) > 0 {
		t.full = true
	} else {
		raw, _ = f.DynamicSymbols()
	}
	// binutils names the source file of a symbol after the last STT_FILE
	// symbol before it, but gives global symbols that follow a second run
	// of file symbols (the linker's global section) no file.
	const (
		nothingSeen = iota
		symbolSeen
		fileAfterSymbolSeen
	)
	state, file := nothingSeen, ""
	for _, s := range raw {
		typ := elf.ST_TYPE(s.Info)
		if typ == elf.STT_FILE {
			file = s.Name
			if state == symbolSeen {
				state = fileAfterSymbolSeen
			}
			continue
		}
		if state == nothingSeen {
			state = symbolSeen
		}
		if typ == elf.STT_OBJECT && strings.HasPrefix(s.Name, "_ZTV") && s.Size > 0 && s.Section != elf.SHN_UNDEF {
			if class, ok := strings.CutPrefix(demangleName(s.Name), "vtable for "); ok {
				t.vtables = append(t.vtables, Vtable{Lo: s.Value, Hi: s.Value + s.Size, Class: class})
			}
			continue
		}
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC && typ != elf.STT_NOTYPE {
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || s.Name == "" {
			continue
		}
		// binutils ignores hidden local zero-size NOTYPE symbols (annobin
		// markers); so do we.
		if typ == elf.STT_NOTYPE && s.Size == 0 && elf.ST_BIND(s.Info) == elf.STB_LOCAL &&
			elf.ST_VISIBILITY(s.Other) == elf.STV_HIDDEN {
			continue
		}
		t.syms = append(t.syms, symbol{
			value:   s.Value,
			size:    s.Size,
			name:    s.Name,
			file:    symFile(file, s, state == fileAfterSymbolSeen),
			section: s.Section,
			isFunc:  typ != elf.STT_NOTYPE,
		})
	}
	sort.SliceStable(t.syms, func(i, j int) bool { return t.syms[i].value < t.syms[j].value })
	sort.Slice(t.vtables, func(i, j int) bool { return t.vtables[i].Lo < t.vtables[j].Lo })
	for i, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC == 0 || sec.Flags&elf.SHF_TLS != 0 || sec.Size == 0 {
			continue
		}
		if sec.Addr+sec.Size < sec.Addr {
			continue
		}
		t.sections = append(t.sections, secRange{sec.Addr, sec.Addr + sec.Size, elf.SectionIndex(i)})
	}
	sort.Slice(t.sections, func(i, j int) bool { return t.sections[i].lo < t.sections[j].lo })
	return t
}

// symFile returns the file binutils attributes to s.
func symFile(file string, s elf.Symbol, afterGlobalFiles bool) string {
	if elf.ST_BIND(s.Info) == elf.STB_LOCAL || !afterGlobalFiles {
		return file
	}
	return ""
}

// section returns the allocated section containing addr.
func (t *symtab) section(addr uint64) (secRange, bool) {
	i := sort.Search(len(t.sections), func(i int) bool { return t.sections[i].lo > addr }) - 1
	if i >= 0 && addr < t.sections[i].hi {
		return t.sections[i], true
	}
	return secRange{}, false
}

// find returns the symbol naming addr the way binutils' elf_find_function
// chooses it: among function-like symbols of the section containing addr, the
// nearest one at or below addr (even if addr is past its size); at equal
// addresses one that covers addr, then a function over a no-type symbol, then
// the smaller one, then the first in table order. It returns nil if none.
func (t *symtab) find(addr uint64) *symbol {
	sec, ok := t.section(addr)
	if !ok {
		return nil
	}
	j := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].value > addr }) - 1
	for j >= 0 && t.syms[j].value >= sec.lo && t.syms[j].section != sec.idx {
		j--
	}
	if j < 0 || t.syms[j].value < sec.lo {
		return nil
	}
	v := t.syms[j].value
	k := j
	for k > 0 && t.syms[k-1].value == v {
		k--
	}
	var best *symbol
	for i := k; i <= j; i++ {
		sy := &t.syms[i]
		if sy.section != sec.idx {
			continue
		}
		if best == nil || betterFit(sy, best, addr) {
			best = sy
		}
	}
	return best
}

// valgrindName returns the name valgrind gives the function at addr: of
// the symbols at the address find chooses that cover addr, the shortest
// name (a version suffix "@..." not counted), then the first
// alphabetically (m_debuginfo/storage.c's preferName); "" if none.
func (t *symtab) valgrindName(addr uint64) string {
	sy := t.find(addr)
	if sy == nil || addr >= sy.value+sy.span() {
		return ""
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].value >= sy.value })
	best := sy.name
	for ; i < len(t.syms) && t.syms[i].value == sy.value; i++ {
		c := &t.syms[i]
		if c.section != sy.section || addr >= c.value+c.span() {
			continue
		}
		cl, bl := versionless(c.name), versionless(best)
		if cl < bl || cl == bl && c.name < best {
			best = c.name
		}
	}
	return best
}

// versionless returns the length of a symbol name without its version.
func versionless(name string) int {
	if i := strings.IndexByte(name, '@'); i > 0 {
		return i
	}
	return len(name)
}

// betterFit reports whether nu should replace cur (both at the same address)
// as the symbol for addr.
func betterFit(nu, cur *symbol, addr uint64) bool {
	if cur.value+cur.span() <= addr {
		return nu.span() > cur.span()
	}
	if nu.value+nu.span() <= addr {
		return false
	}
	if nu.isFunc != cur.isFunc {
		return nu.isFunc
	}
	return nu.span() < cur.span()
}

// demangleName demangles C++ (Itanium) and Rust symbol names the way
// c++filt does, with parameters; other names are returned unchanged.
func demangleName(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	return demangle.Filter(name)
}
