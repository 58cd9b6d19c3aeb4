package rootcause

import (
	"slices"
	"testing"

	st "github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/model/event"
)

// TestPartSeed: the walk of JP2009-217617's fig. 11 on the paths of its
// fig. 10(c) (the
// function trace: S3 leaks, S1 and S2 free; see sequitur's
// TestSeedFunctionPaths) stops at sub2-E, and on the branch traces of
// fig. 15 (location symbols, as the publication has them) at location2.
func TestPartSeed(t *testing.T) {
	s1 := []string{"funcA-E", "parse-S", "parse-E", "sub2-S", "sub2-E"}
	s2 := []string{"funcA-E", "parse-S", "parse-E", "sub1-S"}
	s3 := []string{"funcA-E", "parse-S", "parse-E", "sub2-S", "sub2-E"}
	if at := Part(s3, occurring([][]string{s1, s2})); at != 4 || s3[at] != "sub2-E" {
		t.Errorf("fig. 11: parted at %d, want 4 (sub2-E)", at)
	}
	e := []string{"location1", "location2"}
	if at := Part(e, occurring([][]string{{"location1"}, {"location1", "location2"}})); at != 1 {
		t.Errorf("fig. 15: parted at %d, want 1 (location2)", at)
	}
	if at := Part([]string{"x", "y"}, occurring([][]string{{"a"}})); at != -1 {
		t.Errorf("nothing shared: parted at %d, want -1", at)
	}
}

// JP2009-217617's worked example as steptrace would record it in seed.c: funcA
// (0xa00) returns into funcB (frames: 0xa10 in funcA, 0xb10 in funcB,
// 0x110 in main); funcB calls parse (0xc00), takes the branch at 0xb20
// (location1, error condition 2) to sub1 (0xd00), which frees, or calls
// sub2 (0xe00), then takes the branch at 0xb40 (location2, error
// condition 1) to return, leaking, or calls free (0xf00).
var (
	frames = []uint64{0xa10, 0xb10, 0x110}
	exitA  = st.Event{Kind: st.Exit, Addr: 0xa50}
	parse  = []st.Event{{Kind: st.Enter, Addr: 0xc00}, {Kind: st.Branch, Addr: 0xc08, To: 0xc0a}, {Kind: st.Exit, Addr: 0xc20}}
	sub2   = []st.Event{{Kind: st.Enter, Addr: 0xe00}, {Kind: st.Exit, Addr: 0xe20}}
	l1     = st.Event{Kind: st.Branch, Addr: 0xb20, To: 0xb22}
	l1t    = st.Event{Kind: st.Branch, Addr: 0xb20, Taken: true, To: 0xb70}
	l2     = st.Event{Kind: st.Branch, Addr: 0xb40, To: 0xb42}
	l2t    = st.Event{Kind: st.Branch, Addr: 0xb40, Taken: true, To: 0xb90}
	free   = st.Event{Kind: st.Enter, Addr: 0xf00}
	sub1   = st.Event{Kind: st.Enter, Addr: 0xd00}
)

func join(parts ...any) []st.Event {
	var out []st.Event
	for _, p := range parts {
		switch p := p.(type) {
		case st.Event:
			out = append(out, p)
		case []st.Event:
			out = append(out, p...)
		}
	}
	return out
}

// TestAnalyzeSeed: the answers of JP2009-217617's figs. 11 and 15 from
// recorded paths:
// funcB, and the branch at location2 taken.
func TestAnalyzeSeed(t *testing.T) {
	ps := NewPaths()
	normal := join(exitA, parse, l1, sub2, l2, free)
	err2 := join(exitA, parse, l1t, sub1, free)
	err1 := join(exitA, parse, l1, sub2, l2t)
	for range 10 {
		ps.Add(normal, st.Freed)
		ps.Add(err2, st.Freed)
		ps.Add(err1, st.EndReached)
	}
	if ps.Len() != 3 || ps.Added() != 30 {
		t.Fatalf("%d distinct paths of %d, want 3 of 30", ps.Len(), ps.Added())
	}
	symbols := 0
	for i, want := range [][]st.Event{normal, err2, err1} {
		if evs, _, n := ps.Path(i); !slices.Equal(evs, want) || n != 10 {
			t.Errorf("path %d: %v ×%d, want %v ×10", i, evs, n, want)
		}
		symbols += len(want) + 1
	}
	// What the paths share is stored once.
	if ps.Size() >= symbols {
		t.Errorf("the grammar stores %d symbols for paths of %d:\n%s", ps.Size(), symbols, ps)
	}
	rc := Analyze(ps, frames)
	if rc.Status != event.RootCauseFound || rc.Traced != 30 || rc.Freed != 20 || rc.Leaked != 10 {
		t.Fatalf("status %s, traced %d (%d F, %d E); want found, 30 (20 F, 10 E)", rc.Status, rc.Traced, rc.Freed, rc.Leaked)
	}
	want := event.RootBranch{Addr: 0xb40, To: 0xb90, LeaksWhenTaken: true}
	if len(rc.Branches) != 1 || rc.Branches[0] != want {
		t.Errorf("branches %+v, want %+v", rc.Branches, want)
	}
	if len(rc.Functions) != 1 || rc.Functions[0] != 0xb40 {
		t.Errorf("functions %#x, want funcB at its branch 0xb40", rc.Functions)
	}
	// Without branch events nothing is claimed: not the function where
	// the walk back stops.
	calls := NewPaths()
	for range 10 {
		calls.Add(callsOf(normal), st.Freed)
		calls.Add(callsOf(err2), st.Freed)
		calls.Add(callsOf(err1), st.EndReached)
	}
	if rc := Analyze(calls, frames); rc.Status != event.RootCauseInconclusive || len(rc.Functions) != 0 || len(rc.Branches) != 0 {
		t.Errorf("calls only: %s, functions %#x, branches %+v; want inconclusive", rc.Status, rc.Functions, rc.Branches)
	}
}

