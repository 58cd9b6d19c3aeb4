package heap

import (
	"maps"
	"slices"
)

// maxRootRegions bounds the root regions a process may have registered
// at once: each one is read at the exit scan.
const maxRootRegions = 1 << 16

// lsanState is what the program told the model through LeakSanitizer's
// interface (agent/lsan.c): the blocks that are no leaks, and the root
// regions.
type lsanState struct {
	ignored map[uint64]struct{} // live blocks, by address
	regions map[[2]uint64]int   // {addr, size}: times registered
}

func (s lsanState) clone() lsanState {
	return lsanState{ignored: maps.Clone(s.ignored), regions: maps.Clone(s.regions)}
}

// ignore marks the live block addr points into (its start, or inside it,
// as __lsan_ignore_object allows) as no leak. An address in no live block
// is an anomaly (LeakSanitizer only warns of it too).
func (p *Process) ignore(addr uint64) {
	start, found := addr, false
	if _, ok := p.blocks.get(addr); ok {
		found = true
	} else {
		// Inside a block: rare (the program's pointer is not the start).
		p.blocks.each(func(a uint64, b Block) {
			if !found && addr > a && addr-a < b.Size {
				start, found = a, true
			}
		})
	}
	if !found {
		p.Anomalies++
		return
	}
	if p.lsan.ignored == nil {
		p.lsan.ignored = map[uint64]struct{}{}
	}
	p.lsan.ignored[start] = struct{}{}
}

// unignore forgets the mark of the block at addr, released, and says
// whether it had one.
func (p *Process) unignore(addr uint64) bool {
	if len(p.lsan.ignored) == 0 {
		return false
	}
	_, had := p.lsan.ignored[addr]
	delete(p.lsan.ignored, addr)
	return had
}

// rootRegion registers (or unregisters) [addr, addr+size) as a root
// region. Registrations of the same region count; unregistering one never
// registered is an anomaly (LeakSanitizer would abort the program).
func (p *Process) rootRegion(addr, size uint64, register bool) {
	k := [2]uint64{addr, size}
	if register {
		if p.lsan.regions == nil {
			p.lsan.regions = map[[2]uint64]int{}
		}
		if len(p.lsan.regions) >= maxRootRegions && p.lsan.regions[k] == 0 {
			p.Anomalies++
			return
		}
		p.lsan.regions[k]++
		return
	}
	switch n := p.lsan.regions[k]; {
	case n == 0:
		p.Anomalies++
	case n == 1:
		delete(p.lsan.regions, k)
	default:
		p.lsan.regions[k] = n - 1
	}
}

// IgnoredBlocks returns the addresses of the live blocks the program said
// are no leaks (__lsan_ignore_object, __lsan_disable), sorted.
func (p *Process) IgnoredBlocks() []uint64 {
	return slices.Sorted(maps.Keys(p.lsan.ignored))
}

// RootRegions returns the root regions the program registered
// (__lsan_register_root_region), each {addr, size}, sorted.
func (p *Process) RootRegions() [][2]uint64 {
	out := slices.Collect(maps.Keys(p.lsan.regions))
	slices.SortFunc(out, func(a, b [2]uint64) int {
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		if a[1] < b[1] {
			return -1
		}
		if a[1] > b[1] {
			return 1
		}
		return 0
	})
	return out
}
