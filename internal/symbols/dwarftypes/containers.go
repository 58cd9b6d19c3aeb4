package dwarftypes

import (
	"debug/dwarf"
	"slices"
	"strings"
)

// The standard containers link their nodes through pointers to a base
// class (std::_Rb_tree_node_base, std::__detail::_List_node_base,
// std::__detail::_Hash_node_base) and keep each value in raw storage
// (__gnu_cxx::__aligned_membuf<T>, a byte array): their DWARF layout
// alone would type a node as its base and hide the pointers in its
// value. The container's class template, though, names its node type
// exactly (its DWARF template arguments): inside a container, and inside
// a node, those base pointers point at the container's own node type,
// and the raw storage holds the value type. libstdc++'s names.

// rule is what laying out one struct changes: pointers to from point at
// to instead, or the struct is raw storage of type storage.
type rule struct {
	from    []ID
	to      ID
	storage ID
}

var noRule = rule{to: None, storage: None}

// retarget is the chain of rules in force while laying out a struct's
// parts (the innermost first).
type retarget struct {
	from, to ID
	next     *retarget
}

// containers is what Module knows of the containers' types.
type containers struct {
	rules map[ID]rule
	// nodes: node class template ("std::_Rb_tree_node") and first type
	// argument's name → the node types (two for a hash node: with and
	// without the cached hash code); built on first use.
	nodes map[string][]ID
	ptrTo map[ID]ID // synthesized pointer types
}

// nodeKinds: per container class template, its node class template and
// which type argument of the container is the node's value; libstdc++'s,
// then libc++'s (whose nodes hold their values as members).
var nodeKinds = []struct {
	container, node string
	arg             int
}{
	{"std::_Rb_tree<", "std::_Rb_tree_node<", 1},
	{"std::__cxx11::_List_base<", "std::_List_node<", 0},
	{"std::_List_base<", "std::_List_node<", 0},
	{"std::_Hashtable<", "std::__detail::_Hash_node<", 1},
	{"std::_Fwd_list_base<", "std::_Fwd_list_node<", 0},
	{"std::__1::__tree<", "std::__1::__tree_node<", 0},
	{"std::__1::__list_imp<", "std::__1::__list_node<", 0},
	{"std::__1::__hash_table<", "std::__1::__hash_node<", 0},
	{"std::__1::__forward_list_base<", "std::__1::__forward_list_node<", 0},
}

// nodeBases are the base classes of the nodes (names, or prefixes of
// class templates' names ending in "<").
var nodeBases = []string{
	"std::_Rb_tree_node_base", "std::__detail::_List_node_base", "std::__detail::_Hash_node_base",
	"std::_Fwd_list_node_base", "std::__1::__tree_node_base<", "std::__1::__tree_end_node<",
	"std::__1::__list_node_base<", "std::__1::__hash_node_base<", "std::__1::__forward_begin_node<",
}

// IsNodeBase reports whether name is the base class of a standard
// container's nodes: a block the DWARF of a pointer says is one is a
// node of a type the pointer does not say.
func IsNodeBase(name string) bool {
	if strings.HasSuffix(name, "*") {
		return false
	}
	for _, b := range nodeBases {
		if name == b || (strings.HasSuffix(b, "<") && strings.HasPrefix(name, b)) {
			return true
		}
	}
	return false
}

// IsNode reports whether name is a standard container's node type.
func IsNode(name string) bool {
	if strings.HasSuffix(name, "*") {
		return false // a pointer to one (a hash table's buckets)
	}
	for _, k := range nodeKinds {
		if strings.HasPrefix(name, k.node) {
			return true
		}
	}
	return false
}

// rule returns how laying out struct id changes its parts' types.
func (mt *Module) rule(id ID) rule {
	if r, ok := mt.cont.rules[id]; ok {
		return r
	}
	if mt.cont.rules == nil {
		mt.cont.rules = map[ID]rule{}
	}
	r := mt.findRule(id)
	mt.cont.rules[id] = r
	return r
}

func (mt *Module) findRule(id ID) rule {
	t := mt.types[id] // a copy: arg adds types
	n := mt.node(t.off)
	if n == nil || !strings.Contains(t.Name, "<") {
		return noRule
	}
	arg := func(k int) ID {
		if k >= len(n.tparams) {
			return None
		}
		return mt.id(n.tparams[k], 0)
	}
	name := t.Name
	if strings.HasPrefix(name, "__gnu_cxx::__aligned_membuf<") || strings.HasPrefix(name, "__gnu_cxx::__aligned_buffer<") {
		if v := arg(0); v != None && mt.types[v].Size <= t.Size {
			return rule{to: None, storage: v}
		}
		return noRule
	}
	for _, k := range nodeKinds {
		node := None
		switch {
		case strings.HasPrefix(name, k.node):
			node = id
		case strings.HasPrefix(name, k.container):
			node = mt.nodeType(k.node, arg(k.arg), n)
		default:
			continue
		}
		if node == None {
			return noRule
		}
		// The node's links point at its base classes.
		return rule{from: mt.baseClasses(node, nil, 0), to: node, storage: None}
	}
	return noRule
}

