package heap

import (
	"sort"

	"github.com/leakpath/leakpath/internal/model/event"
)

// Pools: memory the program hands out itself (LEAKPATH_POOL_* of
// agent/include/leakpath.h). Each object of a pool is a block of its own
// in the live set, under a key that keeps it apart from a block at the
// same address: the malloc'd block the pool carved it from (its first
// object starts where that starts), or an object of an outer pool. The
// key is the address with the pool's number (1..maxPools) in bits 48..63;
// addresses of user space on x86-64 stay below 2^47 (2^56 with 5-level
// page tables, where an object above 2^48 is refused and counted as an
// anomaly).
//
// Objects count at their sites (allocations, live bytes, leaks by kind)
// but not in the process's totals: the pool's own memory, a malloc'd
// block or a mapping, is the heap the program uses, and counting what it
// holds again would count those bytes twice.

const (
	poolShift = 48
	addrMask  = 1<<poolShift - 1
	maxPools  = 1<<(64-poolShift) - 1
)

// BlockAddr is the address of the live block under key (see Live): a
// pool's object is kept under its address and its pool's number.
func BlockAddr(key uint64) uint64 { return key & addrMask }

// IsPoolObject reports whether the live block under key is an object of a
// program's pool.
func IsPoolObject(key uint64) bool { return key>>poolShift != 0 }

type pool struct {
	num  uint64              // 1..maxPools
	objs map[uint64]struct{} // keys of its live objects
}

type poolState struct {
	byHandle map[uint64]*pool
	free     []uint64 // numbers of destroyed pools, for reuse
	next     uint64   // numbers handed out so far
	objects  int      // live objects of all pools
}

func (s *poolState) clone() *poolState {
	if s == nil {
		return nil
	}
	c := &poolState{byHandle: make(map[uint64]*pool, len(s.byHandle)), free: append([]uint64(nil), s.free...), next: s.next, objects: s.objects}
	for h, pl := range s.byHandle {
		objs := make(map[uint64]struct{}, len(pl.objs))
		for k := range pl.objs {
			objs[k] = struct{}{}
		}
		c.byHandle[h] = &pool{num: pl.num, objs: objs}
	}
	return c
}

// poolOf returns the pool named handle, creating it when create is set;
// nil when it is not known (or no number is left for it).
func (p *Process) poolOf(handle uint64, create bool) *pool {
	if p.pools == nil {
		if !create {
			return nil
		}
		p.pools = &poolState{byHandle: map[uint64]*pool{}}
	}
	if pl := p.pools.byHandle[handle]; pl != nil || !create {
		return pl
	}
	s := p.pools
	var num uint64
	if n := len(s.free); n > 0 {
		num, s.free = s.free[n-1], s.free[:n-1]
	} else if s.next < maxPools {
		s.next++
		num = s.next
	} else {
		p.Anomalies++
		return nil
	}
	pl := &pool{num: num, objs: map[uint64]struct{}{}}
	s.byHandle[handle] = pl
	return pl
}

// poolCreate starts the event's pool; a pool already there keeps its
// objects (valgrind too refuses a second CREATE_MEMPOOL of a pool).
func (p *Process) poolCreate(ev *event.Event) {
	if p.pools != nil && p.pools.byHandle[ev.Pool()] != nil {
		p.Anomalies++
		return
	}
	p.poolOf(ev.Pool(), true)
}

