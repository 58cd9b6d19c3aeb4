package refgraph

import "slices"

// Paths are the shortest paths to root of a graph's blocks: a tree
// whose parent links lead from each reachable block to a root word.
type Paths struct {
	// Parent is the block holding the edge to block i; NoParent when a
	// root word holds it (RootEdge[i] says which), Unreachable when none.
	Parent []int32
	// Off is the offset of that edge's word in the parent block.
	Off []uint32
	// RootEdge is the index in Graph.RootEdges of the root word of a
	// block a root holds, else -1.
	RootEdge []int32
}

// Parent values that are not blocks.
const (
	NoParent    = -1
	Unreachable = -2
)

// ShortestPaths finds, breadth first, the shortest chain from a root
// word to every block. Root edges come in tiers (indexes of
// g.RootEdges): the blocks the first tier reaches get their paths from
// it alone, the next tier's from what is left, and so on (put the
// best-named roots first: a global's chain of fields explains more than
// a stale word on a stack).
func (g *Graph) ShortestPaths(tiers ...[]int32) *Paths {
	n := len(g.Blocks)
	p := &Paths{Parent: make([]int32, n), Off: make([]uint32, n), RootEdge: make([]int32, n)}
	for i := range p.Parent {
		p.Parent[i], p.RootEdge[i] = Unreachable, -1
	}
	queue := make([]int32, 0, 1024)
	for _, order := range tiers {
		queue = queue[:0]
		for _, re := range order {
			t := g.RootEdges[re].To
			if p.Parent[t] == Unreachable {
				p.Parent[t], p.RootEdge[t] = NoParent, re
				queue = append(queue, t)
			}
		}
		for q := 0; q < len(queue); q++ {
			b := queue[q]
			to, off := g.Edges(b)
			for k, t := range to {
				if p.Parent[t] == Unreachable {
					p.Parent[t], p.Off[t] = b, off[k]
					queue = append(queue, t)
				}
			}
		}
	}
	return p
}

