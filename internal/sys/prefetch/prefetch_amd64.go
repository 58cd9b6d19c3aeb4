package prefetch

import "unsafe"

// Line starts loading the cache line that holds p into all cache levels
// (PREFETCHT0). It never faults: p may be any address.
//
//go:noescape
func Line(p unsafe.Pointer)
