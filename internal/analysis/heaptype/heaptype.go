// Package heaptype gives the live blocks of a stopped process their
// types, from the best evidence there is, and says which:
//
//   - a vtable pointer in the block's first word (a _ZTV symbol of a
//     loaded module, or, where no symbol names it, the class's RTTI
//     read from the process): the object's dynamic C++ class, exact;
//   - the DWARF type of the pointer that points at the block's start: a
//     global variable's (or one of its fields'), then, walking the
//     reference graph, the pointer fields of blocks already typed, with
//     their DWARF layouts;
//   - the allocation site's type, when the caller knows it (SiteType).
//
// Blocks with a DWARF layout keep only the edges of their pointer fields
// in the reference graph; from it come the paths to root (named by the
// global and the fields they run through) and the retained sizes.
package heaptype

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/leakpath/leakpath/internal/sys/ptrace"

	"github.com/leakpath/leakpath/internal/analysis/refgraph"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
)

// Evidence is what typed a block.
type Evidence uint8

// The evidence, in the numbering where it has one.
const (
	Unknown   Evidence = iota
	AllocSite          // the call site's DW_AT_LLVM_alloc_type
	Vtable             // the vtable pointer in the first word
	Ctor               // the constructor called on operator new's result
	Field              // the DWARF type of the pointer to it
	NumEvidence
)

// SiteFrames is what Analyze asks of a block's allocation site last,
// for the blocks nothing else typed: the type its inlined frames name
// (a standard allocator's allocate of T, std::function's manager of F;
// see AllocatedType). The blocks it types are typed by AllocSite.
const SiteFrames Evidence = 0xff

var evidenceNames = [...]string{"unknown", "alloc-site", "vtable", "constructor", "field"}

func (e Evidence) String() string {
	if int(e) < len(evidenceNames) {
		return evidenceNames[e]
	}
	return fmt.Sprintf("evidence(%d)", uint8(e))
}

// Module is a module loaded in the process: where, and its types.
type Module struct {
	Path    string
	BuildID []byte // as the process loaded it
	Bias    uint64 // runtime address = Bias + ELF virtual address
	Lo, Hi  uint64 // runtime range of its segments
	Types   *dwarftypes.Module
}

// TypeInfo is a type of the result.
type TypeInfo struct {
	Name string // qualified
	File string // where it is defined ("" unknown)
	Line int
	Size uint64 // one value's size (0 unknown)
}

// SiteType is a type the caller knows for block i (from its allocation
// site): a type of module Mod, or when Mod < 0 the class Name without a
// layout, with evidence Ev (AllocSite or Ctor).
type SiteType struct {
	Mod  int
	Type dwarftypes.ID
	Name string
	Ev   Evidence
}

// Result is the types of the blocks of a graph, and what the graph says
// about who holds them.
type Result struct {
	Types    []TypeInfo
	Type     []int32 // per block: index in Types, -1 unknown
	Evidence []Evidence
	Paths    *refgraph.Paths
	Retained []uint64
	// Typed counts the blocks and bytes each evidence typed.
	Blocks, Bytes [NumEvidence]uint64

	g      *refgraph.Graph
	mods   []Module
	layout []layout // per block
}

// layout is a block's DWARF type: module and type, or mod -1.
type layout struct {
	mod int32
	tid dwarftypes.ID
}

type analyzer struct {
	*Result
	byName  map[string]int32
	classes map[string]layout // vtable class → its DWARF layout
	queue   []int32
	mem     refgraph.Memory   // nil: no RTTI read
	rtti    map[uint64]string // vtable address → class from RTTI ("" none)
}

