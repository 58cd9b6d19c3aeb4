package report

import (
	"bufio"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// evidenceNames name event.Type* (the JSON keys and the text's words).
var evidenceNames = [event.NumEvidence]string{"unknown", "alloc-site", "vtable", "constructor", "field"}

// TypeRow is one line of the type table of a typed scan: a type, or the
// blocks of unknown type from one allocation site.
type TypeRow struct {
	Name string // qualified type name, or "unknown (N bytes from SITE)"
	File string // where the type is defined
	Line int
	// Unknown: the blocks' type is not known; Site is then where they
	// were allocated.
	Unknown        bool
	Site           heap.StackID
	Blocks, Bytes  uint64
	ByEvidence     [event.NumEvidence]uint64 // blocks typed by each evidence
	Largest        uint64                    // address of the instance that retains most
	LargestRetains uint64
	HeldBy         []TypeHold // the types holding its instances, most bytes first
	Sites          []TypeSite // where its instances were allocated, most bytes first
}

// TypeHold is how many of a type's instances another type (or a root)
// holds on their shortest paths to root.
type TypeHold struct {
	Holder        string // a type, "(root NAME)", or "(unreachable)"
	Blocks, Bytes uint64
}

// TypeSite is where instances of a type were allocated.
type TypeSite struct {
	Stack         heap.StackID
	Blocks, Bytes uint64
}

// typeName names block sb's type (or its site's unknown group).
func (r *Report) typeName(p *heap.Process, sb event.ScannedBlock, site heap.StackID) string {
	if sb.Type > 0 && int(sb.Type) <= len(p.Scan.Types) {
		return p.Scan.Types[sb.Type-1].Name
	}
	return fmt.Sprintf("unknown (%d bytes %s)", sb.Size, r.siteText(p, site))
}

// siteText names an allocation site by its first frame.
func (r *Report) siteText(p *heap.Process, site heap.StackID) string {
	fs := r.Stack(p, site)
	if site == 0 || len(fs) == 0 {
		return "from an unknown site"
	}
	f := fs[0]
	lib, _, isLib := strings.Cut(filepath.Base(f.Module), ".so")
	switch {
	case f.Function != "" && f.File != "":
		return fmt.Sprintf("from %s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
	case isLib && lib != "":
		// The nearest symbol of a library without line information
		// need not be the function (libstdc++'s emergency exception
		// pool is "from std::__throw_ios_failure"): the library only.
		return fmt.Sprintf("from %s (no debug info)", lib)
	case f.Function != "":
		return "from " + f.Function
	case f.Module == "":
		return fmt.Sprintf("from %#x", f.Address) // code in no module (JIT)
	}
	return fmt.Sprintf("from %s+%#x", filepath.Base(f.Module), f.Offset)
}

// blockSite returns the allocation site of the live block at addr.
func blockSite(p *heap.Process, addr uint64) heap.StackID {
	if b, ok := p.LiveBlock(addr); ok {
		return b.Site
	}
	if b, ok := p.Pending[addr]; ok {
		return b.Site
	}
	return 0
}

// TypeTable returns the type table of p's last scan, the most bytes
// first (nil when it did not type its blocks).
func (r *Report) TypeTable(p *heap.Process) []TypeRow {
	if p.Scan == nil || !p.Scan.Typed {
		return nil
	}
	bs := p.TypedBlocks()
	rows := map[string]*TypeRow{}
	holds := map[string]map[string]*TypeHold{}
	sites := map[string]map[heap.StackID]*TypeSite{}
	names := make([]string, len(bs)) // by block
	siteOf := make([]heap.StackID, len(bs))
	for i, sb := range bs {
		siteOf[i] = blockSite(p, sb.Addr)
		names[i] = r.typeName(p, sb, siteOf[i])
	}
	for i, sb := range bs {
		name := names[i]
		row := rows[name]
		if row == nil {
			row = &TypeRow{Name: name, Unknown: sb.Type == 0, Site: siteOf[i]}
			if !row.Unknown {
				t := p.Scan.Types[sb.Type-1]
				row.File, row.Line = t.File, int(t.Line)
			}
			rows[name] = row
			holds[name] = map[string]*TypeHold{}
			sites[name] = map[heap.StackID]*TypeSite{}
		}
		row.Blocks++
		row.Bytes += sb.Size
		if sb.Type > 0 && int(sb.Evidence) < len(row.ByEvidence) {
			row.ByEvidence[sb.Evidence]++
		}
		if row.Largest == 0 || sb.Retained > row.LargestRetains {
			row.Largest, row.LargestRetains = sb.Addr, sb.Retained
		}
		holder := "(unreachable)"
		switch {
		case sb.Holder != 0:
			if k, ok := findTyped(bs, sb.Holder); ok {
				holder = names[k]
			}
		case sb.Via != 0:
			holder = "(root " + rootKind(p.Scan.Names[sb.Via-1]) + ")"
		}
		h := holds[name][holder]
		if h == nil {
			h = &TypeHold{Holder: holder}
			holds[name][holder] = h
		}
		h.Blocks++
		h.Bytes += sb.Size
		s := sites[name][siteOf[i]]
		if s == nil {
			s = &TypeSite{Stack: siteOf[i]}
			sites[name][siteOf[i]] = s
		}
		s.Blocks++
		s.Bytes += sb.Size
	}
	out := make([]TypeRow, 0, len(rows))
	for name, row := range rows {
		for _, h := range holds[name] {
			row.HeldBy = append(row.HeldBy, *h)
		}
		sortBiggest(row.HeldBy, func(h TypeHold) (uint64, string) { return h.Bytes, h.Holder })
		for _, s := range sites[name] {
			row.Sites = append(row.Sites, *s)
		}
		sortBiggest(row.Sites, func(s TypeSite) (uint64, string) { return s.Bytes, fmt.Sprint(s.Stack) })
		out = append(out, *row)
	}
	sortBiggest(out, func(r TypeRow) (uint64, string) { return r.Bytes, r.Name })
	return out
}

// sortBiggest sorts xs by their bytes, most first, then by their keys.
func sortBiggest[T any](xs []T, key func(T) (uint64, string)) {
	sort.SliceStable(xs, func(i, j int) bool {
		bi, ki := key(xs[i])
		bj, kj := key(xs[j])
		if bi != bj {
			return bi > bj
		}
		return ki < kj
	})
}

// rootKind is the root a path starts from, for the type-level graph: a
// global's name without its fields, or the kind of memory.
func rootKind(via string) string {
	if i := strings.IndexAny(via, ".[+"); i > 0 && !strings.HasPrefix(via, "/") {
		return via[:i]
	}
	return via
}

// findTyped returns the index of the typed block at addr.
func findTyped(bs []event.ScannedBlock, addr uint64) (int, bool) {
	k := sort.Search(len(bs), func(k int) bool { return bs[k].Addr >= addr })
	return k, k < len(bs) && bs[k].Addr == addr
}

// PathStep is one link of a path to root: what holds the block (a root
// or a field of the previous step's block), and the block.
type PathStep struct {
	Via      string
	Addr     uint64
	Size     uint64
	Type     string
	Retained uint64
}

// PathToRoot returns the path from a root to the typed block at addr,
// root first; nil when no root reaches it.
func (r *Report) PathToRoot(p *heap.Process, addr uint64) []PathStep {
	bs := p.TypedBlocks()
	var out []PathStep
	for steps := 0; steps <= len(bs); steps++ {
		k, ok := findTyped(bs, addr)
		if !ok {
			return nil
		}
		sb := bs[k]
		if sb.Via == 0 || int(sb.Via) > len(p.Scan.Names) {
			return nil // unreachable
		}
		out = append(out, PathStep{Via: p.Scan.Names[sb.Via-1], Addr: sb.Addr, Size: sb.Size,
			Type: r.typeName(p, sb, blockSite(p, sb.Addr)), Retained: sb.Retained})
		if sb.Holder == 0 {
			for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
				out[i], out[j] = out[j], out[i]
			}
			return out
		}
		addr = sb.Holder
	}
	return nil // a cycle: the model is out of step
}

// TypePath returns the path to root of the instance of type name (as
// --path-to-root takes it) that retains most, in the main image, and that
// type's qualified name; ok is false when the image has no typed scan or
// no such type.
func (r *Report) TypePath(name string) (qualified string, steps []PathStep, ok bool) {
	p := r.mainProc()
	if p == nil {
		return "", nil, false
	}
	row, ok := typeRow(r.TypeTable(p), name)
	if !ok {
		return "", nil, false
	}
	return row.Name, r.PathToRoot(p, row.Largest), true
}

// typeRow finds the row of type name (qualified, or its last part).
func typeRow(rows []TypeRow, name string) (TypeRow, bool) {
	for _, row := range rows {
		if row.Name == name {
			return row, true
		}
	}
	for _, row := range rows {
		if !row.Unknown && (strings.HasSuffix(row.Name, "::"+name)) {
			return row, true
		}
	}
	return TypeRow{}, false
}

// textTypes writes the type table and, if asked, the path to root.
func (r *Report) textTypes(w *bufio.Writer, p *heap.Process) {
	rows := r.TypeTable(p)
	if rows == nil {
		return
	}
	var total, typed uint64
	var byEv [event.NumEvidence]uint64
	for _, row := range rows {
		total += row.Bytes
		if !row.Unknown {
			typed += row.Bytes
		}
	}
	for _, sb := range p.TypedBlocks() {
		if sb.Type > 0 && int(sb.Evidence) < len(byEv) {
			byEv[sb.Evidence] += sb.Size
		}
	}
	fmt.Fprintf(w, "\nTYPES of the live blocks: %s of %s typed (%s)", bytes(typed), bytes(total), percent(typed, total))
	var parts []string
	for e, b := range byEv {
		if b > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", evidenceNames[e], bytes(b)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "; by %s", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, " (in %.3g s)\n", float64(p.Scan.TypeNs)/1e9)
	for i, row := range rows {
		if i >= r.opts.MaxLeaks {
			fmt.Fprintf(w, "  ... %s more; see --json for all\n", plural(len(rows)-i, "type"))
			break
		}
		fmt.Fprintf(w, "  %10s in %6s  %s", bytes(row.Bytes), count(row.Blocks), termsafe.String(row.Name))
		if row.File != "" {
			fmt.Fprintf(w, " (%s:%d)", termsafe.String(filepath.Base(row.File)), row.Line)
		}
		if len(row.HeldBy) > 0 {
			h := row.HeldBy[0]
			fmt.Fprintf(w, ", held by %s", termsafe.String(h.Holder))
			if len(row.HeldBy) > 1 {
				fmt.Fprintf(w, " (+%d more)", len(row.HeldBy)-1)
			}
		}
		fmt.Fprintln(w)
	}
	if name := r.opts.PathToRoot; name != "" {
		row, ok := typeRow(rows, name)
		if !ok {
			fmt.Fprintf(w, "\nPATH TO ROOT of %s: no live block has this type\n", name)
			return
		}
		fmt.Fprintf(w, "\nPATH TO ROOT of %s at %#x (of %s), which retains %s:\n", termsafe.String(row.Name), row.Largest, plural64(row.Blocks, "instance"), bytes(row.LargestRetains))
		path := r.PathToRoot(p, row.Largest)
		if path == nil {
			fmt.Fprintln(w, "  no root reaches it (a leak)")
		}
		for _, s := range path {
			fmt.Fprintf(w, "  %-40s -> %s at %#x (%s, retains %s)\n", termsafe.String(s.Via), termsafe.String(s.Type), s.Addr, bytes(s.Size), bytes(s.Retained))
		}
	}
}

func percent(a, b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

// jsonTypes is the type table of a typed scan in the JSON report.
type jsonTypes struct {
	Seconds    float64           `json:"seconds"` // typing took
	TypedBytes uint64            `json:"typed_bytes"`
	TotalBytes uint64            `json:"total_bytes"`
	ByEvidence map[string]uint64 `json:"bytes_by_evidence"`
	Types      []jsonType        `json:"types"`
	PathToRoot *jsonPath         `json:"path_to_root,omitempty"`
}

type jsonType struct {
	Name       string            `json:"name"`
	Unknown    bool              `json:"unknown,omitempty"`
	File       string            `json:"file,omitempty"`
	Line       int               `json:"line,omitempty"`
	Blocks     uint64            `json:"blocks"`
	Bytes      uint64            `json:"bytes"`
	ByEvidence map[string]uint64 `json:"blocks_by_evidence,omitempty"`
	// The instance that retains most: its address and retained bytes.
	Largest        string         `json:"largest_instance"`
	LargestRetains uint64         `json:"largest_retained_bytes"`
	HeldBy         []jsonTypeHold `json:"held_by"`
	Sites          []jsonTypeSite `json:"sites"`
}

type jsonTypeHold struct {
	Holder string `json:"holder"`
	Blocks uint64 `json:"blocks"`
	Bytes  uint64 `json:"bytes"`
}

type jsonTypeSite struct {
	Blocks uint64      `json:"blocks"`
	Bytes  uint64      `json:"bytes"`
	Stack  []jsonFrame `json:"stack"`
}

type jsonPath struct {
	Type  string         `json:"type"`
	Steps []jsonPathStep `json:"steps"` // root first; empty: no root reaches it
}

type jsonPathStep struct {
	Via      string `json:"via"`
	Address  string `json:"address"`
	Bytes    uint64 `json:"bytes"`
	Type     string `json:"type"`
	Retained uint64 `json:"retained_bytes"`
}

// maxJSONSites bounds the allocation sites listed per type.
const maxJSONSites = 10

func (r *Report) jsonTypes(p *heap.Process) *jsonTypes {
	rows := r.TypeTable(p)
	if rows == nil {
		return nil
	}
	jt := &jsonTypes{Seconds: float64(p.Scan.TypeNs) / 1e9, ByEvidence: map[string]uint64{}, Types: []jsonType{}}
	for _, sb := range p.TypedBlocks() {
		jt.TotalBytes += sb.Size
		if sb.Type > 0 && int(sb.Evidence) < len(evidenceNames) {
			jt.TypedBytes += sb.Size
			jt.ByEvidence[evidenceNames[sb.Evidence]] += sb.Size
		}
	}
	for _, row := range rows {
		t := jsonType{Name: row.Name, Unknown: row.Unknown, File: row.File, Line: row.Line, Blocks: row.Blocks, Bytes: row.Bytes,
			Largest: fmt.Sprintf("0x%x", row.Largest), LargestRetains: row.LargestRetains, HeldBy: []jsonTypeHold{}, Sites: []jsonTypeSite{}}
		if !row.Unknown {
			t.ByEvidence = map[string]uint64{}
			for e, n := range row.ByEvidence {
				if n > 0 {
					t.ByEvidence[evidenceNames[e]] = n
				}
			}
		}
		for _, h := range row.HeldBy {
			t.HeldBy = append(t.HeldBy, jsonTypeHold(h))
		}
		for i, s := range row.Sites {
			if i >= maxJSONSites {
				break
			}
			t.Sites = append(t.Sites, jsonTypeSite{Blocks: s.Blocks, Bytes: s.Bytes, Stack: r.jsonStack(p, s.Stack)})
		}
		jt.Types = append(jt.Types, t)
	}
	if name := r.opts.PathToRoot; name != "" {
		jp := &jsonPath{Type: name, Steps: []jsonPathStep{}}
		if row, ok := typeRow(rows, name); ok {
			jp.Type = row.Name
			for _, s := range r.PathToRoot(p, row.Largest) {
				jp.Steps = append(jp.Steps, jsonPathStep{Via: s.Via, Address: fmt.Sprintf("0x%x", s.Addr), Bytes: s.Size, Type: s.Type, Retained: s.Retained})
			}
		}
		jt.PathToRoot = jp
	}
	return jt
}
