// Package prefetch asks the processor to bring a cache line in without
// waiting for it: a plain load that misses holds up every later
// instruction once it reaches the head of the reorder buffer, so a read
// ahead done by loading only overlaps the few misses that fit there.
package prefetch
