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
	end         uint64 // addresses in [value, end) are this symbol's: see extents
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
	maxEnd   []uint64   // maxEnd[i] = max(syms[0..i].end)
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
	t.extents()
	return t
}

// extents sets each symbol's end and t.maxEnd. A sized symbol ends at
// value+size. A zero-size one (an assembly routine without .size) ends, in a
// full .symtab, at the next higher symbol of its section or the section's
// end, as gdb and elfutils extend them: such a table names every function,
// so the code up to the next symbol is the routine's. In a .dynsym-only
// table it covers its own address only, since the local functions that may
// follow it are missing from the table.
func (t *symtab) extents() {
	secEnd := make(map[elf.SectionIndex]uint64, len(t.sections))
	for _, r := range t.sections {
		secEnd[r.idx] = r.hi
	}
	// Walking down, per section: the value of the last symbol seen and the
	// next higher value (above it), if any.
	type walk struct {
		last, above    uint64
		seen, hasAbove bool
	}
	walks := make(map[elf.SectionIndex]*walk)
	for i := len(t.syms) - 1; i >= 0; i-- {
		sy := &t.syms[i]
		w := walks[sy.section]
		if w == nil {
			w = &walk{}
			walks[sy.section] = w
		}
		if !w.seen || sy.value != w.last {
			w.above, w.hasAbove = w.last, w.seen
			w.last, w.seen = sy.value, true
		}
		switch {
		case sy.size > 0:
			sy.end = sy.value + sy.size
			if sy.end < sy.value {
				sy.end = ^uint64(0)
			}
		case !t.full:
			sy.end = sy.value + 1
		default:
			end := secEnd[sy.section]
			if w.hasAbove && w.above < end {
				end = w.above
			}
			sy.end = max(end, sy.value+1)
		}
	}
	t.maxEnd = make([]uint64, len(t.syms))
	var m uint64
	for i := range t.syms {
		m = max(m, t.syms[i].end)
		t.maxEnd[i] = m
	}
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

// maxSymbolWalk bounds how many symbols find looks at below addr for one
// whose extent covers it (past a large symbol that encloses smaller ones).
const maxSymbolWalk = 256

// find returns the symbol naming addr: among the function-like symbols of
// the section containing addr whose extent (see extents) covers addr, the
// one starting nearest below it; at equal addresses a function over a
// no-type symbol, then the smaller one, then the first in table order. It
// returns nil if no symbol covers addr: code between symbols (the local
// functions of a stripped file, named only in .symtab) is then shown as
// module+offset rather than after the nearest exported function, as gdb and
// eu-addr2line do and unlike binutils' addr2line.
func (t *symtab) find(addr uint64) *symbol {
	sec, ok := t.section(addr)
	if !ok {
		return nil
	}
	j := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].value > addr }) - 1
	var best *symbol
	for n := 0; j >= 0 && n < maxSymbolWalk && t.maxEnd[j] > addr; j, n = j-1, n+1 {
		sy := &t.syms[j]
		if best != nil && sy.value != best.value {
			break
		}
		if sy.value < sec.lo {
			break
		}
		if sy.section != sec.idx || sy.end <= addr {
			continue
		}
		if best == nil || betterFit(sy, best) {
			best = sy
		}
	}
	return best
}

// valgrindName returns the name valgrind gives the function at addr: of
// the symbols at the address find chooses that cover addr, the one
// valgrindPrefers; "" if none.
func (t *symtab) valgrindName(addr uint64) string {
	sy := t.find(addr)
	if sy == nil {
		return ""
	}
	i := sort.Search(len(t.syms), func(i int) bool { return t.syms[i].value >= sy.value })
	best := sy.name
	for ; i < len(t.syms) && t.syms[i].value == sy.value; i++ {
		c := &t.syms[i]
		if c.section != sy.section || addr >= c.end {
			continue
		}
		if valgrindPrefers(c.name, best) {
			best = c.name
		}
	}
	return best
}

// valgrindPrefers reports whether valgrind names a function a rather
// than b when both are its names (m_debuginfo's preferName): PMPI_F over
// MPI_F (MPI libraries make MPI_F a weak alias; valgrind's MPI wrappers
// want the profiling name), then the shorter name without its version,
// then, as long, the versioned one, then the first alphabetically.
func valgrindPrefers(a, b string) bool {
	if strings.HasPrefix(a, "PMPI_") && b == a[1:] {
		return true
	}
	if strings.HasPrefix(b, "PMPI_") && a == b[1:] {
		return false
	}
	al, bl := versionless(a), versionless(b)
	if al != bl {
		return al < bl
	}
	av, bv := al < len(a), bl < len(b)
	if av != bv {
		return av
	}
	return a < b
}

// versionless returns the length of a symbol name without its version.
func versionless(name string) int {
	if i := strings.IndexByte(name, '@'); i > 0 {
		return i
	}
	return len(name)
}

// betterFit reports whether nu should replace cur (both at the same address
// and covering the address looked up) as its symbol.
func betterFit(nu, cur *symbol) bool {
	if nu.isFunc != cur.isFunc {
		return nu.isFunc
	}
	return nu.span() <= cur.span()
}

// demangleName demangles C++ (Itanium) and Rust symbol names the way
// c++filt does, with parameters; other names are returned unchanged.
func demangleName(name string) string {
	if !strings.HasPrefix(name, "_Z") && !strings.HasPrefix(name, "_R") {
		return name
	}
	return demangle.Filter(name)
}