// Analyze types g's blocks with mods (sorted by Lo, not overlapping),
// drops from g the edges typed blocks' layouts say are not pointers, and
// finds paths to root and retained sizes. site, if not nil, gives the
// type block i's allocation site says by evidence ev (AllocSite or
// Ctor), when it says one.
func Analyze(g *refgraph.Graph, mods []Module, mem refgraph.Memory, site func(i int32, ev Evidence) (SiteType, bool)) *Result {
	n := len(g.Blocks)
	a := &analyzer{Result: &Result{Type: make([]int32, n), Evidence: make([]Evidence, n),
		g: g, mods: mods, layout: make([]layout, n)},
		byName: map[string]int32{}, classes: map[string]layout{}, mem: mem, rtti: map[uint64]string{}}
	for i := range a.Type {
		a.Type[i] = -1
		a.layout[i].mod = -1
	}
	// The evidence in order: the call site's type, the vtable, the
	// constructor (asked only of the blocks still untyped: it reads
	// code), then the fields.
	if site != nil {
		for i := range n {
			if st, ok := site(int32(i), AllocSite); ok && st.Mod >= 0 && st.Type != dwarftypes.None {
				a.set(int32(i), layout{int32(st.Mod), st.Type}, "", AllocSite)
			}
		}
	}
	a.vtables()
	if site != nil {
		for i := range n {
			if a.Type[i] >= 0 {
				continue
			}
			st, ok := site(int32(i), Ctor)
			switch {
			case !ok:
			case st.Mod >= 0 && st.Type != dwarftypes.None:
				a.set(int32(i), layout{int32(st.Mod), st.Type}, "", Ctor)
			default:
				a.set(int32(i), a.classLayout(st.Name, 0), st.Name, Ctor)
			}
		}
	}
	tiers := a.globals()
	a.drain()
	if site != nil {
		for i := range n {
			if a.Type[i] >= 0 {
				continue
			}
			if st, ok := site(int32(i), SiteFrames); ok && st.Mod >= 0 && st.Type != dwarftypes.None {
				a.set(int32(i), layout{int32(st.Mod), st.Type}, "", AllocSite)
			}
		}
		a.drain()
	}
	g.Keep(a.keep)
	a.Paths = g.ShortestPaths(tiers...)
	a.Retained = g.Retained(g.Dominators())
	for i, t := range a.Type {
		e := a.Evidence[i]
		if t < 0 {
			e = Unknown
		}
		a.Blocks[e]++
		a.Bytes[e] += g.Blocks[i].Size
	}
	return a.Result
}

// drain types the blocks the typed blocks in the queue point at.
func (a *analyzer) drain() {
	for len(a.queue) > 0 {
		i := a.queue[0]
		a.queue = a.queue[1:]
		a.propagate(i)
	}
}

// set types block i (if not typed yet) as l, or as the named class
// without a layout when l.mod < 0.
func (a *analyzer) set(i int32, l layout, name string, ev Evidence) {
	if a.Type[i] >= 0 {
		return
	}
	info := TypeInfo{Name: name}
	if l.mod >= 0 {
		t := a.mods[l.mod].Types.Type(l.tid)
		if ev == Field && dwarftypes.IsNodeBase(t.Name) {
			// A container's node, of a type the pointer does not say
			// (the container's layout would have): unknown, not its base.
			return
		}
		if ev == Field && t.Size != a.g.Blocks[i].Size && dwarftypes.IsNode(t.Name) {
			// A node's links also point at the container's own head
			// node (a list's is the list's first word): a block of
			// another size is not a node.
			return
		}
		info = TypeInfo{Name: t.Name, File: t.File, Line: t.Line, Size: t.Size}
	}
	k, ok := a.byName[info.Name]
	if !ok {
		k = int32(len(a.Types))
		a.byName[info.Name] = k
		a.Types = append(a.Types, info)
	} else if a.Types[k].File == "" && info.File != "" {
		a.Types[k] = info
	}
	a.Type[i], a.Evidence[i], a.layout[i] = k, ev, l
	if l.mod >= 0 && len(a.mods[l.mod].Types.Fields(l.tid)) > 0 {
		a.queue = append(a.queue, i)
	}
}

