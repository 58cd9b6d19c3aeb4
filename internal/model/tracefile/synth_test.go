package tracefile

import (
	"container/heap"
	"math/rand/v2"

	"github.com/leakpath/leakpath/internal/model/event"
)

// synthStream makes a realistic stream of allocation events: nAllocs
// allocations and the frees of all but the leaked ones, from nStacks
// stacks of Zipf popularity (each with its usual size and function), with
// addresses from a glibc-like allocator (per-thread arenas, LIFO free
// lists per size class, a bump pointer, mmap for big blocks), two threads
// interleaving, and TSC-like times about 100 ticks apart. StackDefs are
// emitted when a stack is first used, after a few module loads.
func synthStream(seed uint64, nAllocs, nStacks int) []event.Event {
	r := rand.New(rand.NewPCG(seed, 1))
	zipf := rand.NewZipf(r, 1.2, 4, uint64(nStacks-1))
	type stack struct {
		fn       event.Fn
		size     uint64
		vary     bool
		lifetime float64 // mean, in events; 0: leaked
		frames   []uint64
		defined  bool
	}
	// Stacks are paths in a call tree, so callers are shared.
	funcs := make([]uint64, 3000)
	for i := range funcs {
		base := uint64(0x555555554000)
		if i%3 == 0 {
			base = 0x7ffff7c00000 // libc-ish
		}
		funcs[i] = base + uint64(r.IntN(2<<20))
	}
	stacks := make([]stack, nStacks)
	for i := range stacks {
		s := &stacks[i]
		switch x := r.IntN(100); {
		case x < 70:
			s.fn = event.Malloc
		case x < 90:
			s.fn = event.New
		case x < 95:
			s.fn = event.Calloc
		default:
			s.fn = event.NewArray
		}
		s.size = uint64(8 << r.IntN(9)) // 8..2048
		s.size += uint64(r.IntN(int(s.size))) &^ 7
		if r.IntN(200) == 0 {
			s.size = 200000 + uint64(r.IntN(1<<20))
		}
		s.vary = r.IntN(100) < 15
		switch x := r.IntN(100); {
		case x < 60:
			s.lifetime = 6
		case x < 90:
			s.lifetime = 400
		case x < 99:
			s.lifetime = 40000
		}
		depth := 6 + r.IntN(14)
		s.frames = make([]uint64, depth)
		node := 0
		for d := depth - 1; d >= 0; d-- {
			node = (node*7 + 1 + r.IntN(3+d*2)) % len(funcs)
			s.frames[d] = funcs[node] + uint64(d)
		}
	}
	type block struct{ addr, class uint64 }
	type arena struct {
		bump uint64
		free map[uint64][]uint64 // size class → LIFO
	}
	arenas := []*arena{
		{bump: 0x5555555a0000, free: map[uint64][]uint64{}},
		{bump: 0x7fffe8000900, free: map[uint64][]uint64{}},
	}
	mmapTop := uint64(0x7ffff7000000)
	var due dueHeap
	t := uint64(0x2d1f5c0a1e3b)
	thread := 0
	tids := []int32{41231, 41235}
	var evs []event.Event
	emit := func(ev event.Event) {
		t += 60 + uint64(r.IntN(80))
		ev.Time, ev.Thread = t, tids[thread]
		evs = append(evs, ev)
	}
	emit(event.Event{Kind: event.Clock, X: &event.Extra{Clock: &event.ClockInfo{Ticks: t, Mono: 123456789, Real: 1700000000e9, TicksPerSec: 2.9e9}}})
	for i, p := range []string{"/usr/bin/prog", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6"} {
		emit(event.Event{Kind: event.ModuleLoad, X: &event.Extra{Module: &event.Module{ID: uint32(i + 1), Path: p,
			BuildID: []byte{0x8a, 0x1b, byte(i), 0x33, 0x9f, 0x10, 0x22, 0x01, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, byte(i)},
			Bias:    0x555555554000 + uint64(i)<<32,
			Segments: []event.Segment{{Vaddr: 0, Memsz: 0x2000, Flags: 4}, {Vaddr: 0x2000, Memsz: 0x50000, Flags: 5, Offset: 0x2000},
				{Vaddr: 0x53000, Memsz: 0x8000, Flags: 6, Offset: 0x52000}}}}})
	}
	emit(event.Event{Kind: event.ThreadStart, Addr: 0x7ffff7d8a740})
	step := 0
	for allocs := 0; allocs < nAllocs || len(due) > 0; step++ {
		if r.IntN(5) == 0 {
			thread = 1 - thread
			if step == 50 {
				emit(event.Event{Kind: event.ThreadStart, Addr: 0x7ffff6d89640})
			}
		}
		if len(due) > 0 && (due[0].at <= step || allocs >= nAllocs) {
			d := heap.Pop(&due).(dueFree)
			a := arenas[thread] // tcache: the freeing thread's
			if d.class < 128<<10 {
				a.free[d.class] = append(a.free[d.class], d.addr)
			}
			emit(event.Event{Kind: event.Free, Fn: d.fn, Addr: d.addr})
			continue
		}
		if allocs >= nAllocs {
			continue
		}
		allocs++
		id := int(zipf.Uint64())
		s := &stacks[id]
		if !s.defined {
			s.defined = true
			emit(event.Event{Kind: event.StackDef, Stack: uint32(id + 1), X: &event.Extra{Frames: s.frames}})
		}
		size := s.size
		if s.vary {
			size = uint64(1 + r.IntN(int(2*s.size)))
		}
		class := (size + 8 + 15) &^ 15
		a := arenas[thread]
		var addr uint64
		if class >= 128<<10 {
			mmapTop -= (class + 4095) &^ 4095
			addr = mmapTop + 16
		} else if l := a.free[class]; len(l) > 0 {
			addr = l[len(l)-1]
			a.free[class] = l[:len(l)-1]
		} else {
			addr = a.bump + 16
			a.bump += class
		}
		emit(event.Event{Kind: event.Alloc, Fn: s.fn, Stack: uint32(id + 1), Addr: addr, Size: size})
		if s.lifetime > 0 {
			life := int(r.ExpFloat64()*s.lifetime) + 1
			heap.Push(&due, dueFree{at: step + life, addr: addr, class: class, arena: thread, fn: freeFnFor(s.fn)})
		}
	}
	emit(event.Event{Kind: event.Exit, Size: 1})
	return evs
}

type dueFree struct {
	at          int
	addr, class uint64
	arena       int
	fn          event.Fn
}

type dueHeap []dueFree

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueFree)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
