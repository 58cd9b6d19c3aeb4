package rootcause

import (
	"slices"
	"sort"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/steptrace"
)

// Part is the walk of JP2009-217617's fig. 11: it returns the index in leaked
// of its last event that also occurs on a freed path (inFreed), where the
// leaked execution last agreed with a freed one; -1 when none does.
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

// Analyze finds where a site's leaked (E) paths part from its freed (F)
// ones. frames: the allocation stack's return addresses, innermost first
// (frames[0] in the allocating function, where paths begin). It fills
// the status, counts, functions and branches of the answer.
func Analyze(ps *Paths, frames []uint64) *event.RootCauseInfo {
	rc := &event.RootCauseInfo{}
	fs, es := ps.byOutcome()
	rc.Freed, rc.Leaked = total(fs), total(es)
	rc.Traced = rc.Freed + rc.Leaked
	switch {
	case rc.Traced == 0:
		rc.Status = event.RootCauseNotTraced
		return rc
	case len(es) == 0 || len(fs) == 0:
		rc.Status = event.RootCauseInconclusive
		rc.Note = "every traced execution ended the same way"
		return rc
	}

	// Step 335: the function, from the calls and returns alone, each
	// numbered by its occurrence on its path: the second return from a
	// function is not the first (the publication's symbols would match them).
	var fcalls [][]numbered
	for _, f := range fs {
		fcalls = append(fcalls, numbering(callsOf(f.events)))
	}
	inF := occurring(fcalls)
	funcs := map[frame]int{}
	for _, e := range es {
		evs := callsOf(e.events)
		funcs[frameAfter(evs[:Part(numbering(evs), inF)+1])] += e.count
	}
	culprits := byCount(funcs, func(a, b frame) bool {
		return a.entry < b.entry || a.entry == b.entry && a.up < b.up
	})

	// Steps 340–355: in each culprit function, the branch traces of its
	// invocations, closed by their path's outcome; the leaking branch is
	// the first an E trace takes after its last event shared with an F
	// trace: there the leaking executions went their own way.
	branches := map[event.RootBranch]int{}
	for _, fn := range culprits {
		addr := fn.address(frames)
		found := leakingBranches(branchTraces(fs, es, fn))
		for b, n := range found {
			branches[b] += n
		}
		if len(found) > 0 {
			// The function, shown where it parts.
			addr = byCount(found, branchLess)[0].Addr
		}
		if addr != 0 && !slices.Contains(rc.Functions, addr) {
			rc.Functions = append(rc.Functions, addr)
		}
	}
	if len(rc.Functions) == 0 {
		rc.Status = event.RootCauseInconclusive
		rc.Note = "the leaked executions left no function in common with the freed ones"
		return rc
	}
	rc.Status = event.RootCauseFound
	rc.Branches = byCount(branches, branchLess)
	return rc
}

// branchTraces returns the branch traces of fn's invocations on the
// paths, each closed by its path's outcome, as a grammar of their own.
func branchTraces(fs, es []trace, fn frame) *Paths {
	g := NewPaths()
	for _, group := range []struct {
		ts      []trace
		outcome steptrace.Outcome
	}{{fs, steptrace.Freed}, {es, steptrace.EndReached}} {
		for _, t := range group.ts {
			for _, inv := range invocations(t.events, fn) {
				g.addN(inv, group.outcome, t.count)
			}
		}
	}
	return g
}

// leakingBranches applies the walk of JP2009-217617's fig. 11 to a
// function's branch traces (its fig. 15): for each E trace, the branch after its last event
// shared with an F trace, with the number of E traces that take it. When
// every E trace's branches all occur on F traces, the branches E traces
// take in a way no F trace does stand in (loops and signals can blur the
// walk).
func leakingBranches(g *Paths) map[event.RootBranch]int {
	fs, es := g.byOutcome()
	var fev [][]steptrace.Event
	for _, t := range fs {
		fev = append(fev, t.events)
	}
	inF := occurring(fev)
	found := map[event.RootBranch]int{}
	leakOnly := map[event.RootBranch]int{}
	for _, t := range es {
		seen := map[steptrace.Event]bool{}
		for _, ev := range t.events {
			if !inF[ev] && !seen[ev] {
				seen[ev] = true
				leakOnly[rootBranch(ev)] += t.count
			}
		}
		if at := Part(t.events, inF); at+1 < len(t.events) {
			found[rootBranch(t.events[at+1])] += t.count
		}
	}
	if len(found) == 0 && len(leakOnly) > 0 {
		// Only the most common stands in: the others may be noise.
		b := byCount(leakOnly, branchLess)[0]
		return map[event.RootBranch]int{b: leakOnly[b]}
	}
	return found
}

