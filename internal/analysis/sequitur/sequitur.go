// Package sequitur keeps several sequences (paths) in one grammar built by
// the Sequitur algorithm (Nevill-Manning & Witten, "Identifying
// Hierarchical Structure in Sequences: A linear-time algorithm", JAIR 7,
// 1997): no pair of adjacent symbols (digram) appears twice in the
// grammar, and every rule but a path's own is used at least twice.
//
// Each path is a rule of its own (S1, S2, … in the order they were first
// added) whose right-hand side never spans into another path; rules shared
// by paths (N1, N2, …) hold what the paths have in common. A path added
// again is stored once, with a count (as in JP2009-217617, fig. 9 steps 906–908).
// Adding a symbol costs amortised constant time.
package sequitur

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
)

// Symbol is a terminal: what the caller's events encode to.
type Symbol = uint64

// node is one symbol on a rule's right-hand side, or a rule's guard: the
// node that closes its right-hand side into a ring.
type node struct {
	prev, next *node
	term       Symbol
	rule       *rule // a nonterminal: the rule it stands for
	guard      *rule // a guard: the rule it closes
}

// rule is a production: a path's (path > 0) or a shared one.
type rule struct {
	guard *node
	uses  int // nonterminals standing for it
	id    int // creation order
	path  int // S<path>; 0 for a shared rule
}

func (r *rule) first() *node { return r.guard.next }
func (r *rule) last() *node  { return r.guard.prev }

// sym identifies what a node stands for, for the digram index.
type sym struct {
	rule *rule
	term Symbol
}

type digram struct{ a, b sym }

// Grammar is the grammar of the paths added so far.
type Grammar struct {
	digrams map[digram]*node
	paths   []*rule
	counts  []int
	byHash  map[uint64][]int // path hashes → path indexes
	seed    maphash.Seed
	nextID  int
}

// New returns an empty grammar.
func New() *Grammar {
	return &Grammar{digrams: map[digram]*node{}, byHash: map[uint64][]int{}, seed: maphash.MakeSeed()}
}

// Add adds a path and returns its index (0 for S1). When an identical path
// was added before, the grammar is left as it was, the path's count grows
// and isNew is false.
func (g *Grammar) Add(path []Symbol) (index int, isNew bool) { return g.AddN(path, 1) }

// AddN is Add of n copies of a path (n ≥ 1).
func (g *Grammar) AddN(path []Symbol, n int) (index int, isNew bool) {
	h := g.hash(path)
	for _, i := range g.byHash[h] {
		if slices.Equal(g.Path(i), path) {
			g.counts[i] += n
			return i, false
		}
	}
	r := g.newRule()
	r.path = len(g.paths) + 1
	g.paths = append(g.paths, r)
	g.counts = append(g.counts, n)
	g.byHash[h] = append(g.byHash[h], len(g.paths)-1)
	for _, s := range path {
		n := &node{term: s}
		insertAfter(r.last(), n)
		g.check(n.prev)
	}
	return len(g.paths) - 1, true
}

func (g *Grammar) hash(path []Symbol) uint64 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	var b [8]byte
	for _, s := range path {
		for i := range b {
			b[i] = byte(s >> (8 * i))
		}
		h.Write(b[:])
	}
	return h.Sum64()
}

// Len returns how many distinct paths the grammar holds.
func (g *Grammar) Len() int { return len(g.paths) }

// Count returns how many times path i was added.
func (g *Grammar) Count(i int) int { return g.counts[i] }

// Path returns path i expanded.
func (g *Grammar) Path(i int) []Symbol {
	var out []Symbol
	var expand func(r *rule)
	expand = func(r *rule) {
		for n := r.first(); n.guard == nil; n = n.next {
			if n.rule != nil {
				expand(n.rule)
			} else {
				out = append(out, n.term)
			}
		}
	}
	expand(g.paths[i])
	return out
}

// Size returns the number of symbols on all right-hand sides: what the
// grammar stores in place of the paths' symbols.
func (g *Grammar) Size() int {
	n := 0
	for _, r := range g.rules() {
		for x := r.first(); x.guard == nil; x = x.next {
			n++
		}
	}
	return n
}

// Rule is one production as printed: its name (S1…, N1…) and its
// right-hand side, nonterminals by name and terminals through the
// caller's namer.
type Rule struct {
	Name string
	RHS  []string
}

// Rules returns the paths' rules, then the shared rules numbered in the
// order they were made.
func (g *Grammar) Rules(name func(Symbol) string) []Rule {
	rules := g.rules()
	names := map[*rule]string{}
	shared := 0
	for _, r := range rules {
		if r.path > 0 {
			names[r] = fmt.Sprintf("S%d", r.path)
		} else {
			shared++
			names[r] = fmt.Sprintf("N%d", shared)
		}
	}
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i].Name = names[r]
		for n := r.first(); n.guard == nil; n = n.next {
			if n.rule != nil {
				out[i].RHS = append(out[i].RHS, names[n.rule])
			} else {
				out[i].RHS = append(out[i].RHS, name(n.term))
			}
		}
	}
	return out
}

