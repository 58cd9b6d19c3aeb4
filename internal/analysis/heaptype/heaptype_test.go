package heaptype

import (
	"debug/dwarf"
	"encoding/binary"
	"testing"

	"github.com/leakpath/leakpath/internal/analysis/refgraph"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// allocPC is the return address of the hand-made call site that
// allocates a shop::Widget.
const allocPC = 0x401234

// handMadeDWARF is a DWARF 4 unit as clang 20 writes one for
// `new shop::Widget` (Debian's clang-19 does not emit
// DW_AT_LLVM_alloc_type): namespace shop { struct Widget { Widget *next;
// long id; }; } and a function whose call site returning to allocPC
// allocates a Widget.
func handMadeDWARF(t *testing.T) *dwarf.Data {
	t.Helper()
	abbrev := []byte{
		1, 0x11, 1, 0x25, 0x08, 0x13, 0x05, 0x03, 0x08, 0, 0, // compile_unit: producer, language, name
		2, 0x39, 1, 0x03, 0x08, 0, 0, // namespace: name
		3, 0x13, 1, 0x03, 0x08, 0x0b, 0x0b, 0, 0, // structure_type: name, byte_size
		4, 0x0d, 0, 0x03, 0x08, 0x49, 0x13, 0x38, 0x0b, 0, 0, // member: name, type, data_member_location
		5, 0x0f, 0, 0x0b, 0x0b, 0x49, 0x13, 0, 0, // pointer_type: byte_size, type
		6, 0x2e, 1, 0x03, 0x08, 0x11, 0x01, 0x12, 0x06, 0, 0, // subprogram: name, low_pc, high_pc
		7, 0x48, 0, 0x7d, 0x01, 0x8e, 0x7c, 0x13, 0, 0, // call_site: call_return_pc, LLVM_alloc_type (0x3e0e)
		8, 0x24, 0, 0x03, 0x08, 0x0b, 0x0b, 0x3e, 0x0b, 0, 0, // base_type: name, byte_size, encoding
		0,
	}
	var info []byte
	refs := map[int]string{} // where a ref4 goes → the label it names
	labels := map[string]int{}
	str := func(s string) { info = append(info, s...); info = append(info, 0) }
	ref := func(label string) { refs[len(info)] = label; info = append(info, 0, 0, 0, 0) }
	label := func(name string) { labels[name] = len(info) }
	info = append(info, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8) // unit length (patched), version 4, abbrev 0, address size 8
	info = append(info, 1)
	str("clang version 20.1.0 (hand-made)")
	info = append(info, 0x21, 0) // DW_LANG_C_plus_plus_14
	str("shop.cc")
	info = append(info, 2)
	str("shop")
	label("widget")
	info = append(info, 3)
	str("Widget")
	info = append(info, 16)
	info = append(info, 4)
	str("next")
	ref("widgetptr")
	info = append(info, 0)
	info = append(info, 4)
	str("id")
	ref("long")
	info = append(info, 8)
	info = append(info, 0) // end of Widget
	info = append(info, 0) // end of shop
	label("widgetptr")
	info = append(info, 5, 8)
	ref("widget")
	label("long")
	info = append(info, 8)
	str("long")
	info = append(info, 8, 5)
	info = append(info, 6)
	str("make")
	info = binary.LittleEndian.AppendUint64(info, 0x401200)
	info = binary.LittleEndian.AppendUint32(info, 0x100)
	info = append(info, 7)
	info = binary.LittleEndian.AppendUint64(info, allocPC)
	ref("widget")
	info = append(info, 0) // end of make
	info = append(info, 0) // end of the unit
	for at, l := range refs {
		binary.LittleEndian.PutUint32(info[at:], uint32(labels[l]))
	}
	binary.LittleEndian.PutUint32(info, uint32(len(info)-4))
	d, err := dwarf.New(abbrev, nil, nil, info, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// words is memory: 8-byte words at addresses.
type words map[uint64]uint64

func (m words) ReadRanges(rs []ptrace.Range) (int, error) {
	for i := range rs {
		r := &rs[i]
		for o := 0; o+8 <= len(r.Buf); o += 8 {
			binary.LittleEndian.PutUint64(r.Buf[o:], m[r.Addr+uint64(o)])
		}
		r.N = len(r.Buf)
	}
	return 0, nil
}

// TestAllocSiteType: a block allocated at the hand-made call site is a
// shop::Widget by its site (evidence 1); the Widget its next field
// points at is one by the field (evidence 4), the field's name says how
// it is held, and the word of the id field is not an edge even when it
// looks like a pointer.
func TestAllocSiteType(t *testing.T) {
	mt, err := dwarftypes.FromDWARF(handMadeDWARF(t))
	if err != nil {
		t.Fatal(err)
	}
	id, ok := mt.AllocType(allocPC)
	if !ok || mt.Type(id).Name != "shop::Widget" || mt.Type(id).Size != 16 {
		t.Fatalf("AllocType(%#x) = %v %v", allocPC, id, ok)
	}
	if _, ok := mt.AllocType(allocPC + 1); ok {
		t.Errorf("AllocType of another address gave a type")
	}
	fs := mt.Fields(id)
	if len(fs) != 1 || fs[0].Off != 0 || fs[0].Name != "next" || fs[0].Target != id {
		t.Errorf("fields of shop::Widget: %+v", fs)
	}

	// Blocks: 0 allocated at the site, 1 its next, 2 what block 0's id
	// word happens to point at, 3 held by a root.
	blocks := []refgraph.Block{{Addr: 0x1000, Size: 16}, {Addr: 0x2000, Size: 16}, {Addr: 0x3000, Size: 32}, {Addr: 0x4000, Size: 8}}
	mem := words{0x1000: 0x2000, 0x1008: 0x3000, 0x9000: 0x1000, 0x9008: 0x4000}
	g, err := refgraph.Build(blocks, []refgraph.Root{{Addr: 0x9000, Len: 16, What: "stack"}}, nil, mem)
	if err != nil {
		t.Fatal(err)
	}
	res := Analyze(g, []Module{{Path: "shop", Lo: 0x400000, Hi: 0x500000, Types: mt}}, mem, func(i int32, ev Evidence) (SiteType, bool) {
		if i == 0 && ev == AllocSite {
			return SiteType{Mod: 0, Type: id, Ev: AllocSite}, true
		}
		return SiteType{}, false
	})
	name := func(i int) string {
		if res.Type[i] < 0 {
			return "unknown"
		}
		return res.Types[res.Type[i]].Name
	}
	if name(0) != "shop::Widget" || res.Evidence[0] != AllocSite || name(1) != "shop::Widget" || res.Evidence[1] != Field {
		t.Errorf("types %s (%v), %s (%v)", name(0), res.Evidence[0], name(1), res.Evidence[1])
	}
	if name(2) != "unknown" || name(3) != "unknown" {
		t.Errorf("blocks 2 and 3 typed %s, %s", name(2), name(3))
	}
	if res.Paths.Parent[2] != refgraph.Unreachable {
		t.Errorf("the id word kept its edge: block 2 held by %d", res.Paths.Parent[2])
	}
	if v := res.Via(1); v != "next" {
		t.Errorf("block 1 held via %q, want next", v)
	}
	if v := res.Via(0); v != "stack" {
		t.Errorf("block 0 held via %q, want stack", v)
	}
	if res.Retained[0] != 32 || res.Blocks[AllocSite] != 1 || res.Blocks[Field] != 1 || res.Bytes[Unknown] != 40 {
		t.Errorf("retained %v, blocks by evidence %v, bytes %v", res.Retained, res.Blocks, res.Bytes)
	}
}

func TestCtorClass(t *testing.T) {
	for fn, want := range map[string]string{
		"shop::Widget::Widget()":                           "shop::Widget",
		"shop::Widget::Widget(int, char const*)":           "shop::Widget",
		"Blob::Blob()":                                     "Blob",
		"std::vector<int, std::allocator<int> >::vector()": "std::vector<int, std::allocator<int> >",
		"shop::Widget::~Widget()":                          "",
		"shop::make(int)":                                  "",
		"operator new(unsigned long)":                      "",
		"a::b::c::b()":                                     "",
	} {
		got, ok := CtorClass(fn)
		if got != want || ok != (want != "") {
			t.Errorf("CtorClass(%q) = %q %v, want %q", fn, got, ok, want)
		}
	}
}

func TestAllocatedType(t *testing.T) {
	for fn, want := range map[string]string{
		"std::__new_allocator<std::_Rb_tree_node<std::pair<int const, app::Keeper> > >::allocate(unsigned long, void const*)":                            "std::_Rb_tree_node<std::pair<int const, app::Keeper> >",
		"__gnu_cxx::new_allocator<app::Box>::allocate(unsigned long, void const*)":                                                                       "app::Box",
		"std::__1::allocator<Node>::allocate[abi:ue170006](unsigned long)":                                                                               "Node",
		"std::__1::allocator<Node>::deallocate[abi:ue170006](Node*, unsigned long)":                                                                      "",
		"std::__1::allocator<Node>::allocate(unsigned long)":                                                                                             "Node",
		"void std::_Function_base::_Base_manager<app::Adder>::_M_create<app::Adder>(std::_Any_data&, app::Adder&&, std::integral_constant<bool, false>)": "app::Adder",
		"std::_Function_base::_Base_manager<app::Adder>::_M_destroy(std::_Any_data&, std::integral_constant<bool, false>)":                               "",
		"std::allocator_traits<std::allocator<app::Box> >::allocate(std::allocator<app::Box>&, unsigned long)":                                           "",
		"std::__new_allocator<a<b>::allocate(":                                                                                                           "",
		"std::__new_allocator<>::allocate(":                                                                                                              "",
		"main":                                                                                                                                           "",
	} {
		got, ok := AllocatedType(fn)
		if got != want || ok != (want != "") {
			t.Errorf("AllocatedType(%q) = %q, %v; want %q", fn, got, ok, want)
		}
	}
}
