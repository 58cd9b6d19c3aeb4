package kinds

import (
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/heaptype"
	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/analysis/refgraph"
	"github.com/leakpath/leakpath/internal/analysis/scan"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/ctorsite"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// typeBlocks types blocks (sorted by address, as the scan took them) of
// p, from what the scan read, into sbs (blocks' twins) and info. keys
// are the blocks' keys in the model, when they are not their addresses
// (see liveBlocks).
func (s *imageScan) typeBlocks(p *heap.Process, blocks []leak.Block, keys []uint64, hp *scan.Heap, sbs []event.ScannedBlock, info *event.ScanInfo) {
	start := time.Now()
	defer func() {
		// Typing reads what the target and its files hold: a bug there
		// costs the types, not the run (the process is still held).
		if r := recover(); r != nil {
			s.im.Warn("pid %d: no types: %v", p.Info.PID, r)
			info.Typed, info.Types, info.Names = false, nil, nil
			for i := range sbs {
				sbs[i].Type, sbs[i].Evidence, sbs[i].Holder, sbs[i].Via, sbs[i].Retained = 0, 0, 0, 0, 0
			}
		}
	}()
	gb := make([]refgraph.Block, len(blocks))
	for i, b := range blocks {
		gb[i] = refgraph.Block{Addr: b.Addr, Size: b.Size}
	}
	roots := make([]refgraph.Root, len(hp.Roots))
	for i, r := range hp.Roots {
		roots[i] = refgraph.Root{Addr: r.Addr, Len: r.Len, What: r.What}
	}
	g, err := refgraph.Build(gb, roots, hp.Words, hp.Mem)
	if err != nil {
		s.im.Warn("pid %d: no types: %v", p.Info.PID, err)
		return
	}
	mods, modOf := s.typeModules(p)
	res := heaptype.Analyze(g, mods, hp.Mem, siteTypes(p, blocks, keys, mods, modOf, hp.Mem, s.a.opts.Types))
	info.Typed = true
	for _, t := range res.Types {
		info.Types = append(info.Types, event.TypeDef{Name: t.Name, File: t.File, Line: uint32(max(t.Line, 0)), Size: t.Size})
	}
	names := map[string]uint32{}
	for i := range sbs {
		sb := &sbs[i]
		sb.Type = uint32(res.Type[i] + 1)
		sb.Evidence = uint8(res.Evidence[i])
		if sb.Type == 0 {
			sb.Evidence = 0
		}
		sb.Retained = res.Retained[i]
		if par := res.Paths.Parent[i]; par >= 0 {
			sb.Holder = blocks[par].Addr
		}
		if via := res.Via(int32(i)); via != "" {
			k, ok := names[via]
			if !ok {
				info.Names = append(info.Names, via)
				k = uint32(len(info.Names))
				names[via] = k
			}
			sb.Via = k
		}
	}
	info.TypeNs = uint64(time.Since(start))
	info.PauseNs += info.TypeNs
}

// siteTypes returns what Analyze asks of a block's allocation site: the
// type its call site allocates (DW_AT_LLVM_alloc_type) or, for a block
// of operator new, the class whose constructor the code after the call
// passes it to (ctorsite), found at the first frames of its stack (the
// allocator's own come first). Constructors are looked for during
// ctorBudget at most: each new site costs a read of the process and a
// symbol lookup, and the process waits.
func siteTypes(p *heap.Process, blocks []leak.Block, keys []uint64, mods []heaptype.Module, modOf map[int32]int,
	mem leak.Memory, syms *symbolize.Symbolizer) func(int32, heaptype.Evidence) (heaptype.SiteType, bool) {
	type known struct {
		st heaptype.SiteType
		ok bool
	}
	allocTypes := false
	for _, m := range mods {
		allocTypes = allocTypes || (m.Types != nil && m.Types.HasAllocTypes())
	}
	cache := [3]map[heap.StackID]known{{}, {}, {}} // alloc sites, constructors, frames
	code := make([]byte, ctorsite.CodeBytes)
	var deadline, framesDeadline time.Time
	return func(i int32, ev heaptype.Evidence) (heaptype.SiteType, bool) {
		if ev == heaptype.AllocSite && !allocTypes {
			return heaptype.SiteType{}, false
		}
		key := blocks[i].Addr
		if keys != nil {
			key = keys[i]
		}
		b, live := p.LiveBlock(key)
		if !live || (ev == heaptype.Ctor && b.Fn != event.New) {
			return heaptype.SiteType{}, false
		}
		c := cache[0]
		switch ev {
		case heaptype.Ctor:
			c = cache[1]
		case heaptype.SiteFrames:
			c = cache[2]
		}
		if k, ok := c[b.Site]; ok {
			return k.st, k.ok
		}
		var k known
		frames, fmods := p.Stacks.Frames(b.Site), p.Stacks.Modules(b.Site)
		switch ev {
		case heaptype.AllocSite:
			for j := 0; j < len(frames) && j < maxAllocFrames && !k.ok; j++ {
				hm, ok := modOf[fmods[j]]
				if !ok || mods[hm].Types == nil {
					continue
				}
				if id, ok := mods[hm].Types.AllocType(frames[j] - mods[hm].Bias); ok {
					k = known{heaptype.SiteType{Mod: hm, Type: id, Ev: heaptype.AllocSite}, true}
				}
			}
		case heaptype.Ctor:
			if deadline.IsZero() {
				deadline = time.Now().Add(ctorBudget)
			}
			if time.Now().After(deadline) {
				return heaptype.SiteType{}, false // not cached: unknown, not none
			}
			k.st, k.ok = ctorType(frames, mods, mem, syms, code)
		case heaptype.SiteFrames:
			if framesDeadline.IsZero() {
				framesDeadline = time.Now().Add(ctorBudget)
			}
			if time.Now().After(framesDeadline) {
				return heaptype.SiteType{}, false
			}
			k.st, k.ok = framesType(frames, fmods, mods, modOf, syms)
		}
		c[b.Site] = k
		return k.st, k.ok
	}
}

// ctorBudget bounds the time spent looking for constructors per scan.
const ctorBudget = time.Second

// ctorType finds, after the first frames' calls, a constructor called
// on operator new's result, and names its class.
func ctorType(frames []uint64, mods []heaptype.Module, mem leak.Memory, syms *symbolize.Symbolizer, code []byte) (heaptype.SiteType, bool) {
	for j := 0; j < len(frames) && j < maxAllocFrames; j++ {
		rs := []ptrace.Range{{Addr: frames[j], Buf: code}}
		mem.ReadRanges(rs)
		target, ok := ctorsite.Target(code[:rs[0].N], frames[j])
		if !ok {
			continue
		}
		k := sort.Search(len(mods), func(k int) bool { return mods[k].Hi > target })
		if k == len(mods) || target < mods[k].Lo || mods[k].Path == "" || mods[k].Path[0] != '/' {
			return heaptype.SiteType{}, false
		}
		fs, err := syms.Lookup(mods[k].Path, mods[k].BuildID, target-mods[k].Bias)
		if err != nil || len(fs) == 0 {
			return heaptype.SiteType{}, false
		}
		class, ok := heaptype.CtorClass(fs[len(fs)-1].Function)
		if !ok {
			return heaptype.SiteType{}, false
		}
		st := heaptype.SiteType{Mod: -1, Type: dwarftypes.None, Name: class, Ev: heaptype.Ctor}
		return st, true
	}
	return heaptype.SiteType{}, false
}

// framesType returns the type the first frames of an allocation's stack
// (inlined ones too) say it allocates: the first allocator frame's type
// argument (heaptype.AllocatedType), found by name in the frame's module
// or, failing that, in the others.
func framesType(frames []uint64, fmods []int32, mods []heaptype.Module, modOf map[int32]int, syms *symbolize.Symbolizer) (heaptype.SiteType, bool) {
	for j := 0; j < len(frames) && j < maxSiteFrames; j++ {
		hm, ok := modOf[fmods[j]]
		if !ok || frames[j] == 0 || mods[hm].Path == "" || mods[hm].Path[0] != '/' {
			continue
		}
		fs, err := syms.Lookup(mods[hm].Path, mods[hm].BuildID, frames[j]-1-mods[hm].Bias)
		if err != nil {
			continue
		}
		for _, f := range fs {
			name, ok := heaptype.AllocatedType(f.Function)
			if !ok {
				continue
			}
			for _, m := range append([]int{hm}, seq(len(mods))...) {
				if mt := mods[m].Types; mt != nil {
					if id, ok := mt.ByDemangledName(name); ok {
						return heaptype.SiteType{Mod: m, Type: id, Ev: heaptype.AllocSite}, true
					}
				}
			}
			return heaptype.SiteType{}, false // the innermost allocator's type, or none
		}
	}
	return heaptype.SiteType{}, false
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// maxSiteFrames is how deep in a stack an allocator's frame is looked
// for (the agent's, operator new's, malloc's frames come first).
const maxSiteFrames = 8

// maxAllocFrames is how deep in a stack the call to new is looked for
// (below the agent's, operator new's and malloc's frames).
const maxAllocFrames = 4

// typeModules returns p's loaded modules with their types, by address,
// and the index there of each index of p.Modules.
func (s *imageScan) typeModules(p *heap.Process) ([]heaptype.Module, map[int32]int) {
	var mods []heaptype.Module
	var from []int32 // index in p.Modules of each of mods
	for mi, m := range p.Modules {
		if m.Unloaded != 0 || len(m.Segments) == 0 || filepath.Base(m.Path) == "libleakpath.so" {
			continue
		}
		hm := heaptype.Module{Path: m.Path, BuildID: m.BuildID, Bias: m.Bias, Lo: ^uint64(0)}
		for _, s := range m.Segments {
			hm.Lo = min(hm.Lo, m.Bias+s.Vaddr)
			hm.Hi = max(hm.Hi, m.Bias+s.Vaddr+s.Memsz)
		}
		if m.Path != "" && m.Path[0] == '/' { // not the vdso
			if mt, err := s.a.opts.DWARF.Types(m.Path, m.BuildID); err == nil {
				hm.Types = mt
			}
		}
		mods = append(mods, hm)
		from = append(from, int32(mi))
	}
	order := make([]int, len(mods))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case mods[a].Lo < mods[b].Lo:
			return -1
		case mods[a].Lo > mods[b].Lo:
			return 1
		}
		return 0
	})
	// Overlapping modules (a model out of step) would confuse lookups:
	// the later ones go.
	var out []heaptype.Module
	modOf := map[int32]int{}
	for _, k := range order {
		if n := len(out); n == 0 || mods[k].Lo >= out[n-1].Hi {
			modOf[from[k]] = len(out)
			out = append(out, mods[k])
		}
	}
	return out, modOf
}

// prefetchWait bounds the wait for the model's list of modules before a
// scan: past it, the scan reads what it needs while the process waits.
const prefetchWait = 2 * time.Second

// prefetchTypes reads the types of the image's modules (their DWARF,
// once per module for the run) before the stop, so that the pause holds
// the scan and the typing of the blocks only, not a reading of DWARF that
// the warm-up had not done yet.
func (s *imageScan) prefetchTypes() {
	type mod struct {
		path string
		id   []byte
	}
	got := make(chan []mod, 1)
	s.im.WithModel(func(p *heap.Process) {
		var ms []mod
		if p != nil {
			for _, m := range p.Modules {
				if m.Unloaded == 0 && len(m.Segments) > 0 && m.Path != "" && m.Path[0] == '/' && filepath.Base(m.Path) != "libleakpath.so" {
					ms = append(ms, mod{m.Path, slices.Clone(m.BuildID)})
				}
			}
		}
		got <- ms
	})
	t := time.NewTimer(prefetchWait)
	defer t.Stop()
	select {
	case ms := <-got:
		for _, m := range ms {
			s.a.opts.DWARF.Types(m.path, m.id)
		}
	case <-t.C:
	}
}