// String prints the grammar a rule a line: "S1 → N1 F".
func (g *Grammar) String(name func(Symbol) string) string {
	var b strings.Builder
	for _, r := range g.Rules(name) {
		fmt.Fprintf(&b, "%s → %s\n", r.Name, strings.Join(r.RHS, " "))
	}
	return b.String()
}

// rules returns the live rules: paths first, then shared rules by age.
func (g *Grammar) rules() []*rule {
	seen := map[*rule]bool{}
	var shared []*rule
	var walk func(r *rule)
	walk = func(r *rule) {
		for n := r.first(); n.guard == nil; n = n.next {
			if n.rule != nil && !seen[n.rule] {
				seen[n.rule] = true
				shared = append(shared, n.rule)
				walk(n.rule)
			}
		}
	}
	for _, p := range g.paths {
		walk(p)
	}
	slices.SortFunc(shared, func(a, b *rule) int { return a.id - b.id })
	return append(slices.Clone(g.paths), shared...)
}

func (g *Grammar) newRule() *rule {
	g.nextID++
	r := &rule{id: g.nextID}
	r.guard = &node{guard: r}
	r.guard.prev, r.guard.next = r.guard, r.guard
	return r
}

func symOf(n *node) sym { return sym{rule: n.rule, term: n.term} }

func keyOf(n *node) digram { return digram{symOf(n), symOf(n.next)} }

// same reports whether two nodes are the same symbol (guards never are).
func same(a, b *node) bool { return a.guard == nil && b.guard == nil && symOf(a) == symOf(b) }

func insertAfter(at, n *node) {
	n.prev, n.next = at, at.next
	at.next.prev = n
	at.next = n
}

// check enforces digram uniqueness for the digram starting at n; it
// reports whether it changed the grammar.
func (g *Grammar) check(n *node) bool {
	if n.guard != nil || n.next.guard != nil {
		return false
	}
	k := keyOf(n)
	m, ok := g.digrams[k]
	if !ok {
		g.digrams[k] = n
		return false
	}
	if m == n || m.next == n || n.next == m {
		return false // the same, or overlapping as in "aaa"
	}
	g.match(n, m)
	return true
}

// match replaces two occurrences of a digram, n's and m's, by a rule.
func (g *Grammar) match(n, m *node) {
	var r *rule
	if m.prev.guard != nil && m.next.next.guard != nil && m.prev.guard.path == 0 {
		// m's digram is a whole shared rule: use it.
		r = m.prev.guard
		g.substitute(n, r)
	} else {
		r = g.newRule()
		g.appendCopy(r, n)
		g.appendCopy(r, n.next)
		g.substitute(m, r)
		g.substitute(n, r)
		g.digrams[keyOf(r.first())] = r.first()
	}
	// Rule utility: a rule now used once goes back where it is used.
	if f := r.first(); f.rule != nil && f.rule.uses == 1 {
		g.expand(f)
	}
	if l := r.last(); l.rule != nil && l.rule.uses == 1 {
		g.expand(l)
	}
}

func (g *Grammar) appendCopy(r *rule, n *node) {
	c := &node{term: n.term, rule: n.rule}
	if c.rule != nil {
		c.rule.uses++
	}
	insertAfter(r.last(), c)
}

// substitute replaces n and the node after it by a nonterminal for r.
func (g *Grammar) substitute(n *node, r *rule) {
	q := n.prev
	g.remove(q.next)
	g.remove(q.next)
	insertAfter(q, &node{rule: r})
	r.uses++
	if !g.check(q) {
		g.check(q.next)
	}
}

// remove takes n out of its rule.
func (g *Grammar) remove(n *node) {
	g.join(n.prev, n.next)
	g.forget(n)
	if n.rule != nil {
		n.rule.uses--
	}
}

// forget drops the digram starting at n from the index, if n is its entry.
func (g *Grammar) forget(n *node) {
	if n.guard != nil || n.next.guard != nil {
		return
	}
	if k := keyOf(n); g.digrams[k] == n {
		delete(g.digrams, k)
	}
}

// join links left to right. The digram that started at left goes; in a
// run of three equal symbols the index keeps one of its two (overlapping)
// digrams, so it must be restored when the other goes.
func (g *Grammar) join(left, right *node) {
	if left.next != nil {
		g.forget(left)
		if right.prev != nil && right.next != nil && same(right, right.prev) && same(right, right.next) {
			g.digrams[keyOf(right)] = right
		}
		if left.prev != nil && left.next != nil && same(left, left.next) && same(left, left.prev) {
			g.digrams[keyOf(left.prev)] = left.prev
		}
	}
	left.next, right.prev = right, left
}

// expand replaces the nonterminal n, whose rule is used only there, by the
// rule's right-hand side.
func (g *Grammar) expand(n *node) {
	left, right := n.prev, n.next
	r := n.rule
	f, l := r.first(), r.last()
	g.forget(n)
	g.join(left, right) // n out, without giving up a use of r
	g.join(left, f)
	g.join(l, right)
	if left.guard == nil {
		if k := keyOf(left); g.digrams[k] == nil {
			g.digrams[k] = left
		}
	}
	if right.guard == nil {
		g.digrams[keyOf(l)] = l
	}
	r.guard.prev, r.guard.next = r.guard, r.guard
	r.uses = 0
}