// poolAlloc adds an object of the event's pool. A pool never created is created
// here: its creation may predate the recording (an attach).
func (p *Process) poolAlloc(ev *event.Event) {
	p.Totals.Calls[event.PoolAllocFn]++
	if ev.Addr == 0 || ev.Addr > addrMask {
		p.Anomalies++
		return
	}
	pl := p.poolOf(ev.Pool(), true)
	if pl == nil {
		return
	}
	key := ev.Addr | pl.num<<poolShift
	b := Block{Size: ev.Size, Time: ev.Time, Site: p.stackOf(ev.Stack), Thread: ev.Thread, Fn: event.PoolAllocFn}
	var old Block
	if p.blocks.put(key, &b, &old) {
		// Handed out again without a free: the program's pool reused
		// it (valgrind's memcheck reports the same).
		p.poolReleased(old)
		p.Anomalies++
	} else {
		pl.objs[key] = struct{}{}
		p.pools.objects++
	}
	s := p.site(b.Site)
	s.Allocs++
	s.AllocBytes += b.Size
	s.LiveBlocks++
	s.LiveBytes += b.Size
	if s.First == 0 || b.Time < s.First {
		s.First, s.Fn = b.Time, b.Fn
	}
	if b.Time > s.Last {
		s.Last = b.Time
	}
}

// poolReleased takes a pool's object out of its site's live counts.
func (p *Process) poolReleased(b Block) {
	s := p.site(b.Site)
	s.LiveBlocks--
	s.LiveBytes -= b.Size
	s.Frees++
	s.FreeBytes += b.Size
}

// poolFree releases an object of the event's pool; one the pool does not have is
// an invalid free of the pool's.
func (p *Process) poolFree(ev *event.Event) {
	p.Totals.Calls[event.PoolFreeFn]++
	stack := p.stackOf(ev.Stack)
	if stack != 0 {
		p.FreeStacksSeen = true
	}
	pl := p.poolOf(ev.Pool(), false)
	var key uint64
	if pl != nil && ev.Addr <= addrMask {
		key = ev.Addr | pl.num<<poolShift
	}
	b, ok := Block{}, false
	if key != 0 {
		ok = p.blocks.take(key, &b)
	}
	if !ok {
		p.addError(Error{Kind: InvalidFree, Addr: ev.Addr, Stack: stack, Fn: event.PoolFreeFn, Thread: ev.Thread, Time: ev.Time})
		return
	}
	delete(pl.objs, key)
	p.pools.objects--
	p.poolReleased(b)
	if stack != 0 {
		p.site(b.Site).addFreeStack(stack)
	}
}

// poolDestroy ends the event's pool: the objects it still has go with it, each
// reported (PoolDestroyedLive, by allocation site).
func (p *Process) poolDestroy(ev *event.Event) {
	pl := p.poolOf(ev.Pool(), false)
	if pl == nil {
		p.Anomalies++
		return
	}
	keys := make([]uint64, 0, len(pl.objs))
	for k := range pl.objs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	stack := p.stackOf(ev.Stack)
	for _, k := range keys {
		var b Block
		if !p.blocks.take(k, &b) {
			continue
		}
		p.poolReleased(b)
		p.addError(Error{Kind: PoolDestroyedLive, Addr: BlockAddr(k), Stack: stack, AllocStack: b.Site,
			Fn: event.PoolFreeFn, AllocFn: b.Fn, Thread: ev.Thread, Time: ev.Time})
	}
	p.pools.objects -= len(keys)
	delete(p.pools.byHandle, ev.Addr)
	p.pools.free = append(p.pools.free, pl.num)
}

// PoolObjects is the number of live objects of the program's pools.
func (p *Process) PoolObjects() int {
	if p.pools == nil {
		return 0
	}
	return p.pools.objects
}

// SpanBlock is a live block as PoolLayout reads it: its key in the live
// set (see Live), and its extent.
type SpanBlock struct {
	Key, Size uint64
}

// PoolLayout tells which of blocks a leak scan must leave out when the
// program has pools: holders, the blocks that hold objects of a pool
// (the pool's memory, whose objects are the blocks; memcheck leaves a
// malloc'd block holding mempool chunks out the same way), and
// overlapping, blocks that overlap another without holding it or lying
// in it (the program's annotations disagree with each other: the later
// one is left out). Both are nil when nothing nests.
func PoolLayout(blocks []SpanBlock) (holders, overlapping map[uint64]bool) {
	bs, parent := nesting(blocks)
	if bs == nil {
		return nil, nil
	}
	holders, overlapping = map[uint64]bool{}, map[uint64]bool{}
	for i, b := range bs {
		switch parent[i] {
		case noParent:
		case overlaps:
			overlapping[b.Key] = true
		default:
			holders[bs[parent[i]].Key] = true
		}
	}
	return holders, overlapping
}

