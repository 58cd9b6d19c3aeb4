// Package dwarftypes reads what a module's DWARF says about its data:
// the layouts of its types (their pointer fields, flattened, with the
// standard containers' nodes typed through their template arguments),
// its global variables, and the types its call sites allocate; with the
// vtables of its symbol table. The --types analysis
// (internal/analysis/heaptype) types heap blocks with it.
//
// Modules are loaded by internal/symbols/symbolize (Symbolizer.Debug),
// once for frames and types, and what reading the types of one found is
// kept in the symbol cache (internal/symbols/symcache) for the next
// process. DWARF and cache files are untrusted: bad ones give errors or
// fewer types, never a panic.
package dwarftypes

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/leakpath/leakpath/internal/symbols/symbolize"
)

// ID names a type of one Module; None is none (void, unknown).
type ID int32

// None is the ID of an unknown or void type.
const None ID = -1

// Kind is what a Type is.
type Kind uint8

// Kinds of types.
const (
	KindOther   Kind = iota // enum, base type: no pointers
	KindStruct              // struct, class, union
	KindPointer             // pointer or reference to data
	KindArray
	KindFunc // function, or pointer to one: never points into the heap
)

// Type is a data type as DWARF describes it, typedefs and qualifiers
// stripped.
type Type struct {
	Name string // qualified (shop::Widget), "Node*", "char", "int[4]"
	Size uint64
	Kind Kind
	File string // where it is defined, if DWARF says
	Line int
	// Elem is the pointee of a pointer, the element of an array.
	Elem ID
	// Count is an array's length (0: unknown).
	Count uint64

	off    dwarf.Offset
	fields []Field // flattened pointer fields, once laid out
	laid   bool
}

// Field is a pointer-sized word of a type that holds a pointer to data:
// its offset, the type it points at and its name path ("items._M_start").
type Field struct {
	Off    uint64
	Target ID
	Name   string
}

// Global is a variable with a static address, from DWARF.
type Global struct {
	Name string // qualified
	Addr uint64 // ELF virtual address
	Type ID
}

// Module is what a module's symbols and DWARF say about its data:
// vtables, global variables and type layouts. It lays types out lazily
// and is not safe for concurrent use.
type Module struct {
	Vtables []symbolize.Vtable // sorted by Lo
	Globals []Global           // sorted by Addr
	types   []Type
	byOff   map[dwarf.Offset]ID
	nodes   map[dwarf.Offset]*dnode
	byName  map[string]dwarf.Offset // complete structs by qualified name
	byCanon map[string]dwarf.Offset // the same by canonName, once asked
	work    int                     // what is left of maxModuleWork
	alloc   []allocSite             // by return address
	cont    containers
	// globalOffs are the DWARF types of Globals (as read, before they
	// are sorted): what a types cache file keeps.
	globalOffs []dwarf.Offset
	lazy       *lazyNodes // the type entries of a types cache file, decoded on use
}

// allocSite is a call site with the type it allocates
// (DW_AT_LLVM_alloc_type): its return address, and the type.
type allocSite struct {
	pc  uint64
	typ ID
	off dwarf.Offset // until laid out
}

// DWARF attributes and tags debug/dwarf does not name.
const (
	attrLLVMAllocType = dwarf.Attr(0x3e0e) // DW_AT_LLVM_alloc_type
	tagGNUCallSite    = dwarf.Tag(0x4109)  // DW_TAG_GNU_call_site
)

// HasAllocTypes reports whether any call site says what it allocates.
func (mt *Module) HasAllocTypes() bool { return len(mt.alloc) > 0 }

// AllocType returns the type the call returning to pc (an ELF virtual
// address) allocates, when DWARF says (DW_AT_LLVM_alloc_type on its
// DW_TAG_call_site: clang 20 and later, for new).
func (mt *Module) AllocType(pc uint64) (ID, bool) {
	k := sort.Search(len(mt.alloc), func(k int) bool { return mt.alloc[k].pc >= pc })
	if k < len(mt.alloc) && mt.alloc[k].pc == pc && mt.alloc[k].typ != None {
		return mt.alloc[k].typ, true
	}
	return None, false
}

// dnode is a DWARF type entry, as much of it as typing needs.
type dnode struct {
	tag     dwarf.Tag
	name    string // qualified for structs, classes, unions, enums
	size    int64  // -1: none given
	typ     dwarf.Offset
	hasTyp  bool
	count   int64 // arrays: elements (product of subranges), -1 unknown
	decl    bool
	members []dmember
	tparams []dwarf.Offset // a class template's type arguments, in order
	file    string
	line    int
}

type dmember struct {
	name string
	off  int64
	typ  dwarf.Offset
}

