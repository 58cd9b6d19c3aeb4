package region

import "github.com/leakpath/leakpath/internal/wire"

// StalePool is the agent's slot pool (Options.StaleSlots): Count pages of
// Page bytes from Base, one block at most at the start of each.
type StalePool struct {
	Base        uint64
	Count, Page uint32
}

// StalePool returns the pool once the agent has mapped it; ok false: not
// (yet, or the agent could not).
func (r *Region) StalePool() (p StalePool, ok bool) {
	p.Base = r.u64(wire.OffStaleBase).Load()
	if p.Base == 0 {
		return p, false
	}
	p.Count, p.Page = r.u32(wire.OffStaleCount).Load(), r.u32(wire.OffStalePage).Load()
	return p, p.Count > 0 && p.Page > 0
}
