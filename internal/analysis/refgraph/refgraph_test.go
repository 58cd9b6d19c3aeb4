package refgraph

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// fakeMem is memory made of words at addresses.
type fakeMem map[uint64]uint64

func (m fakeMem) ReadRanges(rs []ptrace.Range) (int, error) {
	total := 0
	for i := range rs {
		r := &rs[i]
		for o := 0; o+8 <= len(r.Buf); o += 8 {
			binary.LittleEndian.PutUint64(r.Buf[o:], m[r.Addr+uint64(o)])
		}
		r.N = len(r.Buf)
		total += r.N
	}
	return total, nil
}

// heap lays out n blocks of 32 bytes at 0x1000, 0x1100, ...
func heap(n int) []Block {
	bs := make([]Block, n)
	for i := range bs {
		bs[i] = Block{Addr: 0x1000 + uint64(i)*0x100, Size: 32}
	}
	return bs
}

func at(i int) uint64 { return 0x1000 + uint64(i)*0x100 }

// TestTreeRetained: a binary tree of 7 blocks held by one global; the
// root's retained size is the sum of all, a leaf's its own, and the path
// to a leaf runs through its ancestors at the right offsets.
func TestTreeRetained(t *testing.T) {
	bs := heap(8)
	mem := fakeMem{0x9000: at(0)}
	for i := range 3 {
		mem[at(i)+8] = at(2*i + 1)
		mem[at(i)+16] = at(2*i + 2)
	}
	// Block 7: a leaked block pointing into the tree (does not own it).
	mem[at(7)] = at(2) + 4 // an interior pointer
	g, err := Build(bs, []Root{{Addr: 0x9000, Len: 8, What: "g_tree"}}, nil, mem)
	if err != nil {
		t.Fatal(err)
	}
	idom := g.Dominators()
	ret := g.Retained(idom)
	if ret[0] != 7*32 {
		t.Errorf("root retains %d, want %d", ret[0], 7*32)
	}
	if ret[2] != 3*32 || ret[6] != 32 || ret[7] != 32 {
		t.Errorf("retained %v", ret)
	}
	if idom[5] != 2 || idom[0] != -1 || idom[7] != -1 {
		t.Errorf("idom %v", idom)
	}
	p := g.ShortestPaths([]int32{0})
	var chain []int32
	for v := int32(5); v >= 0; v = p.Parent[v] {
		chain = append(chain, v)
	}
	if !slices.Equal(chain, []int32{5, 2, 0}) || p.Off[5] != 8 || p.Off[2] != 16 || g.Off[len(g.Off)-1] != Interior|0 || p.RootEdge[0] != 0 {
		t.Errorf("path %v offs %v", chain, p.Off)
	}
	if p.Parent[7] != Unreachable {
		t.Errorf("leaked block has parent %d", p.Parent[7])
	}
}

// TestDiamondAndCycle: two paths to a block leave it dominated by their
// fork; a leaked cycle is dominated by one of its own blocks.
func TestDiamondAndCycle(t *testing.T) {
	bs := heap(6)
	mem := fakeMem{0x9000: at(0),
		at(0): at(1), at(0) + 8: at(2), at(1): at(3), at(2): at(3),
		at(4): at(5), at(5): at(4)} // 4 <-> 5 leaked cycle
	g, err := Build(bs, []Root{{Addr: 0x9000, Len: 8}}, nil, mem)
	if err != nil {
		t.Fatal(err)
	}
	idom := g.Dominators()
	if idom[3] != 0 || idom[1] != 0 || idom[2] != 0 {
		t.Errorf("idom %v", idom)
	}
	ret := g.Retained(idom)
	if ret[0] != 4*32 || ret[4]+ret[5] != 3*32 {
		t.Errorf("retained %v", ret)
	}
	// Dropping the edge 0 -> 1 leaves 1 unreachable.
	g.Keep(func(i int32, off uint32) bool { return !(i == 0 && off == 0) })
	p := g.ShortestPaths([]int32{0})
	if p.Parent[1] != Unreachable || p.Parent[3] != 2 {
		t.Errorf("parents %v", p.Parent)
	}
}

// BenchmarkGraph measures, per million blocks, building the graph, its
// dominators and retained sizes, and the paths to root: a heap of lists
// of 100 blocks of 64 bytes, each pointing at the next and at one of
// 1,000 shared blocks, with non-pointer words between; a root per list.
func BenchmarkGraph(b *testing.B) {
	const n = 1 << 20
	bs := make([]Block, n)
	mem := make(sliceMem, n*8)
	for i := range bs {
		bs[i] = Block{Addr: 0x10000000 + uint64(i)*64, Size: 64}
		w := mem[i*8 : i*8+8]
		if i+1 < n && i%100 != 99 {
			w[0] = bs[i].Addr + 64
		}
		w[1] = 0x10000000 + uint64(i%1000)*64
		w[2], w[3] = uint64(i), 0x7f0000000000
	}
	roots := make([]uint64, 0)
	for i := 0; i < n; i += 100 {
		roots = append(roots, 0x10000000+uint64(i)*64)
	}
	perM := func(b *testing.B) {
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*float64(1<<20)/float64(n), "s/Mblocks")
	}
	g, err := Build(bs, nil, roots, mem)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("build", func(b *testing.B) {
		for range b.N {
			if _, err := Build(bs, nil, roots, mem); err != nil {
				b.Fatal(err)
			}
		}
		perM(b)
	})
	b.Run("dominators", func(b *testing.B) {
		for range b.N {
			g.Retained(g.Dominators())
		}
		perM(b)
	})
	b.Run("paths", func(b *testing.B) {
		all := make([]int32, len(g.RootEdges))
		for i := range all {
			all[i] = int32(i)
		}
		for range b.N {
			g.ShortestPaths(all)
		}
		perM(b)
	})
}

// sliceMem is 64-byte blocks from 0x10000000, 8 words each.
type sliceMem []uint64

func (m sliceMem) ReadRanges(rs []ptrace.Range) (int, error) {
	for i := range rs {
		r := &rs[i]
		base := int((r.Addr - 0x10000000) / 8)
		for o := 0; o+8 <= len(r.Buf); o += 8 {
			binary.LittleEndian.PutUint64(r.Buf[o:], m[base+o/8])
		}
		r.N = len(r.Buf)
	}
	return 0, nil
}
