package symbolize

import (
	"container/list"
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"sort"
)

// dwarfInfo is a module's DWARF with an index from addresses to compilation
// units. Units are parsed on demand into cuData.
type dwarfInfo struct {
	d     *dwarf.Data
	addr  []byte // .debug_addr, for DW_OP_addrx (Debug)
	cus   []cuInfo
	index spanIndex // idx is an index into cus
}

// cuInfo is one compilation unit; data is nil until parsed or after eviction.
type cuInfo struct {
	off  dwarf.Offset
	lang int64
	data *cuData
	err  error // parse error, cached
	elem *list.Element
}

// cuData is the lookup structure of one parsed compilation unit.
type cuData struct {
	files   []string  // line-table file names by DWARF file index
	lines   []lineRow // all sequences, sorted by address, end rows included
	nodes   []fnNode  // subprograms and inlined subroutines with code
	roots   spanIndex // ranges of the outermost (not inlined) nodes
	mangled bool      // the unit's language mangles names (C++, Rust, ...)
	kids    []span    // ranges of inlined nodes, grouped by parent, sorted by lo
	cost    int64     // approximate bytes held
}

// lineRow is one row of a line table.
type lineRow struct {
	addr uint64
	file uint32
	line uint32
	col  uint32
	end  bool // end of a sequence: no code at addr
}

// fnNode is a function (DW_TAG_subprogram) or an inlined instance
// (DW_TAG_inlined_subroutine) that has code.
type fnNode struct {
	name     string
	parent   int32 // enclosing node for inlined instances, -1 for roots
	callFile uint32
	callLine uint32
	callCol  uint32
	kidsLo   int32 // kids[kidsLo:kidsHi] are this node's inlined children
	kidsHi   int32
	plain    bool // named by DW_AT_name, not by a linkage name
}

// maxNullRun bounds the null entries tolerated in a row between units.
const maxNullRun = 4096

// newDWARFInfo reads f's DWARF and indexes its compilation units by address.
// On an error after some units were read it returns both the partial index
// and the error.
func newDWARFInfo(f *elfFile, cache string) (dw *dwarfInfo, err error) {
	defer guard(&err, "DWARF")
	d, addr, err := loadDWARF(f, cache)
	if err != nil {
		return nil, err
	}
	dw = &dwarfInfo{d: d, addr: addr}
	var spans []span
	var unranged []int
	r := d.Reader()
	nulls := 0
	for {
		e, err := r.Next()
		if err == nil && e != nil && e.Tag == 0 {
			// debug/dwarf returns null entries without consuming input
			// when a unit ends in an unterminated LEB128; valid DWARF has
			// at most a little null padding between units.
			if nulls++; nulls > maxNullRun {
				err = fmt.Errorf("run of %d null entries in .debug_info", nulls)
			} else {
				continue
			}
		}
		nulls = 0
		if err != nil {
			if len(dw.cus) == 0 {
				return nil, err
			}
			dw.index = newSpanIndex(spans)
			return dw, err
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagSkeletonUnit:
		default:
			r.SkipChildren()
			continue
		}
		lang, _ := e.Val(dwarf.AttrLanguage).(int64)
		ci := int32(len(dw.cus))
		dw.cus = append(dw.cus, cuInfo{off: e.Offset, lang: lang})
		ranges, rerr := d.Ranges(e)
		n := 0
		for _, rg := range ranges {
			if rg[1] > rg[0] {
				spans = append(spans, span{rg[0], rg[1], ci})
				n++
			}
		}
		if n == 0 && rerr == nil && e.Children {
			unranged = append(unranged, int(ci))
		}
		r.SkipChildren()
	}
	// Units without DW_AT_low_pc/DW_AT_ranges: take their extent from the
	// line table.
	for _, ci := range unranged {
		spans = append(spans, dw.lineExtent(int32(ci))...)
	}
	dw.index = newSpanIndex(spans)
	if len(dw.cus) == 0 {
		return nil, errors.New("no compilation units")
	}
	return dw, nil
}

