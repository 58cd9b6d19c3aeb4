package report

import (
	"bufio"
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// diffType is how one type changed between two typed documents, and how
// the holders of its instances did.
type diffType struct {
	name    string
	a, b    KindTotal
	holders []diffHolder // most grown first
}

type diffHolder struct {
	holder string
	a, b   KindTotal
}

func (t *diffType) deltaBytes() int64   { return int64(t.b.Bytes) - int64(t.a.Bytes) }
func (h *diffHolder) deltaBytes() int64 { return int64(h.b.Bytes) - int64(h.a.Bytes) }

// diffTypes compares the type tables of a and b (nil unless both are
// typed), the most grown type first. Only the holders' blocks are known
// per holder, so a holder's bytes are the held instances' bytes.
func diffTypes(a, b *Doc) []*diffType {
	ta, tb := a.r.Types, b.r.Types
	if ta == nil || tb == nil {
		return nil
	}
	byName := map[string]*diffType{}
	holders := map[string]map[string]*diffHolder{}
	add := func(jt *jsonTypes, inB bool) {
		for _, row := range jt.Types {
			t := byName[row.Name]
			if t == nil {
				t = &diffType{name: row.Name}
				byName[row.Name] = t
				holders[row.Name] = map[string]*diffHolder{}
			}
			side := &t.a
			if inB {
				side = &t.b
			}
			side.Bytes += row.Bytes
			side.Blocks += row.Blocks
			for _, h := range row.HeldBy {
				dh := holders[row.Name][h.Holder]
				if dh == nil {
					dh = &diffHolder{holder: h.Holder}
					holders[row.Name][h.Holder] = dh
				}
				hs := &dh.a
				if inB {
					hs = &dh.b
				}
				hs.Bytes += h.Bytes
				hs.Blocks += h.Blocks
			}
		}
	}
	add(ta, false)
	add(tb, true)
	var out []*diffType
	for name, t := range byName {
		if t.a == t.b {
			continue
		}
		for _, h := range holders[name] {
			if h.a != h.b {
				t.holders = append(t.holders, *h)
			}
		}
		slices.SortFunc(t.holders, func(x, y diffHolder) int {
			if c := cmp.Compare(y.deltaBytes(), x.deltaBytes()); c != 0 {
				return c
			}
			return strings.Compare(x.holder, y.holder)
		})
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y *diffType) int {
		if c := cmp.Compare(y.deltaBytes(), x.deltaBytes()); c != 0 {
			return c
		}
		return strings.Compare(x.name, y.name)
	})
	return out
}

// textTypes writes the types that grew, each with the holders that grew
// most.
func (d *Diff) textTypes(w *bufio.Writer) {
	if d.types == nil {
		return
	}
	fmt.Fprintln(w, "\nBY TYPE (typed scans):")
	shown := 0
	for _, t := range d.types {
		if t.deltaBytes() <= 0 {
			continue
		}
		if shown == d.opts.MaxSites {
			fmt.Fprintln(w, "  ... more grew; see --format json for all")
			break
		}
		shown++
		fmt.Fprintf(w, "  %10s in %7s blocks  %s (%s, then %s)\n", signedBytes(t.deltaBytes()),
			signedCount(int64(t.b.Blocks)-int64(t.a.Blocks)), t.name, bytes(t.a.Bytes), bytes(t.b.Bytes))
		for i, h := range t.holders {
			if i == 3 || h.deltaBytes() <= 0 {
				break
			}
			fmt.Fprintf(w, "  %10s held by %s\n", signedBytes(h.deltaBytes()), h.holder)
		}
	}
	if shown == 0 {
		fmt.Fprintln(w, "  no type grew")
	}
}

type jsonDiffType struct {
	Name    string           `json:"name"`
	Delta   jsonDelta        `json:"delta"`
	A       KindTotal        `json:"a"`
	B       KindTotal        `json:"b"`
	Holders []jsonDiffHolder `json:"held_by"`
}

type jsonDiffHolder struct {
	Holder string    `json:"holder"`
	Delta  jsonDelta `json:"delta"`
}

func (d *Diff) jsonTypes() []jsonDiffType {
	if d.types == nil {
		return nil
	}
	out := []jsonDiffType{}
	for _, t := range d.types {
		jt := jsonDiffType{Name: t.name, A: t.a, B: t.b, Holders: []jsonDiffHolder{},
			Delta: jsonDelta{t.deltaBytes(), int64(t.b.Blocks) - int64(t.a.Blocks)}}
		for _, h := range t.holders {
			jt.Holders = append(jt.Holders, jsonDiffHolder{h.holder, jsonDelta{h.deltaBytes(), int64(h.b.Blocks) - int64(h.a.Blocks)}})
		}
		out = append(out, jt)
	}
	return out
}
