package symbolize

import (
	"debug/dwarf"
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
	from, to TypeID
	storage  TypeID
}

var noRule = rule{from: NoType, to: NoType, storage: NoType}

// retarget is the chain of rules in force while laying out a struct's
// parts (the innermost first).
type retarget struct {
	from, to TypeID
	next     *retarget
}

// containers is what ModuleTypes knows of the containers' types.
type containers struct {
	rules map[TypeID]rule
	// nodes: node class template ("std::_Rb_tree_node") and first type
	// argument's name → the node types (two for a hash node: with and
	// without the cached hash code); built on first use.
	nodes map[string][]TypeID
	ptrTo map[TypeID]TypeID // synthesized pointer types
	bases map[string]bool   // the base node classes' names
}

// nodeKinds: per container class template, its node class template,
// the node's base class and which type argument of the container is the
// node's value.
var nodeKinds = []struct {
	container, node, base string
	arg                   int
}{
	{"std::_Rb_tree<", "std::_Rb_tree_node<", "std::_Rb_tree_node_base", 1},
	{"std::__cxx11::_List_base<", "std::_List_node<", "std::__detail::_List_node_base", 0},
	{"std::_List_base<", "std::_List_node<", "std::__detail::_List_node_base", 0},
	{"std::_Hashtable<", "std::__detail::_Hash_node<", "std::__detail::_Hash_node_base", 1},
	{"std::_Fwd_list_base<", "std::_Fwd_list_node<", "std::_Fwd_list_node_base", 0},
}

// IsNodeBase reports whether name is the base class of a standard
// container's nodes: a block the DWARF of a pointer says is one is a
// node of a type the pointer does not say.
func IsNodeBase(name string) bool {
	for _, k := range nodeKinds {
		if k.base == name {
			return true
		}
	}
	return false
}

// IsNode reports whether name is a standard container's node type.
func IsNode(name string) bool {
	for _, k := range nodeKinds {
		if strings.HasPrefix(name, k.node) {
			return true
		}
	}
	return false
}

// rule returns how laying out struct id changes its parts' types.
func (mt *ModuleTypes) rule(id TypeID) rule {
	if r, ok := mt.cont.rules[id]; ok {
		return r
	}
	if mt.cont.rules == nil {
		mt.cont.rules = map[TypeID]rule{}
	}
	r := mt.findRule(id)
	mt.cont.rules[id] = r
	return r
}

func (mt *ModuleTypes) findRule(id TypeID) rule {
	t := mt.types[id] // a copy: arg adds types
	n := mt.node(t.off)
	if n == nil || !strings.Contains(t.Name, "<") {
		return noRule
	}
	arg := func(k int) TypeID {
		if k >= len(n.tparams) {
			return NoType
		}
		return mt.id(n.tparams[k], 0)
	}
	name := t.Name
	if strings.HasPrefix(name, "__gnu_cxx::__aligned_membuf<") || strings.HasPrefix(name, "__gnu_cxx::__aligned_buffer<") {
		if v := arg(0); v != NoType && mt.types[v].Size <= t.Size {
			return rule{from: NoType, to: NoType, storage: v}
		}
		return noRule
	}
	for _, k := range nodeKinds {
		base, ok := mt.ByName(k.base)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, k.node):
			return rule{from: base, to: id, storage: NoType}
		case strings.HasPrefix(name, k.container):
			node := mt.nodeType(k.node, arg(k.arg), n)
			if node == NoType {
				return noRule
			}
			return rule{from: base, to: node, storage: NoType}
		}
	}
	return noRule
}

// nodeType returns the node type of template node whose value is v,
// for the container c: NoType when there is none, or more than one and
// the container's traits do not choose.
func (mt *ModuleTypes) nodeType(node string, v TypeID, c *dnode) TypeID {
	if v == NoType {
		return NoType
	}
	if mt.cont.nodes == nil {
		mt.cont.nodes = map[string][]TypeID{}
		for name, off := range mt.byName {
			for _, k := range nodeKinds {
				if !strings.HasPrefix(name, k.node) {
					continue
				}
				if dn := mt.node(off); dn != nil && len(dn.tparams) > 0 {
					id := mt.id(off, 0)
					if a := mt.id(dn.tparams[0], 0); a != NoType && id != NoType {
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
		if traits != NoType {
			tn := mt.types[traits].Name
			for _, cache := range []string{"true", "false"} {
				if strings.Contains(tn, "_Hashtable_traits<"+cache+",") {
					var match []TypeID
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
		return NoType
	}
	return ids[0]
}

// retargeted returns the type a pointer to target points at under the
// rules rt: a container's node for its base, and for a pointer to the
// base (a hash table's buckets), a pointer to the node.
func (mt *ModuleTypes) retargeted(rt *retarget, target TypeID) TypeID {
	if rt == nil || target == NoType {
		return target
	}
	for r := rt; r != nil; r = r.next {
		if r.from == target {
			return r.to
		}
	}
	if t := mt.types[target]; t.Kind == KindPointer && t.Elem != NoType {
		for r := rt; r != nil; r = r.next {
			if r.from == t.Elem {
				return mt.pointerTo(r.to)
			}
		}
	}
	return target
}

// pointerTo returns a pointer type to id, made up if need be.
func (mt *ModuleTypes) pointerTo(id TypeID) TypeID {
	if p, ok := mt.cont.ptrTo[id]; ok {
		return p
	}
	if mt.cont.ptrTo == nil {
		mt.cont.ptrTo = map[TypeID]TypeID{}
	}
	p := TypeID(len(mt.types))
	mt.types = append(mt.types, Type{Name: mt.types[id].Name + "*", Size: 8, Kind: KindPointer, Elem: id})
	mt.cont.ptrTo[id] = p
	return p
}

// ByDemangledName returns the complete struct or class a demangled name
// (as c++filt spells it: "std::pair<int const, long>") names, whose
// DWARF name gcc spells its own way ("std::pair<int const, long int>").
func (mt *ModuleTypes) ByDemangledName(name string) (TypeID, bool) {
	if mt.byCanon == nil {
		mt.byCanon = make(map[string]dwarf.Offset, len(mt.byName))
		for n, off := range mt.byName {
			mt.byCanon[canonName(n)] = off
		}
	}
	off, ok := mt.byCanon[canonName(name)]
	if !ok {
		return NoType, false
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