// lineExtent returns the address ranges of the line-table sequences of unit
// ci, or nil.
func (dw *dwarfInfo) lineExtent(ci int32) []span {
	r := dw.d.Reader()
	r.Seek(dw.cus[ci].off)
	e, err := r.Next()
	if err != nil || e == nil {
		return nil
	}
	lr, err := dw.d.LineReader(e)
	if err != nil || lr == nil {
		return nil
	}
	var out []span
	var le dwarf.LineEntry
	start, inSeq := uint64(0), false
	for lr.Next(&le) == nil {
		if !inSeq {
			start, inSeq = le.Address, true
		}
		if le.EndSequence {
			if le.Address > start {
				out = append(out, span{start, le.Address, ci})
			}
			inSeq = false
		}
	}
	return out
}

// lookupDWARF symbolizes addr from m's DWARF. ok is false when no unit has
// a function or line for addr.
func (s *Symbolizer) lookupDWARF(m *module, addr uint64, plain *[]bool) (frames []Frame, ok bool) {
	dw := m.dw
	// Candidate units in .debug_info order, like binutils.
	var buf [4]span
	cands := dw.index.containing(buf[:0], addr)
	for i := 1; i < len(cands); i++ { // few: insertion sort by unit index
		for j := i; j > 0 && cands[j].idx < cands[j-1].idx; j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
		}
	}
	for i, sp := range cands {
		ci := sp.idx
		if i > 0 && ci == cands[i-1].idx {
			continue
		}
		cu := &dw.cus[ci]
		if cu.err != nil {
			continue
		}
		if cu.data == nil {
			data, err := parseCU(dw, cu)
			if err != nil {
				cu.err = fmt.Errorf("compilation unit at .debug_info+%#x: %w", cu.off, err)
				s.warn(m, fmt.Sprintf("symbolize: %s: corrupt debug info: %v; using symbol-table names there", m.path, cu.err))
				continue
			}
			cu.data = data
		}
		s.touch(cu)
		if fr := cu.data.frames(addr, m.syms, plain); fr != nil {
			return fr, true
		}
	}
	return nil, false
}

// frames returns the frames at addr in the unit, or nil if it has neither a
// function nor a line for addr. If plain is non-nil, it receives for each
// frame whether its DWARF function had no linkage name in a language that
// mangles names (the frames whose names tools disagree on).
func (c *cuData) frames(addr uint64, syms *symtab, plain *[]bool) []Frame {
	n := c.roots.smallest(addr)
	for depth := 0; n >= 0 && depth < 256; depth++ {
		nd := &c.nodes[n]
		k := smallestIn(c.kids[nd.kidsLo:nd.kidsHi], addr)
		if k < 0 {
			break
		}
		n = k
	}
	row, hasLine := c.line(addr)
	if n < 0 && !hasLine {
		return nil
	}
	first := Frame{}
	if hasLine {
		first.File = c.file(row.file)
		first.Line = int(row.line)
		first.Column = int(row.col)
	}
	if n < 0 {
		if plain != nil {
			*plain = append((*plain)[:0], false)
		}
		if sy := syms.find(addr); sy != nil {
			first.Function = sy.demangled()
			if !hasLine {
				first.File = sy.file
			}
		}
		return []Frame{first}
	}
	depth := 1
	for k := n; c.nodes[k].parent >= 0 && depth < 256; k = c.nodes[k].parent {
		depth++
	}
	out := make([]Frame, 0, depth)
	first.Function = c.nodes[n].name
	first.Inlined = c.nodes[n].parent >= 0
	out = append(out, first)
	for k := n; c.nodes[k].parent >= 0 && len(out) < depth; {
		nd := &c.nodes[k]
		p := nd.parent
		out = append(out, Frame{
			Function: c.nodes[p].name,
			File:     c.file(nd.callFile),
			Line:     int(nd.callLine),
			Column:   int(nd.callCol),
			Inlined:  c.nodes[p].parent >= 0,
		})
		k = p
	}
	// The physical function, when DWARF has no linkage name for it, is
	// named by the ELF symbol (the way binutils names the innermost frame
	// and LLVM the outermost); so is one with no usable name at all (e.g.
	// names in a dwz alternate file, which is not read).
	root := n
	for c.nodes[root].parent >= 0 {
		root = c.nodes[root].parent
	}
	if (c.nodes[root].plain && c.mangled) || c.nodes[root].name == "" {
		if sy := syms.find(addr); sy != nil {
			last := &out[len(out)-1]
			last.Function = sy.demangled()
			if len(out) == 1 && !hasLine {
				last.File = sy.file
			}
		}
	}
	if plain != nil {
		*plain = (*plain)[:0]
		for k := n; ; k = c.nodes[k].parent {
			*plain = append(*plain, c.nodes[k].plain && c.mangled)
			if c.nodes[k].parent < 0 || len(*plain) == len(out) {
				break
			}
		}
	}
	return out
}