// baseClasses appends to out the base classes of struct id, and theirs.
func (mt *Module) baseClasses(id ID, out []ID, depth int) []ID {
	n := mt.node(mt.types[id].off)
	if n == nil || depth > maxLayoutDepth {
		return out
	}
	for _, m := range n.members {
		if m.name != "" {
			continue // a member, not a base (nor an anonymous union)
		}
		if b := mt.id(m.typ, 0); b != None && mt.types[b].Kind == KindStruct && !slices.Contains(out, b) {
			out = mt.baseClasses(b, append(out, b), depth+1)
		}
	}
	return out
}

// nodeType returns the node type of template node whose value is v,
// for the container c: None when there is none, or more than one and
// the container's traits do not choose.
func (mt *Module) nodeType(node string, v ID, c *dnode) ID {
	if v == None {
		return None
	}
	if mt.cont.nodes == nil {
		mt.cont.nodes = map[string][]ID{}
		for name, off := range mt.byName {
			for _, k := range nodeKinds {
				if !strings.HasPrefix(name, k.node) {
					continue
				}
				if dn := mt.node(off); dn != nil && len(dn.tparams) > 0 {
					id := mt.id(off, 0)
					if a := mt.id(dn.tparams[0], 0); a != None && id != None {
						key := k.node + "\x00" + mt.types[a].Name
						mt.cont.nodes[key] = append(mt.cont.nodes[key], id)
					}
				}
				break
			}
		}
	}
	ids := mt.cont.nodes[node+"\x00"+mt.types[v].Name]
	if len(ids) == 2 && len(c.tparams) > 0 {
		// A hash table's node caches the hash code or not, as its
		// traits (the last type argument) say.
		traits := mt.id(c.tparams[len(c.tparams)-1], 0)
		if traits != None {
			tn := mt.types[traits].Name
			for _, cache := range []string{"true", "false"} {
				if strings.Contains(tn, "_Hashtable_traits<"+cache+",") {
					var match []ID
					for _, id := range ids {
						if strings.HasSuffix(mt.types[id].Name, ", "+cache+">") {
							match = append(match, id)
						}
					}
					ids = match
				}
			}
		}
	}
	if len(ids) != 1 {
		return None
	}
	return ids[0]
}

// retargeted returns the type a pointer to target points at under the
// rules rt: a container's node for its base, and for a pointer to the
// base (a hash table's buckets), a pointer to the node.
func (mt *Module) retargeted(rt *retarget, target ID) ID {
	if rt == nil || target == None {
		return target
	}
	for r := rt; r != nil; r = r.next {
		if r.from == target {
			return r.to
		}
	}
	if t := mt.types[target]; t.Kind == KindPointer && t.Elem != None {
		for r := rt; r != nil; r = r.next {
			if r.from == t.Elem {
				return mt.pointerTo(r.to)
			}
		}
	}
	return target
}

// pointerTo returns a pointer type to id, made up if need be.
func (mt *Module) pointerTo(id ID) ID {
	if p, ok := mt.cont.ptrTo[id]; ok {
		return p
	}
	if mt.cont.ptrTo == nil {
		mt.cont.ptrTo = map[ID]ID{}
	}
	p := ID(len(mt.types))
	mt.types = append(mt.types, Type{Name: mt.types[id].Name + "*", Size: 8, Kind: KindPointer, Elem: id})
	mt.cont.ptrTo[id] = p
	return p
}

// ByDemangledName returns the complete struct or class a demangled name
// (as c++filt spells it: "std::pair<int const, long>") names, whose
// DWARF name gcc spells its own way ("std::pair<int const, long int>").
func (mt *Module) ByDemangledName(name string) (ID, bool) {
	if mt.byCanon == nil {
		mt.byCanon = make(map[string]dwarf.Offset, len(mt.byName))
		for n, off := range mt.byName {
			mt.byCanon[canonName(n)] = off
		}
	}
	off, ok := mt.byCanon[canonName(name)]
	if !ok {
		return None, false
	}
	return mt.id(off, 0), true
}

// baseSpellings: gcc's DWARF names of base types in template arguments,
// and the demangler's.
var baseSpellings = strings.NewReplacer(
	"long long unsigned int", "unsigned long long",
	"long long int", "long long",
	"long unsigned int", "unsigned long",
	"short unsigned int", "unsigned short",
	"long int", "long",
	"short int", "short",
)

// canonName is a type name with gcc's spellings of base types made the
// demangler's, without spaces.
func canonName(s string) string {
	if !strings.ContainsAny(s, "<(") {
		return strings.ReplaceAll(s, " ", "")
	}
	return strings.ReplaceAll(baseSpellings.Replace(s), " ", "")
}