const (
	noParent = -1 // a block in no other
	overlaps = -2 // a block overlapping another without nesting
)

// nesting sorts a copy of blocks by address and tells, for each, the
// index of the block it lies directly in (a pool's object in the pool's
// memory), noParent or overlaps. bs is nil when no block is a pool's
// object: then nothing nests.
func nesting(blocks []SpanBlock) (bs []SpanBlock, parent []int) {
	hasPool := false
	for _, b := range blocks {
		if IsPoolObject(b.Key) {
			hasPool = true
			break
		}
	}
	if !hasPool {
		return nil, nil
	}
	bs = append([]SpanBlock(nil), blocks...)
	// By address; at one address the bigger first (the holder before
	// what it holds); of the same extent, the pool's object (the inner
	// one, by its key) last.
	sort.Slice(bs, func(i, j int) bool {
		ai, aj := BlockAddr(bs[i].Key), BlockAddr(bs[j].Key)
		if ai != aj {
			return ai < aj
		}
		if bs[i].Size != bs[j].Size {
			return bs[i].Size > bs[j].Size
		}
		return bs[i].Key < bs[j].Key
	})
	parent = make([]int, len(bs))
	type open struct {
		i   int
		end uint64
	}
	var stack []open // the enclosing blocks of the one at hand, outermost first
	for i, b := range bs {
		parent[i] = noParent
		a := BlockAddr(b.Key)
		end := a + b.Size
		if end < a {
			end = addrMask + 1
		}
		for len(stack) > 0 && stack[len(stack)-1].end <= a {
			stack = stack[:len(stack)-1]
		}
		if n := len(stack); n > 0 {
			top := stack[n-1]
			// Past its end, or two of the allocator's blocks (not
			// nested by anyone's word): overlapping.
			if end > top.end || !IsPoolObject(b.Key) && !IsPoolObject(bs[top.i].Key) {
				parent[i] = overlaps
				continue
			}
			parent[i] = top.i
		}
		stack = append(stack, open{i, end})
	}
	return bs, parent
}

// LiveOwn calls fn for each live block (as Live does) with its own
// bytes: its size less the sizes of the blocks directly in it (a pool's
// memory less its objects, an outer pool's object less an inner pool's
// memory). Their sum is what the totals count, the pools' memory once,
// and each object counts at its own site, where the report lists it; a
// block overlapping another without nesting (annotations that disagree)
// counts whole.
func (p *Process) LiveOwn(fn func(key uint64, b Block, own uint64)) {
	if p.PoolObjects() == 0 {
		p.Live(func(key uint64, b Block) { fn(key, b, b.Size) })
		return
	}
	var spans []SpanBlock
	byKey := map[uint64]Block{}
	p.Live(func(key uint64, b Block) {
		spans = append(spans, SpanBlock{key, b.Size})
		byKey[key] = b
	})
	bs, parent := nesting(spans)
	if bs == nil {
		bs, parent = spans, make([]int, len(spans))
		for i := range parent {
			parent[i] = noParent
		}
	}
	own := make([]uint64, len(bs))
	for i, b := range bs {
		own[i] = b.Size
	}
	for i, b := range bs {
		if k := parent[i]; k >= 0 {
			own[k] -= min(own[k], b.Size)
		}
	}
	for i, b := range bs {
		fn(b.Key, byKey[b.Key], own[i])
	}
}

// poolHolders returns the live blocks (Pending included) that hold pool
// objects, or nil.
func (p *Process) poolHolders() map[uint64]bool {
	if p.PoolObjects() == 0 {
		return nil
	}
	var bs []SpanBlock
	p.eachLive(func(key uint64, b Block) { bs = append(bs, SpanBlock{key, b.Size}) })
	holders, _ := PoolLayout(bs)
	return holders
}
