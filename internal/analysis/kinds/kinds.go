// Package kinds is the scan of a stopped process as an analysis of the
// collector (collect.Analysis): at the exit of each image, at snapshots
// and before a detach it classifies every live block by reachability
// (internal/analysis/scan, internal/analysis/leak) and, when asked, types
// the blocks (types.go); it records the result as Scan events.
package kinds

import (
	"cmp"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/analysis/scan"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/target/region"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// Options configure the scan.
type Options struct {
	// Types, when not nil, types the blocks at every scan (run --types):
	// the reference graph of the live blocks, their types, paths to root
	// and retained sizes, read from the stopped process with the modules'
	// symbols and DWARF.
	Types *symbolize.Symbolizer
	DWARF *dwarftypes.Reader // of Types' modules
}

// Analysis scans every stopped image.
type Analysis struct {
	opts Options
}

// New returns the scan, to register with the collector
// (collect.Options.Analyses).
func New(opts Options) *Analysis { return &Analysis{opts: opts} }

// Typed reports whether the scan types the blocks.
func (a *Analysis) Typed() bool { return a.opts.Types != nil }

// Image follows one image (collect.Analysis).
func (a *Analysis) Image(im *collect.Image) collect.ImageAnalysis {
	return &imageScan{a: a, im: im}
}

type imageScan struct {
	a  *Analysis
	im *collect.Image
}

// maxSuppressions bounds the text read from __lsan_default_suppressions.
const maxSuppressions = 1 << 20

// scanBatch is the most blocks one Scan event carries.
const scanBatch = 1 << 20

// BeforeStop reads the types of the image's modules before the stop, so
// that the pause holds the scan and the typing only (collect.BeforeStopper).
func (s *imageScan) BeforeStop(collect.StopKind) func() {
	if s.a.opts.Types != nil && s.a.opts.DWARF != nil {
		s.prefetchTypes()
	}
	return nil
}

// ExitMissed records why the image has no scan at its exit
// (collect.ExitMisser): the report says it.
func (s *imageScan) ExitMissed(why string) []event.Event {
	return scanEvents(s.im.Proc, s.im.Now(), &event.ScanInfo{Error: why}, nil, nil, nil, nil)
}

// Stopped classifies every live block of the stopped image, the pending
// ones too (the model learns of them only later), and records the result
// as Scan events (collect.ImageAnalysis). A failed scan at the exit is
// recorded too, so that the report says why it has no kinds.
func (s *imageScan) Stopped(st *collect.Stopped) error {
	live := st.Kind != collect.StopExit
	reg := st.Region()
	if reg == nil {
		return errors.New("the image is not recorded any more")
	}
	if !live && reg.HoldFlags()&wire.HoldFlagOff != 0 {
		// The program's __lsan_is_turned_off said no leak check: as
		// LeakSanitizer, none (the model learns why).
		st.Emit(event.Event{Kind: event.LeakCheckOff, Proc: st.Proc, Time: st.Now()})
		return nil
	}
	suppAddr, own, tlsOff, tlsSize := reg.HoldInfo()
	supp := ""
	if suppAddr != 0 {
		supp, _ = scan.ReadString(st.Tracer, suppAddr, maxSuppressions)
	}
	target := scan.Target{PID: int(st.PID), Tracer: st.Tracer, Held: st.Held, OwnTable: own, TLSOffset: tlsOff, TLSSize: tlsSize}
	if c := st.Caller; c != nil {
		target.Caller = &scan.Caller{TID: c.TID, TP: c.TP, SP: c.SP, RegsAddr: c.RegsAddr}
	}
	p := st.Process
	blocks, keys := liveBlocks(p, st.Pending)
	target.Extra = lsanRoots(p)
	res, stats, hp, err := scan.RunHeap(target, blocks, leak.DefaultOptions())
	if err == nil {
		lsanIgnored(p, blocks, res)
	}
	info := &event.ScanInfo{Suppressions: supp, PauseNs: uint64(time.Since(st.Start)), RootBytes: stats.RootBytes, HeapBytes: stats.HeapBytes, Live: live}
	if err != nil {
		if !live {
			info.Error = err.Error()
			st.Emit(scanEvents(st.Proc, st.Now(), info, nil, nil, nil, nil)...)
		}
		return err
	}
	var typed func([]event.ScannedBlock)
	if s.a.opts.Types != nil {
		typed = func(sbs []event.ScannedBlock) { s.typeBlocks(p, blocks, keys, hp, sbs, info) }
	}
	// Typing reads the process: it must still be stopped.
	st.Emit(scanEvents(st.Proc, st.Now(), info, blocks, res, typed, keys)...)
	return nil
}

// newArray0 tells an 8-byte block from operator new[]: new T[0] of a type
// with a destructor (its element count, 0, then no element), whose only
// pointer is the address just past it. An array with elements has more
// bytes; 8 bytes of elements without a count are held by their start.
func newArray0(fn event.Fn, size uint64) bool {
	return fn == event.NewArray && size == 8
}

// liveBlocks lists the model's live blocks and the pending ones, marking
// those the dynamic linker allocated (its TLS bookkeeping) as Runtime.
// When the program has pools, keys are the blocks' keys in the model (a
// pool's object is kept under its address and pool: heap.BlockAddr), and
// the blocks that hold pool objects, the pools' memory, are left out, as
// memcheck leaves out a malloc'd block that holds mempool chunks; keys is
// nil otherwise.
func liveBlocks(p *heap.Process, pending []region.PendingBlock) (blocks []leak.Block, keys []uint64) {
	// By site: 0 not known yet, 1 the loader's, 2 not.
	var rt []uint8
	runtime := func(site heap.StackID) bool {
		if int(site) >= len(rt) {
			rt = append(rt, make([]uint8, int(site)+1-len(rt)+1024)...)
		}
		if rt[site] == 0 {
			rt[site] = 2
			if fromLoader(p, site) {
				rt[site] = 1
			}
		}
		return rt[site] == 1
	}
	pools := p.PoolObjects() > 0
	blocks = make([]leak.Block, 0, p.Totals.LiveBlocks+uint64(len(pending))+uint64(p.PoolObjects()))
	var spans []heap.SpanBlock
	p.Live(func(key uint64, b heap.Block) {
		blocks = append(blocks, leak.Block{Addr: heap.BlockAddr(key), Size: b.Size, Runtime: runtime(b.Site), PastEnd: newArray0(b.Fn, b.Size)})
		if pools {
			spans = append(spans, heap.SpanBlock{Key: key, Size: b.Size})
		}
	})
	for _, pb := range pending {
		if _, known := p.LiveBlock(pb.Addr); !known {
			blocks = append(blocks, leak.Block{Addr: pb.Addr, Size: pb.Size, Runtime: runtime(p.StackOf(pb.Stack)),
				PastEnd: newArray0(pb.Fn, pb.Size)})
			if pools {
				spans = append(spans, heap.SpanBlock{Key: pb.Addr, Size: pb.Size})
			}
		}
	}
	if !pools {
		leak.SortBlocks(blocks)
		return blocks, nil
	}
	holders, overlapping := heap.PoolLayout(spans)
	type keyed struct {
		b   leak.Block
		key uint64
	}
	ks := make([]keyed, 0, len(blocks))
	for i, b := range blocks {
		if k := spans[i].Key; !holders[k] && !overlapping[k] {
			ks = append(ks, keyed{b, k})
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return cmp.Compare(a.b.Addr, b.b.Addr) })
	blocks, keys = blocks[:0], make([]uint64, len(ks))
	for i, k := range ks {
		blocks = append(blocks, k.b)
		keys[i] = k.key
	}
	return blocks, keys
}

// fromLoader reports whether a stack's allocating caller is the dynamic
// linker (ld-linux*.so, ld.so).
func fromLoader(p *heap.Process, site heap.StackID) bool {
	frames := p.Stacks.Frames(site)
	for i, pc := range frames {
		if i >= 2 {
			break
		}
		mi := p.ModuleOf(pc)
		if mi < 0 || int(mi) >= len(p.Modules) {
			continue
		}
		base := filepath.Base(p.Modules[mi].Path)
		if strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld.so") || strings.HasPrefix(base, "ld-2.") {
			return true
		}
	}
	return false
}

