package rootcause

import (
	"testing"

	"github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/model/event"
)

// TestHandlerClaimsDataOnly: on the freeing thread's paths, a branch that
// separates leaked from freed blocks is claimed when its flags came from
// the block's data (complete() testing e->timed_out), and not when they
// came from elsewhere (a random drop), however well it predicts.
func TestHandlerClaimsDataOnly(t *testing.T) {
	for _, c := range []struct {
		name string
		data uint8 // Event.Data of the separating branch
		want event.RootCauseStatus
	}{
		{"on the block's data", 1 << 2, event.RootCauseFound},
		{"on another argument's data", 1 << 0, event.RootCauseInconclusive},
		{"on no block's data", 0, event.RootCauseInconclusive},
	} {
		ps := NewPaths()
		for i := 0; i < 48; i++ {
			leak := i%6 == 2
			w := hwindow{events: []steptrace.Event{
				{Kind: steptrace.Branch, Addr: 0x1325, Taken: !leak, To: 0x1330, Data: c.data},
				{Kind: steptrace.Branch, Addr: 0x1400, Taken: true, To: 0x1410, Data: 1 << 2},
			}}
			out := steptrace.Freed
			if leak {
				out = steptrace.EndReached
				w.events[0].To = 0x1327
			}
			ps.Add(w.decisions(2), out)
		}
		alloc := &event.RootCauseInfo{Status: event.RootCauseInconclusive, Note: "every path the same"}
		got := withHandler(alloc, &SiteTrace{Paths: NewPaths(), Handler: ps})
		if got.Status != c.want {
			t.Errorf("%s: status %v (%s), want %v", c.name, got.Status, got.Note, c.want)
			continue
		}
		if c.want == event.RootCauseFound && (len(got.Branches) == 0 || got.Branches[0].Addr != 0x1325) {
			t.Errorf("%s: branches %+v, want 0x1325 first", c.name, got.Branches)
		}
	}
}
