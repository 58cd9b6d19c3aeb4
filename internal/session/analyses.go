package session

import (
	"fmt"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
)

// The analyses a recording runs besides the recording itself: the scan
// that classifies the live blocks (at exit, or before an attach's
// detach), their types (--types), the stale watch (--stale) and the
// root-cause windows (--root-cause). They are wired to the collector here
// and nowhere else, so that how they register with it can change in one
// place.

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

// wireAnalyses sets the collector's options for the analyses o asks for;
// with --types it makes sym read types too.
func wireAnalyses(copts *collect.Options, o *Options, sym *Symbolizer) {
	if o.Types {
		sym.types = dwarftypes.NewReader(sym.s) // before the warm-up reads it
	}
	// The scan holds the program at its exit.
	copts.Region.HoldExit = o.Scan
	// Root causes need the stacks of every free, and compare pending
	// allocations' times with their windows.
	copts.Region.FoldFreeStacks = o.RootCause.Enabled
	copts.Region.ExactTimes = copts.Region.ExactTimes || o.RootCause.Enabled
	copts.RootCause = o.RootCause
	if o.Stale.On {
		copts.StaleEpoch = o.Stale.Epoch
		copts.Region.StaleSlots, copts.Region.StaleSample = o.Stale.Slots, o.Stale.Sample
	}
	if o.Types {
		copts.Types = &collect.TypeOptions{Symbols: sym.s, DWARF: sym.types}
	}
}

// analysisEvents are what the analyses found that the collector did not
// apply to the model itself (the root causes), as events for the model
// and the trace.
func analysisEvents(res *collect.Result) []event.Event {
	if len(res.RootCause) == 0 {
		return nil
	}
	return collect.RootCauseEvents(res)
}