// maxLayoutDepth bounds nested structs and arrays laid out; maxFields the
// pointer fields of one type (a big array of pointers is kept whole up
// to this).
const (
	maxLayoutDepth = 16
	maxFields      = 1 << 16
	maxLayoutWork  = 1 << 16 // parts visited to lay out one type
	maxModuleWork  = 1 << 22 // and all the types of a module
)

// Reader reads the types of the modules a Symbolizer loads, once per
// module (path and build id) and from the module's DWARF as the
// Symbolizer loaded it for frames. It is safe for concurrent use; reads
// are serialized.
type Reader struct {
	syms *symbolize.Symbolizer
	mu   sync.Mutex
	mods map[moduleKey]*moduleTypes
}

type moduleKey struct {
	path    string
	buildID string
}

// moduleTypes is what Types returned for a module.
type moduleTypes struct {
	mt  *Module
	err error
}

// NewReader returns a Reader of the modules of s.
func NewReader(s *symbolize.Symbolizer) *Reader {
	return &Reader{syms: s, mods: map[moduleKey]*moduleTypes{}}
}

// Types returns what the module at path (loaded with wantBuildID, as
// for symbolize's Lookup) says about data types. Without DWARF it holds
// the vtables only. Its error is the module's (unreadable, build id
// mismatch); DWARF that does not describe types well is warned about
// through the Symbolizer, once per module, and typed without.
func (r *Reader) Types(path string, wantBuildID []byte) (*Module, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := moduleKey{path, string(wantBuildID)}
	if m, ok := r.mods[key]; ok {
		return m.mt, m.err
	}
	mt, err := r.read(path, wantBuildID)
	r.mods[key] = &moduleTypes{mt, err}
	return mt, err
}

// read reads the types of a module, from the types cache if it has them.
func (r *Reader) read(path string, wantBuildID []byte) (mt *Module, err error) {
	dbg, err := r.syms.Debug(path, wantBuildID)
	if err != nil {
		return nil, err
	}
	mt = &Module{Vtables: dbg.Vtables}
	if dbg.DWARF == nil {
		return mt, nil
	}
	cache, ckey := r.syms.CacheFile(path, wantBuildID, ".types")
	if cache != "" && readTypesCache(mt, cache, ckey) {
		return mt, nil
	}
	func() {
		defer guard(&err, "dwarftypes: DWARF types of "+path)
		err = mt.read(dbg.DWARF, dbg.DebugAddr)
	}()
	if err != nil {
		r.syms.Warn(path, wantBuildID, err.Error())
		return mt, nil
	}
	if cache != "" {
		writeTypesCache(mt, cache, ckey)
	}
	return mt, nil
}

// FromDWARF reads the types of DWARF data d (for tests of hand-made
// DWARF and fuzzing).
func FromDWARF(d *dwarf.Data) (mt *Module, err error) {
	mt = &Module{}
	defer guard(&err, "dwarftypes: DWARF types")
	err = mt.read(d, nil)
	return mt, err
}

// recoverPanics turns panics while reading types (the DWARF and the
// types cache are untrusted) into errors; the fuzz tests turn it off so
// that such bugs are found, not masked.
var recoverPanics = true

// guard converts a panic into *err when recoverPanics is set. Use as
// `defer guard(&err, ctx)`.
func guard(err *error, ctx string) {
	if !recoverPanics {
		return
	}
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: malformed input: internal panic: %v\n%s", ctx, r, debug.Stack())
	}
}

// maxNullRun bounds the null entries tolerated in a row (debug/dwarf
// returns them without consuming input at an unterminated LEB128).
const maxNullRun = 4096

