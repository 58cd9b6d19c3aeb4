package main

import (
	"testing"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/event"
	st "github.com/leakpath/leakpath/internal/steptrace"
)

// TestAnalyzePaths: the seed's shape on synthetic paths. funcA (0xa00)
// allocates and returns into funcB (frames: 0xb10 in funcB, 0x110 in
// main); F paths go on to free, E paths leave funcB at the branch 0xb20
// (taken) or, in another E path, at 0xb40 (not taken); the exit out of
// the end point, last event of an ended path, is not compared.
func TestAnalyzePaths(t *testing.T) {
	exitA := st.Event{Kind: st.Exit, Addr: 0xa50}
	b1f := st.Event{Kind: st.Branch, Addr: 0xb20, Taken: false, To: 0xb22}
	b1e := st.Event{Kind: st.Branch, Addr: 0xb20, Taken: true, To: 0xb80}
	b2f := st.Event{Kind: st.Branch, Addr: 0xb40, Taken: true, To: 0xb60}
	b2e := st.Event{Kind: st.Branch, Addr: 0xb40, Taken: false, To: 0xb42}
	free := st.Event{Kind: st.Enter, Addr: 0xf00}
	exitB := st.Event{Kind: st.Exit, Addr: 0xbff}
	paths := []*st.Path{
		{Outcome: st.Freed, Events: []st.Event{exitA, b1f, b2f, free}},
		{Outcome: st.Freed, Events: []st.Event{exitA, b1f, b2f, free}},
		{Outcome: st.EndReached, Ended: true, Events: []st.Event{exitA, b1e, exitB}},
		{Outcome: st.EndReached, Ended: true, Events: []st.Event{exitA, b1e, exitB}},
		{Outcome: st.EndReached, Ended: true, Events: []st.Event{exitA, b1f, b2e, exitB}},
		{Outcome: st.Budget, Events: []st.Event{exitA}},
	}
	rc := analyze(&collect.SiteTrace{Frames: []uint64{0xa10, 0xb10, 0x110}, Paths: paths})
	if rc.Status != event.RootCauseFound || rc.Traced != 5 || rc.Freed != 2 || rc.Leaked != 3 {
		t.Fatalf("status %s, traced %d (%d F, %d E); want found, 5 (2 F, 3 E)", rc.Status, rc.Traced, rc.Freed, rc.Leaked)
	}
	want := []event.RootBranch{{Addr: 0xb20, LeaksWhenTaken: true, To: 0xb80}, {Addr: 0xb40, LeaksWhenTaken: false, To: 0xb42}}
	if len(rc.Branches) != 2 || rc.Branches[0] != want[0] || rc.Branches[1] != want[1] {
		t.Errorf("branches %+v, want %+v", rc.Branches, want)
	}
	if len(rc.Functions) == 0 || rc.Functions[0] != 0xb20 {
		t.Errorf("functions %#x, want funcB, at 0xb20 first", rc.Functions)
	}
	// Only one outcome: no claim.
	for _, ps := range [][]*st.Path{paths[:2], paths[2:5], nil} {
		rc := analyze(&collect.SiteTrace{Frames: []uint64{0xa10}, Paths: ps})
		if rc.Status == event.RootCauseFound {
			t.Errorf("%d paths of one outcome: a claim %+v", len(ps), rc)
		}
	}
}