// Dominators returns the immediate dominator of every block in the graph
// rooted at a virtual root that points at every root word's block and,
// for blocks no root reaches, at the blocks nothing points to and then
// at one block of each cycle left (so a leaked structure is dominated by
// its own head; such blocks do not keep blocks a root reaches).
// idom[i] is a block, or -1 for the virtual root.
func (g *Graph) Dominators() []int32 {
	n := len(g.Blocks)
	// Node 0 is the virtual root, block i is node i+1; nodes are
	// numbered in the depth-first preorder from it.
	var rootSucc []int32
	seen := make([]bool, n)
	pre := make([]int32, n+1)     // node → number
	vert := make([]int32, 1, n+1) // number → node
	par := make([]int32, 1, n+1)  // number → its DFS parent's number
	type frame struct {
		node int32
		k    int64
	}
	var stack []frame
	visit := func(node, parent int32) {
		pre[node] = int32(len(vert))
		vert = append(vert, node)
		par = append(par, pre[parent])
	}
	dfs := func(b int32) {
		seen[b] = true
		visit(b+1, 0)
		stack = append(stack[:0], frame{b + 1, g.Start[b]})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			blk := f.node - 1
			if f.k < g.Start[blk+1] {
				t := g.To[f.k]
				f.k++
				if !seen[t] {
					seen[t] = true
					visit(t+1, f.node)
					stack = append(stack, frame{t + 1, g.Start[t]})
				}
				continue
			}
			stack = stack[:len(stack)-1]
		}
	}
	for _, re := range g.RootEdges {
		if !seen[re.To] {
			rootSucc = append(rootSucc, re.To)
			dfs(re.To)
		}
	}
	reached := slices.Clone(seen) // from the roots
	indeg := make([]int32, n)
	for _, t := range g.To {
		indeg[t]++
	}
	for i := range n {
		if !seen[i] && indeg[i] == 0 {
			rootSucc = append(rootSucc, int32(i))
			dfs(int32(i))
		}
	}
	for i := range n {
		if !seen[i] {
			rootSucc = append(rootSucc, int32(i))
			dfs(int32(i))
		}
	}

	// Predecessors, as node numbers.
	pstart := make([]int64, n+3) // counts of node v at v+2, then starts at v+1
	// Blocks no root reaches do not keep reachable ones: their edges into
	// them are left out (the depth-first search never took one: their
	// targets were seen before).
	leftOut := func(b, t int32) bool { return reached[t] && !reached[b] }
	for b := range n {
		for k := g.Start[b]; k < g.Start[b+1]; k++ {
			if !leftOut(int32(b), g.To[k]) {
				pstart[g.To[k]+3]++
			}
		}
	}
	for _, t := range rootSucc {
		pstart[t+3]++
	}
	for i := 2; i < len(pstart); i++ {
		pstart[i] += pstart[i-1]
	}
	preds := make([]int32, len(g.To)+len(rootSucc))
	fill := pstart[1:]
	for _, t := range rootSucc {
		preds[fill[t+1]] = 0
		fill[t+1]++
	}
	for b := range n {
		for k := g.Start[b]; k < g.Start[b+1]; k++ {
			t := g.To[k]
			if leftOut(int32(b), t) {
				continue
			}
			preds[fill[t+1]] = int32(b + 1)
			fill[t+1]++
		}
	}
	// fill[i] now is the end of node i's predecessors, pstart[i] the start.

	// Semidominators as Lengauer and Tarjan (1979) compute them (simple
	// linking, path compression without recursion), then the immediate
	// dominators as the nearest common ancestors of the semidominators
	// on the DFS tree (Georgiadis' semi-NCA): near-linear where the
	// iterative algorithm took quadratic time on the long cycles of
	// doubly linked lists.
	nn := int32(len(vert))
	semi := make([]int32, nn)
	label := make([]int32, nn)
	anc := make([]int32, nn)
	for i := range nn {
		semi[i], label[i], anc[i] = i, i, -1
	}
	var path []int32
	eval := func(v int32) int32 {
		if anc[v] < 0 {
			return v
		}
		path = path[:0]
		for u := v; anc[anc[u]] >= 0; u = anc[u] {
			path = append(path, u)
		}
		for k := len(path) - 1; k >= 0; k-- {
			x := path[k]
			a := anc[x]
			if semi[label[a]] < semi[label[x]] {
				label[x] = label[a]
			}
			anc[x] = anc[a]
		}
		return label[v]
	}
	for i := nn - 1; i >= 1; i-- {
		w := vert[i]
		s := par[i]
		for j := pstart[w]; j < fill[w]; j++ {
			v := pre[preds[j]]
			if v <= i {
				s = min(s, v)
			} else {
				s = min(s, semi[eval(v)])
			}
		}
		semi[i] = s
		anc[i] = par[i]
	}
	idom := make([]int32, nn)
	for i := int32(1); i < nn; i++ {
		d := par[i]
		for d > semi[i] {
			d = idom[d]
		}
		idom[i] = d
	}
	out := make([]int32, n)
	for b := range n {
		out[b] = vert[idom[pre[b+1]]] - 1
	}
	return out
}

// Retained returns each block's retained size: its own size and that of
// every block it dominates (idom from Dominators).
func (g *Graph) Retained(idom []int32) []uint64 {
	n := len(g.Blocks)
	ret := make([]uint64, n)
	// Children before parents: order blocks by depth in the tree.
	depth := make([]int32, n)
	for i := range n {
		if depth[i] == 0 {
			// Walk up to a known depth, then number the way back.
			var path []int32
			for v := int32(i); v >= 0 && depth[v] == 0; v = idom[v] {
				path = append(path, v)
			}
			d := int32(0)
			if last := path[len(path)-1]; idom[last] >= 0 {
				d = depth[idom[last]]
			}
			for k := len(path) - 1; k >= 0; k-- {
				d++
				depth[path[k]] = d
			}
		}
	}
	byDepth := make([]int32, n)
	for i := range byDepth {
		byDepth[i] = int32(i)
		ret[i] = g.Blocks[i].Size
	}
	// Counting sort by depth, deepest first.
	maxD := int32(0)
	for _, d := range depth {
		maxD = max(maxD, d)
	}
	cnt := make([]int, maxD+2)
	for _, d := range depth {
		cnt[maxD-d+1]++
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}
	for i := range n {
		k := maxD - depth[i]
		byDepth[cnt[k]] = int32(i)
		cnt[k]++
	}
	for _, v := range byDepth {
		if p := idom[v]; p >= 0 {
			ret[p] += ret[v]
		}
	}
	return ret
}
