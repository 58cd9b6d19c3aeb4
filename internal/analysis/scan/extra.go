package scan

import "github.com/leakpath/leakpath/internal/analysis/leak"

// extraRoots cuts roots the program named (Target.Extra) to the readable
// mappings, as LeakSanitizer scans a root region: a range the program
// unmapped, or made unreadable, is read where it still can be. They are
// read whole, the blocks in them too (leak.Root.Heap).
func extraRoots(extra []leak.Root, maps []mapping) []leak.Root {
	var out []leak.Root
	for _, r := range extra {
		lo, hi := r.Addr, r.Addr+r.Len
		if hi < lo { // wraps: to the end of the address space
			hi = ^uint64(0)
		}
		for _, m := range maps {
			if len(m.perms) == 0 || m.perms[0] != 'r' {
				continue
			}
			a, b := max(lo, m.lo), min(hi, m.hi)
			if a < b {
				out = append(out, leak.Root{Addr: a, Len: b - a, What: r.What, Heap: true})
			}
		}
	}
	return out
}