// file returns the name of file index i, or "".
func (c *cuData) file(i uint32) string {
	if int(i) < len(c.files) {
		return c.files[i]
	}
	return ""
}

// line returns the line-table row covering addr.
func (c *cuData) line(addr uint64) (lineRow, bool) {
	i := sort.Search(len(c.lines), func(i int) bool { return c.lines[i].addr > addr }) - 1
	if i < 0 || c.lines[i].end {
		return lineRow{}, false
	}
	return c.lines[i], true
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, the pre-DWARF 4 spelling of
// DW_AT_linkage_name that GCC and Clang still emit with -gstrict-dwarf off.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// nameAttrs are the naming attributes of a DIE.
type nameAttrs struct {
	name    string
	linkage string
	ref     dwarf.Offset // DW_AT_abstract_origin or DW_AT_specification
	hasRef  bool
}

// cuParser holds the state of parsing one unit.
type cuParser struct {
	dw      *dwarfInfo
	attrs   map[dwarf.Offset]nameAttrs // subprogram DIEs seen or read
	dem     map[string]string          // linkage name -> demangled
	refRead *dwarf.Reader
	mangled bool // the unit's language mangles names (C++, Rust, ...)
}

// parseCU builds the lookup structure of unit cu.
func parseCU(dw *dwarfInfo, cu *cuInfo) (c *cuData, err error) {
	defer guard(&err, "parse unit")
	p := &cuParser{
		dw:      dw,
		attrs:   make(map[dwarf.Offset]nameAttrs),
		dem:     make(map[string]string),
		mangled: !nonMangledLang(cu.lang),
	}
	r := dw.d.Reader()
	r.Seek(cu.off)
	top, err := r.Next()
	if err != nil {
		return nil, err
	}
	if top == nil {
		return nil, errors.New("missing unit entry")
	}
	c = &cuData{mangled: p.mangled}
	if err := c.readLines(dw.d, top); err != nil {
		return nil, fmt.Errorf("line table: %w", err)
	}

	var pend []nameAttrs
	var kidSpans []span // idx = child node, lo/hi; parent in nodes
	var rootSpans []span
	stack := []int32{-1}
	if !top.Children {
		stack = stack[:0]
	}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		cur := stack[len(stack)-1]
		me := cur
		if e.Tag == dwarf.TagSubprogram || e.Tag == dwarf.TagInlinedSubroutine {
			a := entryNameAttrs(e)
			if e.Tag == dwarf.TagSubprogram {
				p.attrs[e.Offset] = a
			}
			ranges, _ := dw.d.Ranges(e)
			var rs [][2]uint64
			for _, rg := range ranges {
				if rg[1] > rg[0] {
					rs = append(rs, rg)
				}
			}
			if len(rs) > 0 {
				idx := int32(len(c.nodes))
				nd := fnNode{parent: -1}
				if e.Tag == dwarf.TagInlinedSubroutine && cur >= 0 {
					nd.parent = cur
					nd.callFile = uint32(intAttr(e, dwarf.AttrCallFile))
					nd.callLine = uint32(intAttr(e, dwarf.AttrCallLine))
					nd.callCol = uint32(intAttr(e, dwarf.AttrCallColumn))
				}
				c.nodes = append(c.nodes, nd)
				pend = append(pend, a)
				for _, rg := range rs {
					sp := span{rg[0], rg[1], idx}
					if nd.parent >= 0 {
						kidSpans = append(kidSpans, sp)
					} else {
						rootSpans = append(rootSpans, sp)
					}
				}
				me = idx
			}
		}
		if e.Children {
			stack = append(stack, me)
		}
	}
	if len(stack) == 0 && top.Children {
		// The unit must end here: debug/dwarf reads garbage that ends in
		// an unterminated LEB128 as endless null entries, which would
		// otherwise look like a well-formed, truncated tree.
		for i := 0; ; i++ {
			e, err := r.Next()
			if err != nil {
				return nil, err
			}
			if e == nil || e.Tag != 0 {
				break
			}
			if i == maxNullRun {
				return nil, errors.New("garbage after the unit's entries")
			}
		}
	}

	// Names, following DW_AT_abstract_origin/DW_AT_specification.
	for i := range c.nodes {
		name, linkage := p.resolve(pend[i])
		c.nodes[i].name = name
		c.nodes[i].plain = !linkage
	}

	// Children grouped by parent, each group sorted by lo.
	sort.SliceStable(kidSpans, func(i, j int) bool {
		pi, pj := c.nodes[kidSpans[i].idx].parent, c.nodes[kidSpans[j].idx].parent
		if pi != pj {
			return pi < pj
		}
		return kidSpans[i].lo < kidSpans[j].lo
	})
	c.kids = kidSpans
	for i := 0; i < len(kidSpans); {
		par := c.nodes[kidSpans[i].idx].parent
		j := i
		for j < len(kidSpans) && c.nodes[kidSpans[j].idx].parent == par {
			j++
		}
		c.nodes[par].kidsLo, c.nodes[par].kidsHi = int32(i), int32(j)
		i = j
	}
	c.roots = newSpanIndex(rootSpans)

	c.cost = int64(len(c.lines))*32 + int64(len(c.nodes))*56 + int64(len(c.kids)+len(rootSpans))*32
	for _, f := range c.files {
		c.cost += int64(len(f)) + 16
	}
	for i := range c.nodes {
		c.cost += int64(len(c.nodes[i].name))
	}
	return c, nil
}

