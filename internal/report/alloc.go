package report

import (
	"debug/elf"
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/wire"
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
const maxAllocSymbols = 256 << 20

// allocatorOf names the allocator module path holds, from what only each
// one defines, and says whether it defines malloc; "" when none is known.
func allocatorOf(path string) (name string, malloc bool) {
	f, err := elf.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	has := map[string]bool{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			if t := elf.ST_TYPE(s.Info); (t == elf.STT_FUNC || t == elf.STT_GNU_IFUNC) && s.Section != elf.SHN_UNDEF {
				n, _, _ := strings.Cut(s.Name, "@")
				has[n] = true
			}
		}
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		add(syms)
	}
	if sec := f.Section(".symtab"); sec != nil && sec.Size <= maxAllocSymbols {
		if syms, err := f.Symbols(); err == nil {
			add(syms)
		}
	}
	switch {
	case has["mallctl"] || has["je_mallctl"] || has["_rjem_mallctl"]:
		name = "jemalloc"
	case has["tc_malloc"]:
		name = "tcmalloc (gperftools)"
	case has["mi_malloc"]:
		name = "mimalloc"
	case has["rpmalloc"]:
		name = "rpmalloc"
	case has["__libc_malloc"]:
		name = "glibc"
	}
	return name, has["malloc"]
}

// maxAllocModules bounds the modules read for the one whose malloc the
// program's calls bind to.
const maxAllocModules = 64

// Allocators returns the allocators image p used other than glibc's:
// those the agent patched (p.Families), or the shared library before
// the C library whose malloc the hooks called.
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
		case wire.FamilyTraced:
			a.Functions = append(a.Functions, f.Name)
		case wire.FamilyRefused:
			a.Untraced = append(a.Untraced, f.Name+" (its first instructions could not be moved)")
		case wire.FamilyThreads:
			a.Untraced = append(a.Untraced, f.Name+" (the program had threads at the start)")
		default:
			a.Untraced = append(a.Untraced, f.Name+" (its code could not be written)")
		}
	}
	if len(p.Families) == 0 || len(out) > 0 && len(out[0].Functions) == 0 {
		// The modules in load order, the executable and the agent aside:
		// the first that defines malloc has the program's calls.
		for i, m := range p.Modules {
			if i == 0 || i > maxAllocModules || strings.HasPrefix(filepath.Base(m.Path), "libleakpath") || !strings.HasPrefix(m.Path, "/") {
				continue
			}
			name, malloc := allocatorOf(m.Path)
			if !malloc {
				continue
			}
			if name != "glibc" {
				out = append(out, Allocator{Name: name, Module: m.Path, How: "interposed"})
			}
			break
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
