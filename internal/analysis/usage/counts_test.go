package usage

import (
	"reflect"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/frame"
)

// modulesOnly resolves a stack to its frames' modules, as units by
// library need them (no symbols: no frame is the allocator's).
func modulesOnly(p *heap.Process, id heap.StackID) []frame.Frame {
	var out []frame.Frame
	mods := p.Stacks.Modules(id)
	for i, a := range p.Stacks.Frames(id) {
		f := frame.Frame{Address: a, ModIndex: mods[i]}
		if m := mods[i]; m >= 0 {
			f.Module, f.Offset = p.Modules[m].Path, a-p.Modules[m].Bias
		}
		out = append(out, f)
	}
	return out
}

// TestUnits: the counts of units by library (caller attribution) per
// 2 µs slice: the executable allocates 100 B and frees them, liba
// allocates 50 B; each slice carries the net size at its end and its
// extremes within.
func TestUnits(t *testing.T) {
	const t0 = 1000
	e, err := New(Options{By: ByLibrary, Interval: 2 * time.Microsecond, Stack: modulesOnly})
	if err != nil {
		t.Fatal(err)
	}
	s := heap.NewSession()
	s.Observer = e
	evs := []event.Event{{Kind: event.ProcessStart, Time: t0, X: &event.Extra{
		Process: &event.ProcessInfo{PID: 7, ParentProc: -1, ExecOf: -1, Exe: "/bin/app"},
		Clock:   &event.ClockInfo{Ticks: t0, TicksPerSec: 1e9}}}}
	for i, m := range []struct {
		path string
		bias uint64
	}{{"/bin/app", 0x400000}, {"/lib/liba.so", 0x7000000000}} {
		evs = append(evs, event.Event{Kind: event.ModuleLoad, Time: t0, X: &event.Extra{Module: &event.Module{
			ID: uint32(i + 1), Path: m.path, Bias: m.bias, Segments: []event.Segment{{Memsz: 0x100000, Flags: 5}}}}})
	}
	evs = append(evs,
		event.Event{Kind: event.StackDef, Stack: 1, X: &event.Extra{Frames: []uint64{0x401010}}},
		event.Event{Kind: event.StackDef, Stack: 2, X: &event.Extra{Frames: []uint64{0x7000001010, 0x401020}}},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 2000, Thread: 1, Stack: 1, Addr: 0x1000, Size: 100},
		event.Event{Kind: event.Alloc, Fn: event.Malloc, Time: 3000, Thread: 1, Stack: 2, Addr: 0x2000, Size: 50},
		event.Event{Kind: event.Free, Fn: event.FreeFn, Time: 5000, Thread: 1, Stack: 1, Addr: 0x1000},
	)
	s.Apply(evs)
	var calls, mallocOnly [event.NumFn]uint64
	calls[event.Malloc], calls[event.FreeFn] = 1, 1
	mallocOnly[event.Malloc] = 1
	var freeOnly [event.NumFn]uint64
	freeOnly[event.FreeFn] = 1
	want := []UnitCounts{
		{Name: "/bin/app", Kind: KindExecutable, MaxBytes: 100, MinTime: t0, MaxTime: 2000,
			AllocatedBytes: 100, AllocatedBlocks: 1, FreedBytes: 100, FreedBlocks: 1, Calls: calls,
			Slices: []SliceCounts{
				{Index: 0, NetBytes: 100, NetBlocks: 1, CurrentBytes: 100, CurrentBlocks: 1, MaxBytes: 100,
					AllocatedBytes: 100, AllocatedBlocks: 1, Calls: mallocOnly},
				{Index: 2, NetBytes: -100, NetBlocks: -1, MaxBytes: 100, FreedBytes: 100, FreedBlocks: 1, Calls: freeOnly},
			}},
		{Name: "/lib/liba.so", Kind: KindLibrary, CurrentBytes: 50, CurrentBlocks: 1, MaxBytes: 50, MinTime: t0, MaxTime: 3000,
			AllocatedBytes: 50, AllocatedBlocks: 1, Calls: mallocOnly,
			Slices: []SliceCounts{{Index: 1, NetBytes: 50, NetBlocks: 1, CurrentBytes: 50, CurrentBlocks: 1, MaxBytes: 50,
				AllocatedBytes: 50, AllocatedBlocks: 1, Calls: mallocOnly}}},
	}
	if got := e.Units(s.Procs[0]); !reflect.DeepEqual(got, want) {
		t.Errorf("units:\n got %+v\nwant %+v", got, want)
	}
	if got := e.Units(&heap.Process{}); got != nil {
		t.Errorf("units of an image the engine never met: %+v", got)
	}
}
