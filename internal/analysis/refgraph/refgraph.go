// Package refgraph builds the reference graph of a stopped process's
// heap: which live blocks point into which (every aligned pointer-sized
// word whose value lies inside a live block), and which roots (globals,
// stacks, registers) point into them; and from it the paths to root and
// the dominator tree that gives each block its retained size.
package refgraph

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// Block is a live block.
type Block struct{ Addr, Size uint64 }

// Root is a range of memory whose words are roots; What names it.
type Root struct {
	Addr, Len uint64
	What      string
}

// Memory reads the stopped process (*ptrace.Tracer, the scan's heap copy).
type Memory interface {
	ReadRanges(rs []ptrace.Range) (int, error)
}

// RootEdge is a root word that points into a block.
type RootEdge struct {
	Word uint64 // the word's address
	To   int32  // the block
	Root int32  // index of the Root holding the word (-1: a register)
	// Interior: the word points inside the block, not at its start.
	Interior bool
}

// Interior is set in an Off of an edge whose word points inside its
// block, not at its start; the offset is Off &^ Interior.
const Interior = 1 << 31

// Graph is the reference graph of blocks sorted by address: node i is
// Blocks[i]; its out-edges are To[Start[i]:Start[i+1]], each from the
// word at offset Off[...] of block i (with the Interior bit).
type Graph struct {
	Blocks    []Block
	Roots     []Root
	Start     []int64
	To        []int32
	Off       []uint32
	First     []uint64 // each block's first word (0 if smaller than one)
	RootEdges []RootEdge
	Unread    int // blocks that could not be read (no out-edges)
}

// batchBytes bounds one read of blocks.
const batchBytes = 8 << 20

// Build reads the blocks (sorted by address, not overlapping) and the
// roots from mem, and the register words regs, and returns the graph.
func Build(blocks []Block, roots []Root, regs []uint64, mem Memory) (*Graph, error) {
	if !sort.SliceIsSorted(blocks, func(i, j int) bool { return blocks[i].Addr < blocks[j].Addr }) {
		return nil, fmt.Errorf("refgraph: blocks not sorted by address")
	}
	g := &Graph{Blocks: blocks, Roots: roots, Start: make([]int64, len(blocks)+1), First: make([]uint64, len(blocks))}
	var rs []ptrace.Range
	var idx []int
	buf := make([]byte, 0, batchBytes)
	flush := func() error {
		if len(rs) == 0 {
			return nil
		}
		_, err := mem.ReadRanges(rs)
		_ = err // unreadable blocks simply have no edges
		for j, r := range rs {
			i := idx[j]
			if r.N < len(r.Buf) {
				g.Unread++
			}
			b := r.Buf[:r.N&^7]
			if len(b) >= 8 {
				g.First[i] = binary.LittleEndian.Uint64(b)
			}
			for o := 0; o+8 <= len(b); o += 8 {
				v := binary.LittleEndian.Uint64(b[o:])
				if t := g.find(v); t >= 0 && t != int32(i) {
					off := uint32(o)
					if v != blocks[t].Addr {
						off |= Interior
					}
					g.To = append(g.To, t)
					g.Off = append(g.Off, off)
				}
			}
			g.Start[i+1] = int64(len(g.To))
		}
		rs, idx, buf = rs[:0], idx[:0], buf[:0]
		return nil
	}
	for i := range g.Start {
		g.Start[i] = -1 // not read yet
	}
	for i, b := range blocks {
		n := b.Size &^ 7
		if n == 0 {
			continue
		}
		if n > batchBytes || n >= Interior {
			n = batchBytes // the rest of a huge block is not scanned for edges
		}
		if uint64(len(buf))+n > batchBytes {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		buf = append(buf, make([]byte, n)...)
		rs = append(rs, ptrace.Range{Addr: b.Addr, Buf: buf[len(buf)-int(n):]})
		idx = append(idx, i)
	}
	if err := flush(); err != nil {
		return nil, err
	}
	// Edges came in block order; a block not read has none.
	g.Start[0] = 0
	for i := 1; i < len(g.Start); i++ {
		if g.Start[i] < 0 {
			g.Start[i] = g.Start[i-1]
		}
	}
	for _, v := range regs {
		if t := g.find(v); t >= 0 {
			g.RootEdges = append(g.RootEdges, RootEdge{To: t, Root: -1, Interior: v != blocks[t].Addr})
		}
	}
	for ri, r := range roots {
		for lo := r.Addr &^ 7; lo < r.Addr+r.Len; lo += batchBytes {
			n := min(uint64(batchBytes), r.Addr+r.Len-lo)
			rr := []ptrace.Range{{Addr: lo, Buf: make([]byte, n)}}
			mem.ReadRanges(rr)
			b := rr[0].Buf[:rr[0].N&^7]
			for o := 0; o+8 <= len(b); o += 8 {
				v := binary.LittleEndian.Uint64(b[o:])
				if t := g.find(v); t >= 0 {
					g.RootEdges = append(g.RootEdges, RootEdge{Word: lo + uint64(o), To: t, Root: int32(ri), Interior: v != blocks[t].Addr})
				}
			}
		}
	}
	return g, nil
}

// find returns the block holding address v, or -1.
func (g *Graph) find(v uint64) int32 {
	bs := g.Blocks
	if len(bs) == 0 || v < bs[0].Addr {
		return -1
	}
	lo, hi := 0, len(bs) // the first block starting after v is in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bs[m].Addr <= v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	b := bs[lo-1]
	if v < b.Addr+b.Size || v == b.Addr {
		return int32(lo - 1)
	}
	return -1
}

// Edges returns block i's out-edges: targets and offsets.
func (g *Graph) Edges(i int32) ([]int32, []uint32) {
	return g.To[g.Start[i]:g.Start[i+1]], g.Off[g.Start[i]:g.Start[i+1]]
}

// Keep drops the out-edges of block i for which keep(i, off) is false
// (words the block's type says are not pointers).
func (g *Graph) Keep(keep func(i int32, off uint32) bool) {
	w := int64(0)
	for i := range g.Blocks {
		s, e := g.Start[i], g.Start[i+1]
		g.Start[i] = w
		for k := s; k < e; k++ {
			if keep(int32(i), g.Off[k]) {
				g.To[w], g.Off[w] = g.To[k], g.Off[k]
				w++
			}
		}
	}
	g.Start[len(g.Blocks)] = w
	g.To, g.Off = g.To[:w], g.Off[:w]
}
