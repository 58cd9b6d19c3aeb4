package collect

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The collector's memory has a last-resort bound (docs/security.md, "The
// shared region"): every value read from a region is checked, but records
// that are well formed can still describe more than the program holds (a
// program that writes them into its own ring). When the collector's live
// heap passes the limit, it stops recording every image, with a warning,
// and records no new one; the program runs on.

// budget is the collector's memory limit and its meter.
type budget struct {
	limit  uint64 // bytes of live heap
	once   sync.Once
	sample []metrics.Sample
}

func newBudget(limit uint64) *budget {
	if limit == 0 {
		limit = DefaultMemoryLimit()
	}
	return &budget{limit: limit, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
}

// live returns the collector's live heap as of its last collection.
func (b *budget) live() uint64 {
	metrics.Read(b.sample)
	if b.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return b.sample[0].Value.Uint64()
}

// DefaultMemoryLimit is half the memory the collector may use: the
// machine's, or its control group's when that is smaller.
func DefaultMemoryLimit() uint64 {
	var total uint64
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		total = uint64(si.Totalram) * uint64(si.Unit)
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			total = n
		}
	}
	if total == 0 {
		return 4 << 30
	}
	return total / 2
}

// checkBudget stops recording when the collector's live heap passed its
// limit (once).
func (c *collector) checkBudget() {
	b := c.budget
	live := b.live()
	if live <= b.limit {
		return
	}
	b.once.Do(func() {
		c.warn("the collector's memory (%d MiB of live heap) passed its limit of %d MiB (--max-memory): recording stopped at %.3f s; the program ran on",
			live>>20, b.limit>>20, time.Since(c.started).Seconds())
		// Said at once too: the program may run long after this.
		c.logf("stopping the recording: the collector's memory passed its limit of %d MiB (--max-memory); the program runs on", b.limit>>20)
		c.mu.Lock()
		c.overBudget = true
		c.mu.Unlock()
		// Not on the sink's goroutine: the pipelines it stops may wait
		// for it.
		go c.detachAll()
	})
}
