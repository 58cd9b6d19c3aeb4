package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/leakpath/leakpath/internal/render/report"
)

// staleOptions are the flags of the stale watch (--stale).
type staleOptions struct {
	on            bool
	epoch         time.Duration
	t1, t2        uint
	sample, slots int
}

// addStaleFlags adds the stale flags: all of them to run, the thresholds
// alone to report.
func addStaleFlags(fs *flag.FlagSet, o *staleOptions, run bool) {
	if run {
		fs.BoolVar(&o.on, "stale", false, "watch a sample of small blocks for accesses and report those still live but untouched for --stale-t2 epochs (stale: a cache that only grows); each sampled block gets a page of its own")
		fs.DurationVar(&o.epoch, "stale-epoch", time.Second, "with --stale, read which watched blocks were touched every `DURATION` (an epoch)")
		fs.IntVar(&o.sample, "stale-sample", 16, "with --stale, watch a site's 1st small allocation, then every `K`th (the interval grows by K every 65,536 allocations of the site)")
		fs.IntVar(&o.slots, "stale-slots", 1024, "with --stale, watch at most `N` blocks at once (a page each)")
	}
	fs.UintVar(&o.t1, "stale-t1", report.DefaultStaleT1, "with --stale, a watched block untouched for more than `N` epochs enters area B")
	fs.UintVar(&o.t2, "stale-t2", report.DefaultStaleT2, "with --stale, a block of area B untouched for `N` epochs or more is stale (more than --stale-t1)")
}

// check validates the flags.
func (o *staleOptions) check() error {
	switch {
	case o.t2 <= o.t1:
		return fmt.Errorf("--stale-t2 %d: want more than --stale-t1 (%d)", o.t2, o.t1)
	case o.t2 > 1<<30:
		return fmt.Errorf("--stale-t2 %d: too large", o.t2)
	case !o.on:
		return nil
	case o.epoch < 10*time.Millisecond:
		return fmt.Errorf("--stale-epoch %v: want at least 10ms", o.epoch)
	case o.sample < 1:
		return fmt.Errorf("--stale-sample %d: want at least 1", o.sample)
	case o.slots < 1 || o.slots > 1<<20:
		return fmt.Errorf("--stale-slots %d: want 1 to %d", o.slots, 1<<20)
	}
	return nil
}

// staleEpoch is the collector's epoch: 0 without --stale.
func staleEpoch(o *staleOptions) time.Duration {
	if !o.on {
		return 0
	}
	return o.epoch
}
