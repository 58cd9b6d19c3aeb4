package rootcause

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/model/event"
)

// Part is the walk of JP2009-217617 fig. 11: it returns the index in
// leaked of its last event that also occurs on a freed path (inFreed),
// where the leaked execution last agreed with a freed one; -1 when none
// does. It is one signal among the others (see Analyze), not the answer:
// the last shared event is often a join point after the decision.
func Part[S comparable](leaked []S, inFreed map[S]bool) int {
	at := len(leaked) - 1
	for at >= 0 && !inFreed[leaked[at]] {
		at--
	}
	return at
}

// occurring returns the set of events on the paths.
func occurring[S comparable](paths [][]S) map[S]bool {
	set := map[S]bool{}
	for _, p := range paths {
		for _, s := range p {
			set[s] = true
		}
	}
	return set
}

// trace is a distinct sequence of events and how many times it was seen.
type trace struct {
	events []steptrace.Event
	count  int
}

// byOutcome returns the distinct paths, freed ones and leaked ones.
func (ps *Paths) byOutcome() (fs, es []trace) {
	for i := range ps.Len() {
		evs, outcome, n := ps.Path(i)
		if outcome == steptrace.Freed {
			fs = append(fs, trace{evs, n})
		} else {
			es = append(es, trace{evs, n})
		}
	}
	return fs, es
}

// total returns how many times the traces were seen.
func total(ts []trace) uint32 {
	n := uint32(0)
	for _, t := range ts {
		n += uint32(t.count)
	}
	return n
}

// Analysis bounds.
const (
	// maxBranches: candidates reported.
	maxBranches = 5
	// zConfidence: how many standard errors a predicate's increase
	// must stand above zero (about 95% one-sided).
	zConfidence = 1.645
	// minLeaked: leaked paths a confirmed outcome must be seen on: one
	// or two leaked executions are no evidence of a rule.
	minLeaked = 3
)

// predicate is a branch outcome: the conditional branch at addr taken or
// not.
type predicate struct {
	addr  uint64
	taken bool
}

// Candidate is a branch outcome and how well it separates leaked (E)
// executions from freed (F) ones.
type Candidate struct {
	Branch event.RootBranch
	// Diverged: E paths that first part from every F path with the same
	// history here (the first confirmed outcome from there on);
	// WalkBack: E paths whose walk-back (Part) lands just before it.
	Diverged, WalkBack int
	// Failure: of the paths that took this outcome, the share that
	// leaked; Context: of the paths that reached the branch, the share
	// that leaked; Increase is their difference, Low its lower
	// confidence bound; Recall: the share of E paths that took it.
	Failure, Context, Increase, Low, Recall float64
	// Score: the harmonic mean of Low and Recall.
	Score float64
}

func (c Candidate) String() string {
	way := "not taken"
	if c.Branch.LeaksWhenTaken {
		way = "taken"
	}
	return fmt.Sprintf("%#x %s: score %.2f (increase %.2f ≥ %.2f, recall %.2f), %d diverged", c.Branch.Addr, way, c.Score, c.Increase, c.Low, c.Recall, c.Diverged)
}

// Analyze finds the branch outcome where a site's leaked (E) paths part
// from its freed (F) ones. Each path is a thread's execution from the
// allocation on, labelled by what became of its block. For each E path,
// the first event where it departs from every F path with the same
// history (prefix divergence) is followed to the first branch outcome
// that the statistics confirm: one that predicts E (statistical
// debugging's increase of the predicate over its branch being reached,
// with confidence). Candidates are ranked by how many E paths diverge at
// them, then by score; nothing is claimed when no outcome is confirmed.
// frames is the allocation stack (unused by the branch analysis, kept
// for the callers' sake).
func Analyze(ps *Paths, frames []uint64) *event.RootCauseInfo {
	rc, _ := AnalyzeCandidates(ps)
	return rc
}