// read walks every entry of d once, keeping type entries and variables
// with a fixed address (addrs: the .debug_addr section, nil if none).
func (mt *Module) read(d *dwarf.Data, addrs []byte) error {
	mt.work = maxModuleWork
	mt.nodes = map[dwarf.Offset]*dnode{}
	mt.byName = map[string]dwarf.Offset{}
	mt.byOff = map[dwarf.Offset]ID{}
	type varDecl struct {
		name string
		typ  dwarf.Offset
	}
	decls := map[dwarf.Offset]varDecl{}
	var globalTypes []dwarf.Offset // of Globals, until laid out
	r := d.Reader()
	// The enclosing entries: their qualified names ("" for none) and
	// the struct or array among them whose children are read.
	type level struct {
		name string
		node *dnode
	}
	var scope []level
	var files []*dwarf.LineFile
	clang := false        // the unit's producer is clang: its call sites may say what they allocate
	addrBase := int64(-1) // the unit's DW_AT_addr_base
	nulls := 0
	for {
		e, err := r.Next()
		if err != nil {
			return fmt.Errorf("DWARF types: %w", err)
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			// debug/dwarf returns null entries without consuming input
			// at an unterminated LEB128 (see maxNullRun).
			if nulls++; nulls > maxNullRun {
				return fmt.Errorf("DWARF types: run of %d null entries", nulls)
			}
			if len(scope) > 0 {
				scope = scope[:len(scope)-1]
			}
			continue
		}
		nulls = 0
		outer := ""
		var cur *dnode // the struct or array this entry is a child of
		if len(scope) > 0 {
			outer, cur = scope[len(scope)-1].name, scope[len(scope)-1].node
		}
		var node *dnode // this entry, if its children are its parts
		name, _ := e.Val(dwarf.AttrName).(string)
		qual := name
		if outer != "" && name != "" {
			qual = outer + "::" + name
		}
		inner := "" // the scope this entry's children see
		switch e.Tag {
		case dwarf.TagCompileUnit:
			producer, _ := e.Val(dwarf.AttrProducer).(string)
			clang = strings.Contains(producer, "clang")
			addrBase = -1
			if v, ok := e.Val(dwarf.AttrAddrBase).(int64); ok {
				addrBase = v
			}
			files = nil
			if lr, err := d.LineReader(e); err == nil && lr != nil {
				files = lr.Files()
			}
		case dwarf.TagNamespace:
			if name == "" {
				qual = outer + "::(anonymous namespace)"
				if outer == "" {
					qual = "(anonymous namespace)"
				}
			}
			inner = qual
		case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType,
			dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType, dwarf.TagTypedef,
			dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType, dwarf.TagArrayType,
			dwarf.TagBaseType, dwarf.TagSubroutineType, dwarf.TagPtrToMemberType, dwarf.TagUnspecifiedType:
			n := &dnode{tag: e.Tag, size: -1, count: -1}
			if v, ok := e.Val(dwarf.AttrByteSize).(int64); ok {
				n.size = v
			}
			if v, ok := e.Val(dwarf.AttrType).(dwarf.Offset); ok {
				n.typ, n.hasTyp = v, true
			}
			n.decl, _ = e.Val(dwarf.AttrDeclaration).(bool)
			n.name = name
			switch e.Tag {
			case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType, dwarf.TagEnumerationType:
				n.name = qual
				inner = qual
				if fi, ok := e.Val(dwarf.AttrDeclFile).(int64); ok && fi >= 0 && int(fi) < len(files) && files[fi] != nil {
					n.file = files[fi].Name
				}
				if l, ok := e.Val(dwarf.AttrDeclLine).(int64); ok {
					n.line = int(l)
				}
				if !n.decl && name != "" && e.Tag != dwarf.TagEnumerationType {
					if _, dup := mt.byName[qual]; !dup {
						mt.byName[qual] = e.Offset
					} else if e.Children && n.size > 0 {
						// The same struct again (each unit that uses it
						// has it): one definition is enough. Its members
						// are skipped (most of a big program's entries),
						// and it stands for the first.
						n.decl = true
						mt.nodes[e.Offset] = n
						r.SkipChildren()
						continue
					}
				}
			}
			mt.nodes[e.Offset] = n
			if e.Tag == dwarf.TagArrayType || e.Tag == dwarf.TagStructType ||
				e.Tag == dwarf.TagClassType || e.Tag == dwarf.TagUnionType {
				node = n
			}
		case dwarf.TagSubrangeType:
			if cur != nil && cur.tag == dwarf.TagArrayType {
				c := int64(-1)
				if v, ok := e.Val(dwarf.AttrCount).(int64); ok {
					c = v
				} else if v, ok := e.Val(dwarf.AttrUpperBound).(int64); ok {
					c = v + 1
				}
				switch {
				case c < 0 || cur.count == 0:
					cur.count = -1
				case cur.count < 0 && cur.members == nil:
					cur.count = c
					cur.members = []dmember{} // a subrange seen
				default:
					cur.count *= c
				}
			}
		case dwarf.TagMember, dwarf.TagInheritance:
			if cur != nil && cur.tag != dwarf.TagArrayType {
				if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
					break // a static member
				}
				t, ok := e.Val(dwarf.AttrType).(dwarf.Offset)
				if !ok {
					break
				}
				off, _ := e.Val(dwarf.AttrDataMemberLoc).(int64)
				if e.Tag == dwarf.TagInheritance {
					name = ""
				}
				cur.members = append(cur.members, dmember{name: name, off: off, typ: t})
			}
		case dwarf.TagTemplateTypeParameter:
			if cur != nil && cur.tag != dwarf.TagArrayType {
				t, _ := e.Val(dwarf.AttrType).(dwarf.Offset)
				cur.tparams = append(cur.tparams, t)
			}
		case dwarf.TagVariable:
			t, hasT := e.Val(dwarf.AttrType).(dwarf.Offset)
			if spec, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
				if dv, ok := decls[spec]; ok {
					qual, t, hasT = dv.name, dv.typ, true
				}
			}
			loc, _ := e.Val(dwarf.AttrLocation).([]byte)
			if addr, ok := staticAddr(loc, addrs, addrBase); ok && hasT {
				if addr != 0 {
					mt.Globals = append(mt.Globals, Global{Name: qual, Addr: addr})
					globalTypes = append(globalTypes, t)
				}
			} else if hasT && loc == nil {
				decls[e.Offset] = varDecl{qual, t}
			}
		case dwarf.TagSubprogram, dwarf.TagLexDwarfBlock, dwarf.TagInlinedSubroutine:
			// A function's locals have no fixed address (its static
			// ones are left out): skip them, most of the entries; but
			// clang's call sites may name the type they allocate.
			if !clang {
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
		case dwarf.TagCallSite, tagGNUCallSite:
			t, ok := e.Val(attrLLVMAllocType).(dwarf.Offset)
			if !ok {
				break
			}
			pc, ok := e.Val(dwarf.AttrCallReturnPC).(uint64)
			if !ok {
				pc, ok = e.Val(dwarf.AttrLowpc).(uint64)
			}
			if ok {
				mt.alloc = append(mt.alloc, allocSite{pc: pc, off: t})
			}
		}
		if e.Children {
			scope = append(scope, level{inner, node})
		}
	}
	mt.globalOffs = globalTypes
	mt.finish()
	return nil
}

