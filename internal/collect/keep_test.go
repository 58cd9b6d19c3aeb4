package collect

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestKeepLeavesAProcessor: however many pipelines sleep at once, at
// most all processors but one are kept, and a wake gives the keep back.
func TestKeepLeavesAProcessor(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		c := &collector{}
		var held, most atomic.Int32
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 2000; i++ {
					if !c.takeKeep(procs) {
						continue
					}
					n := held.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					held.Add(-1)
					c.keepers.Add(-1)
				}
			}()
		}
		wg.Wait()
		if m := most.Load(); m > int32(procs-1) {
			t.Errorf("%d processors: %d pipelines kept theirs at once", procs, m)
		}
		if k := c.keepers.Load(); k != 0 {
			t.Errorf("%d processors: %d keeps counted after every pipeline woke", procs, k)
		}
		// One alone keeps its processor when there is another.
		if got := c.takeKeep(procs); got != (procs > 1) {
			t.Errorf("%d processors: a lone pipeline keeps its own: %v", procs, got)
		}
	}
}
