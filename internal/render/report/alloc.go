package report

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// Allocator is an allocator an image used other than glibc's: how its
// calls were recorded, and which of its functions were not.
type Allocator struct {
	Name   string `json:"name,omitempty"` // jemalloc, tcmalloc (gperftools), ...; "" unknown
	Module string `json:"module"`
	// How: "interposed" (the agent's hooks, as glibc's: a shared
	// library's malloc) or "entry" (its entries patched: an allocator
	// linked into the executable, or a prefixed family).
	How       string   `json:"how"`
	Functions []string `json:"functions,omitempty"` // patched
	// Untraced: functions found and not traced, with why.
	Untraced []string `json:"untraced,omitempty"`
}

// maxAllocSymbols bounds the symbol tables read to name an allocator.
const maxAllocSymbols = 64 << 20

// allocatorOf names the allocator module path holds, from what only each
// one defines, and says whether it defines malloc; "" when none is known.
// The path comes from the target: it is opened without blocking (a FIFO
// put there cannot hang the report) and only a regular ELF file is read,
// its static symbols only when the dynamic ones do not tell.
func allocatorOf(path string) (name string, malloc bool) {
	defer func() {
		if recover() != nil { // debug/elf on a file made to break it
			name, malloc = "", false
		}
	}()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return "", false
	}
	osf := os.NewFile(uintptr(fd), path)
	defer osf.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false
	}
	f, err := elf.NewFile(osf)
	if err != nil {
		return "", false
	}
	has := map[string]bool{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if t := elf.ST_TYPE(s.Info); (t == elf.STT_FUNC || t == elf.STT_GNU_IFUNC) && s.Section != elf.SHN_UNDEF {
				n, _, _ := strings.Cut(s.Name, "@")
				has[n] = true
			}
		}
	}
	if sec := f.SectionByType(elf.SHT_DYNSYM); sec != nil && sec.Size <= maxAllocSymbols {
		if syms, err := f.DynamicSymbols(); err == nil {
			add(syms)
		}
	}
	name = allocatorName(has)
	if name == "" || name == "glibc" { // tcmalloc defines __libc_malloc too
		if sec := f.Section(".symtab"); sec != nil && sec.Size <= maxAllocSymbols {
			if syms, err := f.Symbols(); err == nil {
				add(syms)
			}
		}
		name = allocatorName(has)
	}
	return name, has["malloc"]
}

// allocatorName names the allocator whose functions has holds.
func allocatorName(has map[string]bool) string {
	switch {
	case has["mallctl"] || has["je_mallctl"] || has["_rjem_mallctl"]:
		return "jemalloc"
	case has["tc_malloc"]:
		return "tcmalloc (gperftools)"
	case has["mi_malloc"]:
		return "mimalloc"
	case has["rpmalloc"]:
		return "rpmalloc"
	case has["__libc_malloc"]:
		return "glibc"
	}
	return ""
}

// Allocators returns the allocators image p used other than glibc's, as
// the agent found them (p.Families): a library whose malloc its hooks
// called, the allocators whose entries it patched.
func (r *Report) Allocators(p *heap.Process) []Allocator {
	if a, ok := r.allocCache[p]; ok {
		return a
	}
	var out []Allocator
	byMod := map[string]int{}
	for _, f := range p.Families {
		mod := "?"
		if mi := p.ModuleOf(f.Addr); mi >= 0 && int(mi) < len(p.Modules) {
			mod = p.Modules[mi].Path
		}
		i, ok := byMod[mod]
		if !ok {
			name, _ := allocatorOf(mod)
			i = len(out)
			byMod[mod] = i
			out = append(out, Allocator{Name: name, Module: mod, How: "entry"})
		}
		a := &out[i]
		switch f.Outcome {
		case event.FamilyHooked:
			a.How = "interposed"
		case event.FamilyTraced:
			a.Functions = append(a.Functions, f.Name)
		case event.FamilyRefused:
			a.Untraced = append(a.Untraced, f.Name+" (its first instructions could not be moved)")
		case event.FamilyThreads:
			a.Untraced = append(a.Untraced, f.Name+" (the program had threads at the start)")
		case event.FamilyUnfollowed:
			a.Untraced = append(a.Untraced, f.Name+" (its module came through a dlopen leakpath could not follow)")
		case event.FamilyNoSlot:
			a.Untraced = append(a.Untraced, f.Name+" (more allocator families than leakpath has room for: eight)")
		default:
			a.Untraced = append(a.Untraced, f.Name+" (its code could not be written)")
		}
	}
	if r.allocCache == nil {
		r.allocCache = map[*heap.Process][]Allocator{}
	}
	r.allocCache[p] = out
	return out
}

// allocatorLine is the text report's line of a.
func allocatorLine(a Allocator) string {
	label := filepath.Base(a.Module)
	if a.Name != "" {
		label = a.Name + " in " + label
	}
	var b strings.Builder
	b.WriteString("allocator: " + label)
	switch {
	case a.How == "interposed":
		b.WriteString(", its calls recorded as the C library's")
	case len(a.Functions) > 0:
		b.WriteString(", traced by patching the entries of " + strings.Join(a.Functions, ", "))
	}
	if len(a.Untraced) > 0 {
		b.WriteString("; NOT traced: " + strings.Join(a.Untraced, ", "))
	}
	return b.String()
}
