package heap

import (
	"math"

	"github.com/leakpath/leakpath/internal/model/event"
)

// The fast path: a run of allocations and frees of one image applied in
// one loop, with what they touch held in locals, while nothing rare is
// under way that the general path (Process.apply) weighs at every event.
// A program whose blocks outlive the agent's fold window sends millions
// of these a second; the general path spent as much on its five calls
// an event (Go keeps no register across a call) and on reloading the
// image's fields as on the block table.
//
// It leaves the model exactly as Process.apply would (TestFastPathSame,
// FuzzFastPathSame): it takes only events that apply would handle
// with none of its rare branches, and leaves the first other one, and all
// after it, to apply. What makes a branch rare is looked up per event, as
// apply does: one double free parks a free until the end, and must not
// send every event after it the slow way.

// fastReady reports whether p's allocations and frees may go by the fast
// path: no observer and no scope, which see every event.
func (p *Process) fastReady() bool { return p.obs == nil && p.scopes == nil }

// applyFast applies the allocations and frees of image proc at the start
// of evs and returns how many it applied. It stops before an event of
// another image or kind, a failed allocation, an allocation at an address
// a parked free or the last scan names, a free that finds no live block
// or frees one in limbo or marked ignored; and after an allocation at an
// address still live (whose free is on its way: the block goes to limbo).
func (p *Process) applyFast(evs []event.Event, proc uint32) int {
	t, tot, sites, stacks := p.blocks, &p.Totals, p.sites, p.agentStack
	first, last := p.FirstTime, p.LastTime
	i := 0
loop:
	for ; i < len(evs); i++ {
		ev := &evs[i]
		if ev.Proc != proc {
			break
		}
		switch ev.Kind {
		case event.Alloc:
			var site StackID
			if ev.Stack < uint32(len(stacks)) {
				site = stacks[ev.Stack]
			}
			if ev.Addr == 0 || int(site) >= len(sites) {
				break loop // a failed allocation, or the first of its site
			}
			if len(p.parked) > 0 {
				if _, ok := p.parked[ev.Addr]; ok {
					break loop
				}
			}
			if len(p.lateKinds) > 0 {
				if _, ok := p.lateKinds[ev.Addr]; ok {
					break loop
				}
			}
			times(ev.Time, &first, &last)
			tot.Calls[ev.Fn]++
			e, reused := t.insert(ev.Addr)
			if reused {
				old := e.Block
				p.released(old)
				p.limbo[ev.Addr] = old
			}
			at, late := ev.Time, uint32(0)
			if a, ok := ev.AllocTime(); ok { // kept pending by the agent: it happened earlier
				at = a
				if ev.Time > a {
					late = uint32(min(ev.Time-a, math.MaxUint32))
				}
			}
			e.Size = ev.Size
			e.Time = at
			e.Site = site
			e.Thread = ev.Thread
			e.Fn = ev.Fn
			e.Kind = event.Unclassified
			e.Late = late
			s := &sites[site]
			s.allocated(&e.Block)
			tot.allocated(ev.Size)
			s.addLive(ev.Size)
			tot.addLive(ev.Size, at)
			if reused {
				i++
				break loop
			}
		case event.Free:
			if len(p.limbo) > 0 {
				if _, ok := p.limbo[ev.Addr]; ok {
					break loop
				}
			}
			if len(p.lsan.ignored) > 0 {
				if _, ok := p.lsan.ignored[ev.Addr]; ok {
					break loop
				}
			}
			// The freed entry is read in place: nothing below inserts.
			e := t.remove(ev.Addr)
			if e == nil {
				break loop // parked, or an error: the general path's
			}
			times(ev.Time, &first, &last)
			tot.Calls[ev.Fn]++
			var stack StackID
			if ev.Stack < uint32(len(stacks)) {
				stack = stacks[ev.Stack]
			}
			if stack != 0 {
				p.FreeStacksSeen = true
			}
			site, size, afn := e.Site, e.Size, e.Fn
			s := &sites[site]
			s.dropLive(size)
			tot.dropLive(size)
			f, ffn := p.frees.next()
			f.addr = ev.Addr
			f.site = site
			f.stack = stack
			ffn.afn = afn
			ffn.site1 = false
			// s.freed, with addFreeStack's common case inline.
			s.Frees++
			s.FreeBytes += size
			if stack != 0 {
				if j := s.freeStackSlot(stack); s.freeStacks[j].stack == stack {
					s.freeStacks[j].n++
				} else {
					s.addNewFreeStack(stack)
				}
			}
			tot.Frees++
			if ev.Temporary() {
				tot.Temporary++
				s.Temporary++
			}
			if allocFamily[afn] != freeFamily[ev.Fn] {
				p.mismatchedFree(ev.Addr, e.Block, ev, stack)
			}
		default:
			break loop
		}
	}
	if i > 0 {
		p.FirstTime, p.LastTime, p.now = first, last, evs[i-1].Time
	}
	return i
}

// times takes in the time of an event: the image's first and last.
func times(t uint64, first, last *uint64) {
	if t != 0 {
		if *first == 0 || t < *first {
			*first = t
		}
		if t > *last {
			*last = t
		}
	}
}

// allocated counts an allocation of b at the site.
func (s *Site) allocated(b *Block) {
	s.Allocs++
	s.AllocBytes += b.Size
	if s.First == 0 || b.Time < s.First {
		s.First = b.Time
		s.Fn = b.Fn
	}
	if b.Time > s.Last {
		s.Last = b.Time
	}
}

// freed counts a free of a block of size bytes at the site, by stack
// (0: unknown).
func (s *Site) freed(size uint64, stack StackID) {
	s.Frees++
	s.FreeBytes += size
	if stack != 0 {
		s.addFreeStack(stack)
	}
}

func (s *Site) addLive(size uint64)  { s.LiveBlocks++; s.LiveBytes += size }
func (s *Site) dropLive(size uint64) { s.LiveBlocks--; s.LiveBytes -= size }

// allocated counts an allocation of size bytes.
func (t *Totals) allocated(size uint64) {
	t.Allocations++
	t.AllocatedBytes += size
}

// addLive counts a block of size bytes live from time at, which may be
// the peak.
func (t *Totals) addLive(size, at uint64) {
	t.LiveBlocks++
	t.LiveBytes += size
	if t.LiveBytes > t.PeakBytes {
		t.PeakBytes, t.PeakTime = t.LiveBytes, at
	}
}

func (t *Totals) dropLive(size uint64) { t.LiveBlocks--; t.LiveBytes -= size }
