package main

import (
	"flag"
	"time"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/session"
)

// addStaleFlags adds the flags of the stale watch (--stale): all of them
// to run, the thresholds alone to report.
func addStaleFlags(fs *flag.FlagSet, o *session.StaleOptions, run bool) {
	if run {
		fs.BoolVar(&o.On, "stale", false, "watch a sample of small blocks for accesses and report those still live but untouched for --stale-t2 epochs (stale: a cache that only grows); each sampled block gets a page of its own")
		fs.DurationVar(&o.Epoch, "stale-epoch", time.Second, "with --stale, read which watched blocks were touched every `DURATION` (an epoch)")
		fs.IntVar(&o.Sample, "stale-sample", 16, "with --stale, watch a site's 1st small allocation, then every `K`th (the interval grows by K every 65,536 allocations of the site)")
		fs.IntVar(&o.Slots, "stale-slots", 1024, "with --stale, watch at most `N` blocks at once (a page each)")
	}
	fs.UintVar(&o.T1, "stale-t1", report.DefaultStaleT1, "with --stale, a watched block untouched for more than `N` epochs enters area B")
	fs.UintVar(&o.T2, "stale-t2", report.DefaultStaleT2, "with --stale, a block of area B untouched for `N` epochs or more is stale (more than --stale-t1)")
}