// scanEvents turns a classification into Scan events of at most
// scanBatch blocks each (one event with none when res is nil); typed, if
// not nil, adds the blocks' types (to them and to info). keys, when not
// nil, are the blocks' keys in the model (liveBlocks): the events name
// the blocks by them.
func scanEvents(proc uint32, now uint64, info *event.ScanInfo, blocks []leak.Block, res *leak.Result, typed func([]event.ScannedBlock), keys []uint64) []event.Event {
	sbs := make([]event.ScannedBlock, len(blocks))
	for i, b := range blocks {
		sbs[i] = event.ScannedBlock{Addr: b.Addr, Size: b.Size, Kind: res.Kinds[i]}
		if o := res.Owner[i]; o >= 0 {
			sbs[i].Owner = blocks[o].Addr
		}
	}
	if typed != nil && len(sbs) > 0 {
		typed(sbs)
	}
	if keys != nil {
		keyOf := func(a uint64) uint64 {
			i, ok := slices.BinarySearchFunc(blocks, a, func(b leak.Block, a uint64) int { return cmp.Compare(b.Addr, a) })
			if !ok {
				return a
			}
			return keys[i]
		}
		for i := range sbs {
			sb := &sbs[i]
			sb.Addr = keys[i]
			if sb.Owner != 0 {
				sb.Owner = keyOf(sb.Owner)
			}
			if sb.Holder != 0 {
				sb.Holder = keyOf(sb.Holder)
			}
		}
	}
	var evs []event.Event
	for part := 0; part == 0 || len(sbs) > 0; part++ {
		n := min(len(sbs), scanBatch)
		si := &event.ScanInfo{Blocks: sbs[:n], Part: uint32(part)}
		if part == 0 {
			head := *info
			head.Blocks, head.Part = sbs[:n], 0
			si = &head
		}
		evs = append(evs, event.Event{Kind: event.Scan, Proc: proc, Time: now, X: &event.Extra{Scan: si}})
		sbs = sbs[n:]
	}
	return evs
}