// readLines reads the unit's line table into c.lines and c.files.
func (c *cuData) readLines(d *dwarf.Data, top *dwarf.Entry) error {
	lr, err := d.LineReader(top)
	if err != nil {
		return err
	}
	if lr == nil {
		return nil
	}
	idx := make(map[*dwarf.LineFile]uint32)
	files := lr.Files()
	for i, f := range files {
		if f != nil {
			idx[f] = uint32(i)
		}
	}
	var seqs [][]lineRow
	var seq []lineRow
	var le dwarf.LineEntry
	for {
		err := lr.Next(&le)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		fi, ok := idx[le.File]
		if !ok && le.File != nil {
			// DW_LNE_define_file added an entry.
			files = lr.Files()
			for i, f := range files {
				if f != nil {
					idx[f] = uint32(i)
				}
			}
			fi = idx[le.File]
		}
		row := lineRow{addr: le.Address, file: fi, line: uint32(le.Line), col: uint32(le.Column), end: le.EndSequence}
		if n := len(seq); n > 0 && seq[n-1].addr == row.addr && !seq[n-1].end && !row.end {
			// Only the last row for an address counts (as in binutils).
			seq[n-1] = row
		} else {
			seq = append(seq, row)
		}
		if row.end {
			if len(seq) > 1 {
				seqs = append(seqs, seq)
			}
			seq = nil
		}
	}
	files = lr.Files()
	c.files = make([]string, len(files))
	for i, f := range files {
		if f != nil {
			c.files[i] = f.Name
		}
	}
	sort.SliceStable(seqs, func(i, j int) bool { return seqs[i][0].addr < seqs[j][0].addr })
	n := 0
	for _, s := range seqs {
		n += len(s)
	}
	c.lines = make([]lineRow, 0, n)
	for _, s := range seqs {
		c.lines = append(c.lines, s...)
	}
	return nil
}

