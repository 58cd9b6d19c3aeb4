package session

import (
	"fmt"

	"github.com/leakpath/leakpath/internal/analysis/kinds"
	"github.com/leakpath/leakpath/internal/analysis/rootcause"
	"github.com/leakpath/leakpath/internal/analysis/stale"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
)

// The analyses a recording runs besides the recording itself: the scan
// that classifies the live blocks (at exit, or before an attach's
// detach), their types (--types), the stale watch (--stale) and the
// root-cause windows (--root-cause). They register with the collector's
// stopped-process hook (collect.Analysis) here and nowhere else.

// checkAnalyses checks that the analyses o asks for can run together.
func checkAnalyses(o *Options, attach bool) error {
	if o.Types && !o.Scan {
		if attach {
			return fmt.Errorf("--types needs the scan before the detach (--scan)")
		}
		return fmt.Errorf("--types needs the scan at exit (--scan)")
	}
	return nil
}

// wireAnalyses registers the analyses o asks for with the collector and
// sets the recording they need; with --types it makes sym read types too.
// They see a stopped process in this order: the stale reading first
// (before the scan touches the blocks), then the scan (kinds, and types
// with --types), then the root causes (a snapshot shows them if the scan
// succeeded).
func wireAnalyses(copts *collect.Options, o *Options, sym *Symbolizer) {
	// The scan holds the program at its exit.
	copts.Region.HoldExit = o.Scan
	// Root causes need the stacks of every free, and compare pending
	// allocations' times with their windows.
	copts.Region.FoldFreeStacks = o.RootCause.Enabled
	copts.Region.ExactTimes = copts.Region.ExactTimes || o.RootCause.Enabled
	if o.Stale.On {
		copts.Region.StaleSlots, copts.Region.StaleSample = o.Stale.Slots, o.Stale.Sample
		copts.Analyses = append(copts.Analyses, stale.NewWatch(o.Stale.Epoch))
	}
	ko := kinds.Options{}
	if o.Types {
		sym.types = dwarftypes.NewReader(sym.s) // before the warm-up reads it
		ko.Types, ko.DWARF = sym.s, sym.types
	}
	copts.Analyses = append(copts.Analyses, kinds.New(ko))
	if o.RootCause.Enabled {
		copts.Analyses = append(copts.Analyses, rootcause.NewRecorder(o.RootCause))
	}
}