// lsanRoots returns the roots the program gave through LeakSanitizer's
// interface (agent/lsan.c): its registered root regions, and the blocks
// it said are no leaks, whose contents LeakSanitizer scans as reachable.
func lsanRoots(p *heap.Process) []leak.Root {
	var out []leak.Root
	for _, r := range p.RootRegions() {
		out = append(out, leak.Root{Addr: r[0], Len: r[1], What: "root region"})
	}
	for _, a := range p.IgnoredBlocks() {
		if b, ok := p.LiveBlock(a); ok && b.Size > 0 {
			out = append(out, leak.Root{Addr: a, Len: b.Size, What: "ignored object"})
		}
	}
	return out
}

// lsanIgnored makes the blocks the program said are no leaks reachable
// in res (blocks are sorted by address): their contents were roots, so
// what they point to is reachable already.
func lsanIgnored(p *heap.Process, blocks []leak.Block, res *leak.Result) {
	for _, a := range p.IgnoredBlocks() {
		i, ok := slices.BinarySearchFunc(blocks, a, func(b leak.Block, a uint64) int { return cmp.Compare(b.Addr, a) })
		if !ok {
			continue
		}
		res.Kinds[i] = leak.Reachable
		res.Owner[i] = -1
		res.IndirectBytes[i], res.IndirectBlocks[i] = 0, 0
	}
}
