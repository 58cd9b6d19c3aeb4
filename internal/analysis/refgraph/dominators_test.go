package refgraph

import (
	"math/rand"
	"slices"
	"testing"
)

// TestDominatorsRandom: on random graphs (roots, cycles, blocks no root
// reaches), the immediate dominators are those of the iterative
// algorithm of Cooper, Harvey and Kennedy, which Dominators used before
// (slow on long cycles, simple enough to be the oracle).
func TestDominatorsRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + rng.Intn(40)
		g := &Graph{Blocks: make([]Block, n), Start: make([]int64, n+1)}
		edges := rng.Intn(3 * n)
		var to [][]int32 = make([][]int32, n)
		for range edges {
			b := rng.Intn(n)
			to[b] = append(to[b], int32(rng.Intn(n)))
		}
		for b := range n {
			g.Start[b+1] = g.Start[b] + int64(len(to[b]))
			g.To = append(g.To, to[b]...)
		}
		for range rng.Intn(4) {
			g.RootEdges = append(g.RootEdges, RootEdge{To: int32(rng.Intn(n))})
		}
		got, want := g.Dominators(), dominatorsCHK(g)
		if !slices.Equal(got, want) {
			t.Fatalf("graph %v roots %v: idom %v, want %v", to, g.RootEdges, got, want)
		}
	}
}

// TestDominatorsLongList: a circular doubly linked list of 200,000
// nodes whose head a root holds (std::list's shape): every node is
// dominated by the head, which retains them all.
func TestDominatorsLongList(t *testing.T) {
	const n = 200000
	g := &Graph{Blocks: make([]Block, n), Start: make([]int64, n+1)}
	for b := range n {
		g.Blocks[b].Size = 8
		g.To = append(g.To, int32((b+1)%n), int32((b+n-1)%n))
		g.Start[b+1] = int64(len(g.To))
	}
	g.RootEdges = []RootEdge{{To: 0}}
	idom := g.Dominators()
	for b := 1; b < n; b++ {
		if idom[b] != 0 {
			t.Fatalf("block %d dominated by %d, want the head", b, idom[b])
		}
	}
	if ret := g.Retained(idom); ret[0] != 8*n {
		t.Errorf("the head retains %d, want %d", ret[0], 8*n)
	}
}
func dominatorsCHK(g *Graph) []int32 {
	n := len(g.Blocks)
	// Node 0 is the virtual root, block i is node i+1.
	var rootSucc []int32
	seen := make([]bool, n)
	post := make([]int32, 0, n+1) // nodes in postorder
	order := make([]int32, n+1)   // postorder number of each node, -1 unvisited
	for i := range order {
		order[i] = -1
	}
	type frame struct {
		node int32
		k    int64
	}
	var stack []frame
	dfs := func(b int32) {
		seen[b] = true
		stack = append(stack[:0], frame{b + 1, g.Start[b]})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			blk := f.node - 1
			if f.k < g.Start[blk+1] {
				t := g.To[f.k]
				f.k++
				if !seen[t] {
					seen[t] = true
					stack = append(stack, frame{t + 1, g.Start[t]})
				}
				continue
			}
			order[f.node] = int32(len(post))
			post = append(post, f.node)
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
	order[0] = int32(len(post))
	post = append(post, 0)

	// Predecessors, as node numbers.
	pstart := make([]int64, n+3) // counts of node v at v+2, then starts at v+1
	// Blocks no root reaches do not keep reachable ones: their edges into
	// them are left out.
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

	idom := make([]int32, n+1)
	for i := range idom {
		idom[i] = -1
	}
	idom[0] = 0
	intersect := func(a, b int32) int32 {
		for a != b {
			for order[a] < order[b] {
				a = idom[a]
			}
			for order[b] < order[a] {
				b = idom[b]
			}
		}
		return a
	}
	for changed := true; changed; {
		changed = false
		for k := len(post) - 2; k >= 0; k-- { // reverse postorder, root excluded
			v := post[k]
			nd := int32(-1)
			for j := pstart[v]; j < fill[v]; j++ {
				p := preds[j]
				if idom[p] < 0 {
					continue
				}
				if nd < 0 {
					nd = p
				} else {
					nd = intersect(p, nd)
				}
			}
			if nd >= 0 && idom[v] != nd {
				idom[v] = nd
				changed = true
			}
		}
	}
	out := make([]int32, n)
	for i := range n {
		out[i] = idom[i+1] - 1
	}
	return out
}