// module returns the module holding runtime address v, or -1.
func (a *analyzer) module(v uint64) int {
	k := sort.Search(len(a.mods), func(k int) bool { return a.mods[k].Hi > v })
	if k < len(a.mods) && v >= a.mods[k].Lo {
		return k
	}
	return -1
}

// vtables types the blocks whose first word points into a vtable.
func (a *analyzer) vtables() {
	for i, v := range a.g.First {
		if v == 0 || a.Type[i] >= 0 {
			continue
		}
		m := a.module(v)
		if m < 0 || a.mods[m].Types == nil {
			continue
		}
		class, ok := a.mods[m].Types.Vtable(v - a.mods[m].Bias)
		if !ok {
			if class = a.rttiClass(v); class == "" {
				continue
			}
		}
		a.set(int32(i), a.classLayout(class, m), class, Vtable)
	}
}

// rttiClass returns the class whose vtable v is (a vtable no symbol
// names: not exported, or a stripped module) from its RTTI: the word
// before the address point is the class's type_info, whose own vtable is
// one of the C++ runtime's __cxxabiv1::*class_type_info (checked by its
// symbol), and whose second word its mangled name.
func (a *analyzer) rttiClass(v uint64) string {
	if a.mem == nil || v < 16 {
		return ""
	}
	if c, ok := a.rtti[v]; ok {
		return c
	}
	a.rtti[v] = ""
	word := func(at uint64) (uint64, bool) {
		var b [8]byte
		rs := []ptrace.Range{{Addr: at, Buf: b[:]}}
		a.mem.ReadRanges(rs)
		return binary.LittleEndian.Uint64(b[:]), rs[0].N == 8
	}
	ti, ok := word(v - 8)
	if !ok || a.module(ti) < 0 {
		return ""
	}
	tiv, ok := word(ti)
	m := a.module(tiv)
	if !ok || m < 0 || a.mods[m].Types == nil {
		return ""
	}
	kind, ok := a.mods[m].Types.Vtable(tiv - a.mods[m].Bias)
	if !ok || !strings.HasPrefix(kind, "__cxxabiv1::") || !strings.HasSuffix(kind, "class_type_info") {
		return ""
	}
	np, ok := word(ti + 8)
	if !ok || a.module(np) < 0 {
		return ""
	}
	var buf [maxRTTIName]byte
	rs := []ptrace.Range{{Addr: np, Buf: buf[:]}}
	a.mem.ReadRanges(rs)
	name, _, found := strings.Cut(string(buf[:rs[0].N]), "\x00")
	if !found || name == "" {
		return ""
	}
	class, ok := strings.CutPrefix(demangle.Filter("_ZTS"+name), "typeinfo name for ")
	if !ok {
		return ""
	}
	a.rtti[v] = class
	return class
}

// CtorClass returns the class whose constructor function fn is (a
// demangled name: "shop::Widget::Widget(int)" gives "shop::Widget").
func CtorClass(fn string) (string, bool) {
	depth, parts, start := 0, []string(nil), 0
	for i := 0; i < len(fn); i++ {
		switch fn[i] {
		case '<':
			depth++
		case '>':
			depth--
		case '(':
			if depth == 0 {
				parts = append(parts, fn[start:i])
				return ctorOf(parts)
			}
		case ':':
			if depth == 0 && i+1 < len(fn) && fn[i+1] == ':' {
				parts = append(parts, fn[start:i])
				start = i + 2
				i++
			}
		}
	}
	return "", false
}

// ctorOf tells whether the last part of a qualified function name names
// the class before it (its template arguments aside).
func ctorOf(parts []string) (string, bool) {
	if len(parts) < 2 {
		return "", false
	}
	class := parts[len(parts)-2]
	base, _, _ := strings.Cut(class, "<")
	if base == "" || parts[len(parts)-1] != base {
		return "", false
	}
	return strings.Join(parts[:len(parts)-1], "::"), true
}