// finish resolves what read (or a types cache file) found: the types of
// the globals and of the allocation sites, and their order.
func (mt *Module) finish() {
	mt.work = maxModuleWork
	for i := range mt.Globals {
		mt.Globals[i].Type = mt.id(mt.globalOffs[i], 0)
	}
	for i := range mt.alloc {
		mt.alloc[i].typ = mt.id(mt.alloc[i].off, 0)
	}
	sort.SliceStable(mt.alloc, func(i, j int) bool { return mt.alloc[i].pc < mt.alloc[j].pc })
	order := make([]int, len(mt.Globals))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return mt.Globals[order[i]].Addr < mt.Globals[order[j]].Addr })
	gs, offs := make([]Global, len(order)), make([]dwarf.Offset, len(order))
	for i, k := range order {
		gs[i], offs[i] = mt.Globals[k], mt.globalOffs[k]
	}
	mt.Globals, mt.globalOffs = gs, offs
}

// staticAddr returns the address of a location that is one: DW_OP_addr,
// or DW_OP_addrx indexing .debug_addr (addrs) from the unit's base.
func staticAddr(loc, addrs []byte, base int64) (uint64, bool) {
	switch {
	case len(loc) == 9 && loc[0] == 0x03: // DW_OP_addr
		return binary.LittleEndian.Uint64(loc[1:]), true
	case len(loc) >= 2 && loc[0] == 0xa1 && base >= 0: // DW_OP_addrx
		idx, n := binary.Uvarint(loc[1:])
		if n <= 0 || 1+n != len(loc) || idx > uint64(len(addrs))/8 {
			return 0, false
		}
		at := uint64(base) + idx*8
		if at+8 > uint64(len(addrs)) {
			return 0, false
		}
		return binary.LittleEndian.Uint64(addrs[at:]), true
	}
	return 0, false
}

// Type returns type id (id must be a ID of mt other than None).
func (mt *Module) Type(id ID) *Type { return &mt.types[id] }

// ByName returns the complete struct or class of qualified name.
func (mt *Module) ByName(name string) (ID, bool) {
	off, ok := mt.byName[name]
	if !ok {
		return None, false
	}
	return mt.id(off, 0), true
}