func rootBranch(e steptrace.Event) event.RootBranch {
	return event.RootBranch{Addr: e.Addr, To: e.To, LeaksWhenTaken: e.Taken}
}

func branchLess(a, b event.RootBranch) bool {
	return a.Addr < b.Addr || a.Addr == b.Addr && !a.LeaksWhenTaken && b.LeaksWhenTaken
}

// frame names a function a path runs in: one it entered (entry), or the
// one up levels above the allocating function on the allocation stack.
type frame struct {
	entry uint64
	up    int
}

// address returns an address in the function: its entry, or the return
// address into it on the allocation stack.
func (f frame) address(frames []uint64) uint64 {
	if f.entry != 0 {
		return f.entry
	}
	if f.up < len(frames) {
		return frames[f.up] - 1
	}
	return 0
}

// frameAfter returns the function a path is in after its events evs.
func frameAfter(evs []steptrace.Event) frame {
	var stack []uint64 // the functions entered, innermost last
	up := 0
	for _, e := range evs {
		switch e.Kind {
		case steptrace.Enter:
			stack = append(stack, e.Addr)
		case steptrace.Exit:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			} else {
				up++
			}
		}
	}
	if len(stack) > 0 {
		return frame{entry: stack[len(stack)-1]}
	}
	return frame{up: up}
}

// numbered is an event and its occurrence on its path (1: the first).
type numbered struct {
	steptrace.Event
	n int
}

func numbering(evs []steptrace.Event) []numbered {
	seen := map[steptrace.Event]int{}
	out := make([]numbered, len(evs))
	for i, e := range evs {
		seen[e]++
		out[i] = numbered{e, seen[e]}
	}
	return out
}

// callsOf returns a path's calls and returns (JP2009-217617's function
// trace; branches are for the second step).
func callsOf(evs []steptrace.Event) []steptrace.Event {
	var out []steptrace.Event
	for _, e := range evs {
		if e.Kind != steptrace.Branch {
			out = append(out, e)
		}
	}
	return out
}

// invocations splits a path's branches in fn by invocation of fn (fig.
// 14 step 1402): the branches each run of fn took itself, not those of
// its callees.
func invocations(evs []steptrace.Event, fn frame) [][]steptrace.Event {
	var out [][]steptrace.Event
	var stack []int  // per function entered: its invocation's index in out, or -1
	up, cur := 0, -1 // cur: the invocation of fn on the allocation stack
	if fn.entry == 0 && fn.up == 0 {
		out, cur = append(out, nil), 0
	}
	for _, e := range evs {
		switch e.Kind {
		case steptrace.Enter:
			inv := -1
			if fn.entry != 0 && e.Addr == fn.entry {
				out = append(out, nil)
				inv = len(out) - 1
			}
			stack = append(stack, inv)
		case steptrace.Exit:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
				break
			}
			up++
			cur = -1
			if fn.entry == 0 && fn.up == up {
				out = append(out, nil)
				cur = len(out) - 1
			}
		case steptrace.Branch:
			if len(stack) > 0 {
				if i := stack[len(stack)-1]; i >= 0 {
					out[i] = append(out[i], e)
				}
			} else if cur >= 0 {
				out[cur] = append(out[cur], e)
			}
		}
	}
	return out
}

// byCount orders keys by count, most first, then by less.
func byCount[K comparable](m map[K]int, less func(a, b K) bool) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return less(keys[i], keys[j])
	})
	return keys
}