// AnalyzeCandidates is Analyze, with the ranked candidates.
func AnalyzeCandidates(ps *Paths) (*event.RootCauseInfo, []Candidate) {
	rc := &event.RootCauseInfo{}
	fs, es := ps.byOutcome()
	rc.Freed, rc.Leaked = total(fs), total(es)
	rc.Traced = rc.Freed + rc.Leaked
	switch {
	case rc.Traced == 0:
		rc.Status = event.RootCauseNotTraced
		return rc, nil
	case len(es) == 0 || len(fs) == 0:
		rc.Status = event.RootCauseInconclusive
		rc.Note = "every traced execution ended the same way"
		return rc, nil
	}
	stats := predicateStats(fs, es)
	confirmed := map[predicate]bool{}
	for p, c := range stats {
		if c.Low > 0 && c.Recall*float64(rc.Leaked) >= minLeaked {
			confirmed[p] = true
		}
	}
	if len(confirmed) == 0 {
		rc.Status = event.RootCauseInconclusive
		rc.Note = "no branch outcome separates the leaked executions from the freed ones"
		if rc.Leaked < minLeaked {
			rc.Note = fmt.Sprintf("too few leaked executions traced (%d) to tell what separates them from the freed ones", rc.Leaked)
		}
		return rc, nil
	}

	// Prefix divergence: the F paths as a trie of events.
	root := &trieNode{}
	for _, f := range fs {
		n := root
		for _, e := range f.events {
			n = n.child(e)
		}
	}
	var fev [][]steptrace.Event
	for _, f := range fs {
		fev = append(fev, f.events)
	}
	inF := occurring(fev)
	for _, e := range es {
		n, d := root, 0
		for ; d < len(e.events); d++ {
			next := n.next[e.events[d]]
			if next == nil {
				break
			}
			n = next
		}
		if p, ok := firstConfirmed(e.events[d:], confirmed); ok {
			stats[p].Diverged += e.count
		}
		// The walk back of JP2009-217617 fig. 11: the event after the last one shared
		// with F paths.
		if at := Part(e.events, inF); at+1 < len(e.events) {
			if p, ok := firstConfirmed(e.events[at+1:at+2], confirmed); ok {
				stats[p].WalkBack += e.count
			}
		}
	}
	var cands []Candidate
	for p := range confirmed {
		cands = append(cands, *stats[p])
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.Diverged != b.Diverged {
			return a.Diverged > b.Diverged
		}
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		if a.WalkBack != b.WalkBack {
			return a.WalkBack > b.WalkBack
		}
		return branchLess(a.Branch, b.Branch)
	})
	if cands[0].Diverged == 0 {
		rc.Status = event.RootCauseInconclusive
		rc.Note = "outcomes that predict a leak were seen, but no leaked execution parts from the freed ones there"
		return rc, cands
	}
	// Keep the candidates some E paths diverge at, and the others that
	// predict E about as well as the best (a consequence of the decision
	// may be where the fix goes).
	var out []Candidate
	for _, c := range cands {
		if len(out) == maxBranches {
			break
		}
		if c.Diverged > 0 || c.Score >= 0.8*cands[0].Score {
			out = append(out, c)
		}
	}
	rc.Status = event.RootCauseFound
	var why []string
	for i, c := range out {
		rc.Branches = append(rc.Branches, c.Branch)
		why = append(why, fmt.Sprintf("branch %d: score %.2f, leaked %.0f%% of the times so against %.0f%% where reached, %d of %d leaked paths part there",
			i+1, c.Score, 100*c.Failure, 100*c.Context, c.Diverged, rc.Leaked))
	}
	rc.Note = strings.Join(why, "; ")
	// The function, shown where the best candidate is.
	rc.Functions = []uint64{out[0].Branch.Addr}
	return rc, out
}

// firstConfirmed returns the first branch outcome among evs that is
// confirmed.
func firstConfirmed(evs []steptrace.Event, confirmed map[predicate]bool) (predicate, bool) {
	for _, e := range evs {
		if e.Kind != steptrace.Branch {
			continue
		}
		if p := (predicate{e.Addr, e.Taken}); confirmed[p] {
			return p, true
		}
	}
	return predicate{}, false
}

// trieNode is a node of the F paths' prefix tree.
type trieNode struct{ next map[steptrace.Event]*trieNode }

func (n *trieNode) child(e steptrace.Event) *trieNode {
	if n.next == nil {
		n.next = map[steptrace.Event]*trieNode{}
	}
	c := n.next[e]
	if c == nil {
		c = &trieNode{}
		n.next[e] = c
	}
	return c
}

// predicateStats scores every branch outcome seen on the paths, each
// path counted once per outcome however often it took it (statistical
// debugging's observed-true).
func predicateStats(fs, es []trace) map[predicate]*Candidate {
	type counts struct{ e, f float64 }
	took := map[predicate]*counts{}
	reached := map[uint64]*counts{}
	to := map[predicate]uint64{}
	numE := 0.0
	for _, group := range []struct {
		ts   []trace
		leak bool
	}{{fs, false}, {es, true}} {
		for _, t := range group.ts {
			n := float64(t.count)
			if group.leak {
				numE += n
			}
			seenP := map[predicate]bool{}
			seenB := map[uint64]bool{}
			for _, ev := range t.events {
				if ev.Kind != steptrace.Branch {
					continue
				}
				p := predicate{ev.Addr, ev.Taken}
				if _, ok := to[p]; !ok {
					to[p] = ev.To
				}
				if !seenP[p] {
					seenP[p] = true
					c := took[p]
					if c == nil {
						c = &counts{}
						took[p] = c
					}
					if group.leak {
						c.e += n
					} else {
						c.f += n
					}
				}
				if !seenB[ev.Addr] {
					seenB[ev.Addr] = true
					c := reached[ev.Addr]
					if c == nil {
						c = &counts{}
						reached[ev.Addr] = c
					}
					if group.leak {
						c.e += n
					} else {
						c.f += n
					}
				}
			}
		}
	}
	out := map[predicate]*Candidate{}
	for p, c := range took {
		r := reached[p.addr]
		np, nr := c.e+c.f, r.e+r.f
		failure, context := c.e/np, r.e/nr
		inc := failure - context
		se := math.Sqrt(failure*(1-failure)/np + context*(1-context)/nr)
		// With few paths a perfect predictor has no variance: the
		// bound then comes from the sample size alone.
		se = math.Max(se, 1/math.Sqrt(np+nr))
		low := inc - zConfidence*se
		recall := c.e / numE
		score := 0.0
		if low > 0 && recall > 0 {
			score = 2 / (1/low + 1/recall)
		}
		out[p] = &Candidate{Branch: event.RootBranch{Addr: p.addr, To: to[p], LeaksWhenTaken: p.taken},
			Failure: failure, Context: context, Increase: inc, Low: low, Recall: recall, Score: score}
	}
	return out
}

func branchLess(a, b event.RootBranch) bool {
	return a.Addr < b.Addr || a.Addr == b.Addr && !a.LeaksWhenTaken && b.LeaksWhenTaken
}