// id returns the ID of the type at off, typedefs and qualifiers
// stripped, declarations resolved to their definition.
func (mt *Module) id(off dwarf.Offset, depth int) ID {
	if id, ok := mt.byOff[off]; ok {
		return id
	}
	n := mt.node(off)
	if n == nil || depth > maxLayoutDepth {
		return None
	}
	switch n.tag {
	case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType:
		if !n.hasTyp {
			return None
		}
		id := mt.id(n.typ, depth+1)
		mt.byOff[off] = id
		return id
	case dwarf.TagUnspecifiedType:
		return None
	}
	if n.decl && n.name != "" {
		if def, ok := mt.byName[n.name]; ok && def != off {
			id := mt.id(def, depth+1)
			mt.byOff[off] = id
			return id
		}
	}
	id := ID(len(mt.types))
	t := Type{Name: n.name, Kind: KindOther, Elem: None, File: n.file, Line: n.line, off: off}
	mt.types = append(mt.types, t) // before its parts, which may point back at it
	mt.byOff[off] = id
	if n.size > 0 {
		t.Size = uint64(n.size)
	}
	switch n.tag {
	case dwarf.TagStructType, dwarf.TagClassType, dwarf.TagUnionType:
		t.Kind = KindStruct
		if t.Name == "" {
			t.Name = "(anonymous)"
		}
	case dwarf.TagPointerType, dwarf.TagReferenceType, dwarf.TagRvalueReferenceType:
		t.Kind, t.Size = KindPointer, 8
		if n.hasTyp {
			t.Elem = mt.id(n.typ, depth+1)
		}
		elem := "void"
		if t.Elem != None {
			elem = mt.types[t.Elem].Name
			if mt.types[t.Elem].Kind == KindFunc {
				t.Kind = KindFunc
			}
		}
		t.Name = elem + "*"
	case dwarf.TagArrayType:
		t.Kind = KindArray
		if n.hasTyp {
			t.Elem = mt.id(n.typ, depth+1)
		}
		elem := "void"
		if t.Elem != None {
			elem = mt.types[t.Elem].Name
		}
		if n.count > 0 {
			t.Count = uint64(n.count)
			t.Name = elem + "[" + strconv.FormatInt(n.count, 10) + "]"
			if t.Elem != None {
				t.Size = t.Count * mt.types[t.Elem].Size
			}
		} else {
			t.Name = elem + "[]"
		}
	case dwarf.TagSubroutineType, dwarf.TagPtrToMemberType:
		t.Kind = KindFunc
		if t.Name == "" {
			t.Name = "(function)"
		}
	}
	mt.types[id] = t
	return id
}

// Fields returns the pointer fields of one value of type id, flattened
// through nested structs, base classes and arrays, by offset. A struct's
// other words are not pointers.
func (mt *Module) Fields(id ID) []Field {
	t := &mt.types[id]
	if !t.laid {
		t.laid = true
		var out []Field
		work := min(maxLayoutWork, mt.work)
		mt.flatten(&out, &work, id, 0, "", 0, nil)
		mt.work -= min(maxLayoutWork, mt.work) - work
		sort.SliceStable(out, func(i, j int) bool { return out[i].Off < out[j].Off })
		mt.types[id].fields = out
	}
	return mt.types[id].fields
}

func (mt *Module) flatten(out *[]Field, work *int, id ID, base uint64, path string, depth int, rt *retarget) {
	if id == None || depth > maxLayoutDepth || len(*out) >= maxFields || *work <= 0 {
		return
	}
	*work--
	t := mt.types[id]
	switch t.Kind {
	case KindPointer:
		*out = append(*out, Field{Off: base, Target: mt.retargeted(rt, t.Elem), Name: path})
	case KindArray:
		if t.Elem == None {
			return
		}
		es := mt.types[t.Elem].Size
		if es == 0 {
			return
		}
		for i := uint64(0); i < t.Count && len(*out) < maxFields && *work > 0; i++ {
			mt.flatten(out, work, t.Elem, base+i*es, path+"["+strconv.FormatUint(i, 10)+"]", depth+1, rt)
		}
	case KindStruct:
		n := mt.node(t.off)
		if n == nil {
			return
		}
		r := mt.rule(id)
		if r.storage != None {
			// A container's raw storage for a value: the value's layout.
			mt.flatten(out, work, r.storage, base, path, depth+1, rt)
			return
		}
		for _, from := range r.from {
			rt = &retarget{from: from, to: r.to, next: rt}
		}
		for _, m := range n.members {
			if strings.HasPrefix(m.name, "_vptr") {
				continue // the vtable pointer: never into the heap
			}
			p := path
			if m.name != "" {
				if p != "" {
					p += "."
				}
				p += m.name
			}
			mt.flatten(out, work, mt.id(m.typ, 0), base+uint64(max(m.off, 0)), p, depth+1, rt)
		}
	}
}

// Vtable returns the class whose vtable holds ELF virtual address a.
func (mt *Module) Vtable(a uint64) (string, bool) {
	k := sort.Search(len(mt.Vtables), func(k int) bool { return mt.Vtables[k].Hi > a })
	if k < len(mt.Vtables) && a >= mt.Vtables[k].Lo {
		return mt.Vtables[k].Class, true
	}
	return "", false
}