// allocators: the demangled names of functions that allocate the type
// of their class template's argument (an array of it), and what follows
// the argument.
var allocators = []struct{ prefix, rest string }{
	{"std::__new_allocator<", "::allocate("},     // libstdc++ 12 and later
	{"__gnu_cxx::new_allocator<", "::allocate("}, // before
	{"std::allocator<", "::allocate("},
	{"std::__1::allocator<", "::allocate("},     // libc++
	{"std::__1::allocator<", "::allocate[abi:"}, // libc++ 19's ABI tag
	{"std::_Function_base::_Base_manager<", "::_M_create<"},
}

// AllocatedType returns the type an allocation's frame named fn (a
// demangled name) allocates, when the function says it exactly:
// "std::__new_allocator<std::_List_node<Job> >::allocate(unsigned long,
// void const*)" gives "std::_List_node<Job>".
func AllocatedType(fn string) (string, bool) {
	fn = strings.TrimPrefix(fn, "void ") // a function template's return type
	for _, al := range allocators {
		arg, ok := strings.CutPrefix(fn, al.prefix)
		if !ok {
			continue
		}
		if t, rest, ok := templateArg(arg); ok && strings.HasPrefix(rest, al.rest) {
			return t, true
		}
	}
	return "", false
}

// templateArg splits s, what follows a class template's "<", at its
// closing ">": the argument, and what follows.
func templateArg(s string) (string, string, bool) {
	depth := 1
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			if depth--; depth == 0 {
				t := strings.TrimSpace(s[:i])
				return t, s[i+1:], t != ""
			}
		}
	}
	return "", "", false
}

// maxRTTIName bounds the mangled class name read from RTTI.
const maxRTTIName = 512

// classLayout finds the DWARF definition of a class, first in module
// first, then in any.
func (a *analyzer) classLayout(class string, first int) layout {
	if l, ok := a.classes[class]; ok {
		return l
	}
	l := layout{mod: -1}
	try := func(m int) bool {
		if mt := a.mods[m].Types; mt != nil {
			if id, ok := mt.ByName(class); ok {
				l = layout{int32(m), id}
				return true
			}
		}
		return false
	}
	if !try(first) {
		for m := range a.mods {
			if m != first && try(m) {
				break
			}
		}
	}
	a.classes[class] = l
	return l
}

// global returns the module and index of the global variable holding
// runtime address w, or -1.
func (a *analyzer) global(w uint64) (int, int) {
	m := a.module(w)
	if m < 0 || a.mods[m].Types == nil {
		return -1, -1
	}
	mt := a.mods[m].Types
	e := w - a.mods[m].Bias
	k := sort.Search(len(mt.Globals), func(k int) bool { return mt.Globals[k].Addr > e }) - 1
	if k < 0 || mt.Globals[k].Type == dwarftypes.None {
		return -1, -1
	}
	gl := mt.Globals[k]
	if size := mt.Type(gl.Type).Size; e >= gl.Addr+max(size, 8) {
		return -1, -1
	}
	return m, k
}

// field returns the pointer field of type l at offset off of a block of
// size n holding an array of it, and the element's index.
func (a *analyzer) field(l layout, off, n uint64) (dwarftypes.Field, uint64, bool) {
	mt := a.mods[l.mod].Types
	size := mt.Type(l.tid).Size
	if size == 0 {
		size = 8 // a pointer, or unknown: one word
	}
	if n != 0 && off >= n/size*size {
		return dwarftypes.Field{}, 0, false
	}
	k, o := off/size, off%size
	fs := mt.Fields(l.tid)
	j := sort.Search(len(fs), func(j int) bool { return fs[j].Off >= o })
	if j < len(fs) && fs[j].Off == o {
		return fs[j], k, true
	}
	return dwarftypes.Field{}, k, false
}

