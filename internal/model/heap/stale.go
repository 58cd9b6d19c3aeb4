package heap

import (
	"cmp"
	"slices"

	"github.com/leakpath/leakpath/internal/model/event"
)

// StaleState is what the stale epochs (event.StaleEpoch) taught of the
// blocks in the agent's slot pool: by address, each watched block's age.
type StaleState struct {
	Epochs    uint32 // epochs read
	LastEpoch uint64 // ticks of the latest
	Pool      event.StaleInfo
	// Slots holds the age of each live block in the pool, by address.
	Slots map[uint64]*SlotAge
}

// SlotAge is the watch of one block in the slot pool.
type SlotAge struct {
	Block uint64 // the block's allocation time: a new block in the slot starts over
	// Age counts the epochs since the block was last touched (or
	// allocated); an access resets it to 0.
	Age uint32
	// Watched counts the epochs that read the block.
	Watched uint32
	// LastAccess is the ticks of the epoch that last saw it touched, or
	// its allocation time when none did.
	LastAccess uint64
	Accesses   uint32 // epochs that saw it touched
}

// staleEpoch ages the blocks of the slot pool by one epoch.
func (p *Process) staleEpoch(ev *event.Event) {
	in := ev.StaleInfo()
	if in == nil || in.Page == 0 {
		p.Anomalies++
		return
	}
	s := p.Stale
	if s == nil {
		s = &StaleState{Slots: map[uint64]*SlotAge{}}
		p.Stale = s
	}
	between := ev.BetweenEpochs() // accesses only: no epoch passed
	if !between {
		s.Epochs++
		s.LastEpoch = ev.Time
	}
	s.Pool = *in
	for i := uint32(0); i < in.Count; i++ {
		addr := in.Base + uint64(i)*uint64(in.Page)
		b, ok := p.blocks.get(addr)
		if !ok {
			delete(s.Slots, addr)
			continue
		}
		a := s.Slots[addr]
		if a == nil || a.Block != b.Time {
			a = &SlotAge{Block: b.Time, LastAccess: b.Time}
			s.Slots[addr] = a
		}
		switch {
		case in.Touched(i):
			a.Age, a.LastAccess = 0, ev.Time
			a.Accesses++
		case !between:
			a.Age++
		}
		if !between {
			a.Watched++
		}
	}
}

// StaleBlock is a watched block found stale.
type StaleBlock struct {
	Addr, Size uint64
	Age        uint32 // epochs since it was last touched (or allocated)
	LastAccess uint64 // ticks: the epoch that last saw it touched, or its allocation
	Accessed   bool   // some epoch saw it touched (else LastAccess is its allocation)
	Kind       event.LeakKind
}

// StaleGroup is the stale blocks of one allocation site. The pool holds a
// sample of the site's blocks: Watched of its live blocks are there, of
// which Blocks are stale; EstBlocks and EstBytes extrapolate the share to
// the site's live blocks (SiteLiveBlocks, SiteLiveBytes).
type StaleGroup struct {
	Site                          StackID
	Blocks                        []StaleBlock // oldest first
	Bytes                         uint64       // of Blocks
	Watched                       int
	SiteLiveBlocks, SiteLiveBytes uint64
	Share                         float64 // len(Blocks) / Watched
	EstBlocks, EstBytes           uint64
}

// StaleCounts are the figures of the watch over the whole image.
type StaleCounts struct {
	Epochs  uint32
	Watched int // live blocks in the pool
	AreaB   int // of those, untouched for more than t1 epochs
	Stale   int // of those, untouched for t2 epochs or more, and not leaked
}

// StaleGroups returns the sites with stale blocks, most extrapolated
// bytes first: blocks untouched for more than t1 epochs are in area B,
// and those of area B untouched for t2 epochs or more (t2 > t1) are
// stale, unless the last scan found them leaked (definite, indirect or
// possible: they are leaks, reported as such). nil without stale epochs.
func (p *Process) StaleGroups(t1, t2 uint32) ([]StaleGroup, StaleCounts) {
	s := p.Stale
	if s == nil {
		return nil, StaleCounts{}
	}
	c := StaleCounts{Epochs: s.Epochs}
	bySite := map[StackID]*StaleGroup{}
	var order []StackID
	for addr, a := range s.Slots {
		b, ok := p.blocks.get(addr)
		if !ok || b.Time != a.Block {
			continue // freed since the last epoch
		}
		c.Watched++
		g := bySite[b.Site]
		if g == nil {
			g = &StaleGroup{Site: b.Site}
			bySite[b.Site] = g
			order = append(order, b.Site)
		}
		g.Watched++
		if a.Age <= t1 {
			continue
		}
		c.AreaB++
		if a.Age < t2 {
			continue
		}
		switch b.Kind {
		case event.Definite, event.Indirect, event.Possible:
			continue
		}
		c.Stale++
		g.Blocks = append(g.Blocks, StaleBlock{Addr: addr, Size: b.Size, Age: a.Age, LastAccess: a.LastAccess,
			Accessed: a.Accesses > 0, Kind: b.Kind})
		g.Bytes += b.Size
	}
	// A snapshot's blocks still pending in the threads are live too.
	for _, b := range p.Pending {
		if g := bySite[b.Site]; g != nil {
			g.SiteLiveBlocks++
			g.SiteLiveBytes += b.Size
		}
	}
	var out []StaleGroup
	for _, id := range order {
		g := bySite[id]
		if len(g.Blocks) == 0 {
			continue
		}
		if site := p.Site(id); site != nil {
			g.SiteLiveBlocks += site.LiveBlocks
			g.SiteLiveBytes += site.LiveBytes
		}
		g.Share = float64(len(g.Blocks)) / float64(g.Watched)
		g.EstBlocks = uint64(g.Share*float64(g.SiteLiveBlocks) + 0.5)
		g.EstBytes = uint64(g.Share*float64(g.SiteLiveBytes) + 0.5)
		slices.SortFunc(g.Blocks, func(x, y StaleBlock) int {
			if c := cmp.Compare(y.Age, x.Age); c != 0 {
				return c
			}
			return cmp.Compare(x.Addr, y.Addr)
		})
		out = append(out, *g)
	}
	slices.SortFunc(out, func(x, y StaleGroup) int {
		if c := cmp.Compare(y.EstBytes, x.EstBytes); c != 0 {
			return c
		}
		return cmp.Compare(x.Site, y.Site)
	})
	return out, c
}