// TestAnalyzeNested: a leak decided in a callee (check, 0x900, called
// twice by funcB; the second call frees or keeps the block): the culprit
// is the entered function, though its first return is on both paths, and
// its branch is found in its own invocations, not in parse's branches.
func TestAnalyzeNested(t *testing.T) {
	enter := st.Event{Kind: st.Enter, Addr: 0x900}
	exit := st.Event{Kind: st.Exit, Addr: 0x950}
	keep := st.Event{Kind: st.Branch, Addr: 0x920, To: 0x922}
	drop := st.Event{Kind: st.Branch, Addr: 0x920, Taken: true, To: 0x940}
	loop := st.Event{Kind: st.Branch, Addr: 0x910, Taken: true, To: 0x905}
	ps := NewPaths()
	for range 10 {
		ps.Add(join(exitA, enter, loop, loop, keep, parse, exit, enter, loop, keep, free), st.Freed)
		ps.Add(join(exitA, enter, loop, keep, parse, exit, enter, loop, loop, drop, exit), st.EndReached)
	}
	rc := Analyze(ps, frames)
	want := event.RootBranch{Addr: 0x920, To: 0x940, LeaksWhenTaken: true}
	if rc.Status != event.RootCauseFound || len(rc.Branches) != 1 || rc.Branches[0] != want {
		t.Errorf("status %s, branches %+v; want found, %+v", rc.Status, rc.Branches, want)
	}
}

// TestAnalyzeTwoBranches: one site leaking on two branches of funcB, one
// taken (two paths), one not taken (one path); a path out of budget is
// left out.
func TestAnalyzeTwoBranches(t *testing.T) {
	b1f := st.Event{Kind: st.Branch, Addr: 0xb20, To: 0xb22}
	b1e := st.Event{Kind: st.Branch, Addr: 0xb20, Taken: true, To: 0xb80}
	b2f := st.Event{Kind: st.Branch, Addr: 0xb40, Taken: true, To: 0xb60}
	b2e := st.Event{Kind: st.Branch, Addr: 0xb40, To: 0xb42}
	ps := NewPaths()
	for range 10 {
		ps.Add(join(exitA, b1f, b2f, free), st.Freed)
		ps.Add(join(exitA, b1f, b2f, free), st.Freed)
		ps.Add(join(exitA, b1e), st.EndReached)
		ps.Add(join(exitA, b1e), st.EndReached)
		ps.Add(join(exitA, b1f, b2e), st.EndReached)
		ps.Add(join(exitA), st.Budget)
	}
	rc := Analyze(ps, frames)
	if rc.Status != event.RootCauseFound || rc.Traced != 50 || rc.Freed != 20 || rc.Leaked != 30 {
		t.Fatalf("status %s, traced %d (%d F, %d E); want found, 50 (20 F, 30 E)", rc.Status, rc.Traced, rc.Freed, rc.Leaked)
	}
	want := []event.RootBranch{{Addr: 0xb20, LeaksWhenTaken: true, To: 0xb80}, {Addr: 0xb40, To: 0xb42}}
	if !slices.Equal(rc.Branches, want) {
		t.Errorf("branches %+v, want %+v", rc.Branches, want)
	}
	if !slices.Equal(rc.Functions, []uint64{0xb20}) {
		t.Errorf("functions %#x, want funcB, at 0xb20", rc.Functions)
	}
}

