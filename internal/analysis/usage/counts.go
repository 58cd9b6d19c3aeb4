package usage

import (
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// UnitCounts is what one unit of an image did, as the engine counted it
// (see the package documentation). Times are ticks of the image's clock;
// internal/render/usagetable turns them into seconds and the counts into
// tables.
type UnitCounts struct {
	// Name of a library or function unit (a site unit's is "(no stack)"
	// until its frames name it; thread units are named by their tid).
	Name   string
	Kind   string       // library units: KindExecutable, KindRuntime, KindLibrary or KindUnknown
	Module string       // function units: the module's path
	TID    int32        // thread units
	Site   heap.StackID // site units

	CurrentBytes, CurrentBlocks     int64 // net size now
	InheritedBytes, InheritedBlocks int64 // what a fork child started with
	MinBytes, MaxBytes              int64 // of the net size, as it ran
	MinTime, MaxTime                uint64
	AllocatedBytes, AllocatedBlocks uint64
	FreedBytes, FreedBlocks         uint64
	Calls                           [event.NumFn]uint64
	// Per-call rows: the invocation's number (from 1; 0: not a per-call
	// row), its thread, and when its first and last allocator calls came.
	Call                int
	CallTID             int32
	CallFirst, CallLast uint64
	// Slices, with Options.Interval: what it did in each time slice it
	// did something in, in time order.
	Slices []SliceCounts
}

// SliceCounts is what one unit did during the time slice [Index·I,
// (Index+1)·I) of its image's life (I: Options.Interval).
type SliceCounts struct {
	Index                           uint64
	NetBytes, NetBlocks             int64 // change of the net size
	CurrentBytes, CurrentBlocks     int64 // the net size at the slice's end
	MinBytes, MaxBytes              int64 // of the net size within
	AllocatedBytes, AllocatedBlocks uint64
	FreedBytes, FreedBlocks         uint64
	Calls                           [event.NumFn]uint64
}

// Options returns the engine's options, the defaults filled in.
func (e *Engine) Options() Options { return e.opts }

// FoldedAggregates returns how many aggregates of folded pairs the engine
// met.
func (e *Engine) FoldedAggregates() uint64 { return e.folded }

// Typed reports whether units come from a typed scan, not from events.
func (b By) Typed() bool { return b.typed() }

// Units returns the units of image p in the order the engine met them
// (nil: it met no event of p).
func (e *Engine) Units(p *heap.Process) []UnitCounts {
	im := e.images[p]
	if im == nil {
		return nil
	}
	out := make([]UnitCounts, len(im.units))
	for i, u := range im.units {
		out[i] = UnitCounts{
			Name: u.name, Kind: u.kind, Module: u.module, TID: u.tid, Site: u.site,
			CurrentBytes: u.cur, CurrentBlocks: u.curBlocks,
			InheritedBytes: u.inherited, InheritedBlocks: u.inheritedBlocks,
			MinBytes: u.min, MaxBytes: u.max, MinTime: u.minT, MaxTime: u.maxT,
			AllocatedBytes: u.allocBytes, AllocatedBlocks: u.allocBlocks,
			FreedBytes: u.freedBytes, FreedBlocks: u.freedBlocks, Calls: u.calls,
			Call: u.call, CallTID: u.callTID, CallFirst: u.first, CallLast: u.last,
			Slices: u.sliceCounts(),
		}
	}
	return out
}

// sliceCounts are u's slices with the net size at their ends and its
// extremes within: a slice's extremes are at least its start and end.
func (u *unit) sliceCounts() []SliceCounts {
	if len(u.slices) == 0 {
		return nil
	}
	out := make([]SliceCounts, len(u.slices))
	cur, curBlocks := u.inherited, u.inheritedBlocks
	for i, s := range u.slices {
		start := cur
		cur += s.net
		curBlocks += s.netBlocks
		lo, hi := min(start, cur), max(start, cur)
		if s.seen {
			lo, hi = min(lo, s.lo), max(hi, s.hi)
		}
		out[i] = SliceCounts{Index: s.idx, NetBytes: s.net, NetBlocks: s.netBlocks,
			CurrentBytes: cur, CurrentBlocks: curBlocks, MinBytes: lo, MaxBytes: hi,
			AllocatedBytes: s.allocBytes, AllocatedBlocks: s.allocBlocks,
			FreedBytes: s.freedBytes, FreedBlocks: s.freedBlocks, Calls: s.calls}
	}
	return out
}