// entryNameAttrs extracts the naming attributes of e.
func entryNameAttrs(e *dwarf.Entry) nameAttrs {
	var a nameAttrs
	a.name, _ = e.Val(dwarf.AttrName).(string)
	if l, ok := e.Val(dwarf.AttrLinkageName).(string); ok {
		a.linkage = l
	} else if l, ok := e.Val(attrMIPSLinkageName).(string); ok {
		a.linkage = l
	}
	for _, at := range [...]dwarf.Attr{dwarf.AttrAbstractOrigin, dwarf.AttrSpecification} {
		if f := e.AttrField(at); f != nil && f.Class == dwarf.ClassReference {
			if off, ok := f.Val.(dwarf.Offset); ok {
				a.ref, a.hasRef = off, true
				break
			}
		}
	}
	return a
}

// resolve returns the function name for a DIE's attributes and whether it is
// a linkage name (then demangled) or a plain DW_AT_name. A linkage name
// anywhere along the origin/specification chain wins; otherwise the nearest
// DW_AT_name.
func (p *cuParser) resolve(a nameAttrs) (string, bool) {
	linkage, name := a.linkage, a.name
	for depth := 0; linkage == "" && a.hasRef && depth < 16; depth++ {
		b, ok := p.attrsAt(a.ref)
		if !ok {
			break
		}
		linkage = b.linkage
		if name == "" {
			name = b.name
		}
		a = b
	}
	if linkage != "" {
		d, ok := p.dem[linkage]
		if !ok {
			d = demangleName(linkage)
			p.dem[linkage] = d
		}
		return d, true
	}
	return name, !p.mangled
}

// attrsAt returns the naming attributes of the DIE at off, reading it if it
// was not seen during the walk (a forward or cross-unit reference).
func (p *cuParser) attrsAt(off dwarf.Offset) (nameAttrs, bool) {
	if a, ok := p.attrs[off]; ok {
		return a, true
	}
	if p.refRead == nil {
		p.refRead = p.dw.d.Reader()
	}
	p.refRead.Seek(off)
	e, err := p.refRead.Next()
	if err != nil || e == nil || e.Offset != off {
		return nameAttrs{}, false
	}
	a := entryNameAttrs(e)
	p.attrs[off] = a
	return a, true
}

// intAttr returns an integer attribute of e, or 0.
func intAttr(e *dwarf.Entry, at dwarf.Attr) int64 {
	switch v := e.Val(at).(type) {
	case int64:
		if v < 0 || v > 1<<31 {
			return 0
		}
		return v
	case uint64:
		if v > 1<<31 {
			return 0
		}
		return int64(v)
	}
	return 0
}

// nonMangledLang reports whether DW_AT_name is the symbol name in a DWARF
// language (the list binutils uses), so no demangling applies.
func nonMangledLang(lang int64) bool {
	switch lang {
	case 0x01, // C89
		0x02,   // C
		0x03,   // Ada83
		0x05,   // Cobol74
		0x06,   // Cobol85
		0x07,   // Fortran77
		0x09,   // Pascal83
		0x0c,   // C99
		0x0d,   // Ada95
		0x0f,   // PLI
		0x12,   // UPC
		0x1d,   // C11
		0x2c,   // C17
		0x8001: // Mips_Assembler
		return true
	}
	return false
}
