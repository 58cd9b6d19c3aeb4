// Package flamegraph builds flame graph trees from stacks and writes them
// as one self-contained interactive HTML page; its script (Script, Style)
// also draws the flame graphs of the web UI (internal/render/webui).
package flamegraph

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"sort"
	"sync"
)

// Node is one frame of a flame graph: its name, the value of all stacks
// through it, and its callees, biggest first. JSON names are short: a
// large profile has many nodes.
type Node struct {
	Name     string  `json:"n"`
	Value    uint64  `json:"v"`
	Children []*Node `json:"c,omitempty"`
	index    map[string]*Node
}

// Tree collects stacks into a flame graph; the zero value is not usable:
// use NewTree.
type Tree struct{ Root *Node }

// NewTree returns an empty tree whose root is named root ("all").
func NewTree(root string) *Tree { return &Tree{Root: &Node{Name: root}} }

// Add adds value v to the stack frames, outermost first. A value of 0
// adds nothing.
func (t *Tree) Add(frames []string, v uint64) {
	if v == 0 {
		return
	}
	n := t.Root
	n.Value += v
	for _, f := range frames {
		c := n.index[f]
		if c == nil {
			if n.index == nil {
				n.index = map[string]*Node{}
			}
			c = &Node{Name: f}
			n.index[f] = c
			n.Children = append(n.Children, c)
		}
		c.Value += v
		n = c
	}
}

// Finish sorts every node's callees, biggest first (then by name, so the
// layout is the same each time), and drops the lookup maps.
func (t *Tree) Finish() *Node {
	var walk func(n *Node)
	walk = func(n *Node) {
		n.index = nil
		sort.Slice(n.Children, func(i, j int) bool {
			a, b := n.Children[i], n.Children[j]
			if a.Value != b.Value {
				return a.Value > b.Value
			}
			return a.Name < b.Name
		})
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(t.Root)
	return t.Root
}

// Script is the flame graph's JavaScript: it defines flameGraph(el, root,
// opts) (see flame.js).
//
//go:embed flame.js
var Script string

// Style is the flame graph's CSS.
//
//go:embed flame.css
var Style string

//go:embed page.html
var pageHTML string

// page is parsed on first use: every leakpath command pays for what its
// package variables do at start-up, and this was the largest of ours.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("flame").Parse(pageHTML))
})

// Page is what the HTML page shows.
type Page struct {
	Title string // the page's title and heading
	Value string // what is counted ("leaked-bytes"...)
	Unit  string // "bytes" or "blocks": how values are formatted
	Root  *Node
}

// WriteHTML writes p as one HTML page with its script, style and data
// inline: it needs no network and no other file.
func WriteHTML(w io.Writer, p Page) error {
	data, err := json.Marshal(p.Root)
	if err != nil {
		return fmt.Errorf("flame graph: %w", err)
	}
	return page().Execute(w, struct {
		Page
		Script template.JS
		Style  template.CSS
		Data   template.JS
	}{p, template.JS(Script), template.CSS(Style), template.JS(data)})
}

// Prune keeps a tree of more than max nodes drawable and quick to send:
// it drops the smallest nodes (with their callees) until at most max
// remain. A dropped node's value stays in its caller's, as the caller's
// own; the values of the nodes kept do not change. It returns how many
// nodes it dropped.
func Prune(root *Node, max int) int {
	count := func() int {
		n, st := 0, []*Node{root}
		for len(st) > 0 {
			x := st[len(st)-1]
			st = st[:len(st)-1]
			n++
			st = append(st, x.Children...)
		}
		return n
	}
	total := count()
	if total <= max || root.Value == 0 {
		return 0
	}
	// Raise the smallest value kept until the tree fits.
	for min := root.Value / uint64(max); ; min = min*2 + 1 {
		var cut func(n *Node)
		cut = func(n *Node) {
			kept := n.Children[:0]
			for _, c := range n.Children {
				if c.Value >= min {
					cut(c)
					kept = append(kept, c)
				}
			}
			clear(n.Children[len(kept):])
			n.Children = kept
		}
		cut(root)
		if n := count(); n <= max {
			return total - n
		}
	}
}
