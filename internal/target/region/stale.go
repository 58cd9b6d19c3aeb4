package region

import "github.com/leakpath/leakpath/internal/target/wire"

// StalePool is the agent's slot pool (Options.StaleSlots): Count pages of
// Page bytes from Base, one block at most at the start of each.
type StalePool struct {
	Base        uint64
	Count, Page uint32
}

// StalePool returns the pool once the agent has mapped it; ok false: not
// (yet, or the agent could not). A pool of more pages than the agent
// ever maps (1<<20: a pool from an earlier attach may be larger than this
// one asked), or of pages not a power of two from 4 KiB to 1 MiB, makes
// the region corrupt.
func (r *Region) StalePool() (p StalePool, ok bool) {
	if r.Corrupt() != nil {
		return p, false
	}
	p.Base = r.u64(wire.OffStaleBase).Load()
	if p.Base == 0 {
		return p, false
	}
	p.Count, p.Page = r.u32(wire.OffStaleCount).Load(), r.u32(wire.OffStalePage).Load()
	switch {
	case p.Count == 0 && p.Page == 0:
		return p, false // not written yet
	case p.Count == 0 || p.Count > maxStaleSlots:
		r.fail("a slot pool of %d pages", p.Count)
		return p, false
	case p.Page < 4096 || p.Page > 1<<20 || p.Page&(p.Page-1) != 0:
		r.fail("slot pool pages of %d bytes", p.Page)
		return p, false
	case p.Base+uint64(p.Count)*uint64(p.Page) < p.Base:
		r.fail("a slot pool at %#x past the end of the address space", p.Base)
		return p, false
	}
	return p, true
}

// maxStaleSlots is the most pages of a slot pool (the agent's bound, and
// Options.StaleSlots').
const maxStaleSlots = 1 << 20

// EndStaleEpoch counts an epoch ended in the region, for the program
// (leakpath_stale_epoch): called after the epoch's clear of the accessed
// bits, so that what the program touches once it reads the new count
// counts in the next epoch.
func (r *Region) EndStaleEpoch() { r.u64(wire.OffStaleEpochs).Add(1) }