// globals types the blocks global variables point at, and returns the
// tiers of root edges for the paths to root: typed globals, then other
// module data, then stacks and registers.
func (a *analyzer) globals() [][]int32 {
	var typed, data, other []int32
	for k, re := range a.g.RootEdges {
		if re.Root < 0 {
			other = append(other, int32(k))
			continue
		}
		m, gi := a.global(re.Word)
		if m < 0 {
			if a.module(re.Word) >= 0 {
				data = append(data, int32(k))
			} else {
				other = append(other, int32(k))
			}
			continue
		}
		gl := a.mods[m].Types.Globals[gi]
		f, _, ok := a.field(layout{int32(m), gl.Type}, re.Word-a.mods[m].Bias-gl.Addr, 0)
		if !ok {
			continue // DWARF says the word is not a pointer
		}
		typed = append(typed, int32(k))
		if f.Target != dwarftypes.None && !re.Interior {
			a.set(re.To, layout{int32(m), f.Target}, "", Field)
		}
	}
	return [][]int32{typed, data, other}
}

// propagate types the blocks typed block i's pointer fields point at.
func (a *analyzer) propagate(i int32) {
	l := a.layout[i]
	to, offs := a.g.Edges(i)
	for k, t := range to {
		if a.Type[t] >= 0 || offs[k]&refgraph.Interior != 0 {
			continue
		}
		f, _, ok := a.field(l, uint64(offs[k]), a.g.Blocks[i].Size)
		if ok && f.Target != dwarftypes.None {
			a.set(t, layout{l.mod, f.Target}, "", Field)
		}
	}
}

// keep tells whether the edge at off of block i may be a pointer: the
// block has no layout, or the word is one of its pointer fields (or
// past the whole elements its type fills).
func (a *analyzer) keep(i int32, off uint32) bool {
	l := a.layout[i]
	if l.mod < 0 {
		return true
	}
	o := uint64(off &^ refgraph.Interior)
	size := a.mods[l.mod].Types.Type(l.tid).Size
	if size == 0 || o >= a.g.Blocks[i].Size/size*size {
		return true
	}
	_, _, ok := a.field(l, o, a.g.Blocks[i].Size)
	return ok
}

// Via names the link that holds block i on its path to root: a root
// ("g_shop.items", "stack", a module path), a field of its holder
// ("next", "[3]", "+0x18"), or "" when no root reaches it.
func (r *Result) Via(i int32) string {
	p := r.Paths.Parent[i]
	switch {
	case p == refgraph.Unreachable:
		return ""
	case p == refgraph.NoParent:
		return r.rootName(r.Paths.RootEdge[i])
	}
	off := uint64(r.Paths.Off[i] &^ refgraph.Interior)
	l := r.layout[p]
	if l.mod < 0 {
		return fmt.Sprintf("+%#x", off)
	}
	a := &analyzer{Result: r}
	f, k, ok := a.field(l, off, r.g.Blocks[p].Size)
	if !ok {
		return fmt.Sprintf("+%#x", off)
	}
	name := f.Name
	mt := r.mods[l.mod].Types
	if size := mt.Type(l.tid).Size; size != 0 && r.g.Blocks[p].Size >= 2*size {
		name = fmt.Sprintf("[%d]", k) + dot(name)
	}
	if name == "" {
		return "[0]"
	}
	return name
}

func dot(s string) string {
	if s == "" || s[0] == '[' {
		return s
	}
	return "." + s
}

// rootName names root edge k.
func (r *Result) rootName(k int32) string {
	re := r.g.RootEdges[k]
	if re.Root < 0 {
		return "registers"
	}
	a := &analyzer{Result: r}
	if m, gi := a.global(re.Word); m >= 0 {
		gl := r.mods[m].Types.Globals[gi]
		off := re.Word - r.mods[m].Bias - gl.Addr
		if f, _, ok := a.field(layout{int32(m), gl.Type}, off, 0); ok && f.Name != "" {
			return gl.Name + dot(f.Name)
		}
		if off == 0 {
			return gl.Name
		}
		return fmt.Sprintf("%s+%#x", gl.Name, off)
	}
	return r.g.Roots[re.Root].What
}