// TestAnalyzeOneOutcome: paths that all end one way make no claim.
func TestAnalyzeOneOutcome(t *testing.T) {
	for _, outcome := range []st.Outcome{st.Freed, st.EndReached} {
		ps := NewPaths()
		ps.Add(join(exitA, parse, l1, sub2, l2, free), outcome)
		ps.Add(join(exitA, parse, l1t, sub1), outcome)
		if rc := Analyze(ps, frames); rc.Status != event.RootCauseInconclusive || len(rc.Functions) != 0 {
			t.Errorf("all %s: %+v, want inconclusive", outcome, rc)
		}
	}
	if rc := Analyze(NewPaths(), frames); rc.Status != event.RootCauseNotTraced {
		t.Errorf("no paths: status %s, want not traced", rc.Status)
	}
	if i := NewPaths().Add([]st.Event{exitA}, st.Budget); i != -1 {
		t.Errorf("a path out of budget was added (%d)", i)
	}
}

// callsOf returns a path's calls and returns (the seed's function trace).
func callsOf(evs []st.Event) []st.Event {
	var out []st.Event
	for _, e := range evs {
		if e.Kind != st.Branch {
			out = append(out, e)
		}
	}
	return out
}

// TestAnalyzeParser: parse (0x500) allocates; its read error (0x510
// taken) frees, its bad header (0x520 taken) returns without freeing;
// the caller (main) frees only on success (0x610 not taken). The walk
// back stops at parse's exit, shared by every path, and would name the
// caller's test; the paths part at parse's bad-header branch.
func TestAnalyzeParser(t *testing.T) {
	readOK := st.Event{Kind: st.Branch, Addr: 0x510, To: 0x512}
	readErr := st.Event{Kind: st.Branch, Addr: 0x510, Taken: true, To: 0x580}
	hdrOK := st.Event{Kind: st.Branch, Addr: 0x520, To: 0x522}
	hdrBad := st.Event{Kind: st.Branch, Addr: 0x520, Taken: true, To: 0x590}
	exitParse := st.Event{Kind: st.Exit, Addr: 0x5a0}
	ok := st.Event{Kind: st.Branch, Addr: 0x610, To: 0x612}
	failed := st.Event{Kind: st.Branch, Addr: 0x610, Taken: true, To: 0x640}
	ps := NewPaths()
	for range 12 {
		ps.Add(join(readOK, hdrOK, exitParse, ok, free), st.Freed)
		ps.Add(join(readErr, free, exitParse, failed), st.Freed)
		ps.Add(join(readOK, hdrBad, exitParse, failed), st.EndReached)
	}
	rc, cands := AnalyzeCandidates(ps)
	want := event.RootBranch{Addr: 0x520, To: 0x590, LeaksWhenTaken: true}
	if rc.Status != event.RootCauseFound || len(rc.Branches) == 0 || rc.Branches[0] != want {
		t.Fatalf("status %s, branches %+v (%v); want found, %+v first", rc.Status, rc.Branches, cands, want)
	}
	for _, b := range rc.Branches {
		if b.Addr == 0x610 {
			t.Errorf("the caller's test was reported: %+v", rc.Branches)
		}
	}
}

// TestAnalyzeNoPredicate: when leaked and freed executions take the same
// paths (another thread decides, at random), nothing is claimed.
func TestAnalyzeNoPredicate(t *testing.T) {
	a := st.Event{Kind: st.Branch, Addr: 0x710, To: 0x712}
	b := st.Event{Kind: st.Branch, Addr: 0x720, Taken: true, To: 0x760}
	bn := st.Event{Kind: st.Branch, Addr: 0x720, To: 0x722}
	ps := NewPaths()
	for i := range 80 {
		// The same mix of paths on both sides.
		p := join(exitA, a, b)
		if i%4 == 0 {
			p = join(exitA, a, bn)
		}
		outcome := st.Freed
		if i%8 < 2 {
			outcome = st.EndReached
		}
		ps.Add(p, outcome)
	}
	if rc, cands := AnalyzeCandidates(ps); rc.Status != event.RootCauseInconclusive || len(rc.Functions) != 0 {
		t.Errorf("%s %+v (%v), want inconclusive and no function", rc.Status, rc, cands)
	}
}

// TestAnalyzeFewLeaked: a branch only two leaked executions took is no
// evidence, however many freed ones did not take it.
func TestAnalyzeFewLeaked(t *testing.T) {
	ps := NewPaths()
	for range 40 {
		ps.Add(join(exitA, parse, l1, sub2, l2, free), st.Freed)
	}
	for range 2 {
		ps.Add(join(exitA, parse, l1, sub2, l2t), st.EndReached)
	}
	if rc := Analyze(ps, frames); rc.Status != event.RootCauseInconclusive || len(rc.Branches) != 0 {
		t.Errorf("two leaked paths: %s %+v, want inconclusive", rc.Status, rc.Branches)
	}
	ps.Add(join(exitA, parse, l1, sub2, l2t), st.EndReached)
	if rc := Analyze(ps, frames); rc.Status != event.RootCauseFound || len(rc.Branches) != 1 || rc.Branches[0].Addr != l2t.Addr {
		t.Errorf("three leaked paths: %s %+v, want found at %#x", rc.Status, rc.Branches, l2t.Addr)
	}
}
