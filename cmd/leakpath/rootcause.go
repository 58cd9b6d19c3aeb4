package main

import (
	"sort"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/steptrace"
)

// rootCauseEvents analyses the paths a run recorded: a RootCause event
// per site, for the model and the trace.
func rootCauseEvents(res *collect.Result) []event.Event {
	var out []event.Event
	for idx, sites := range res.RootCause {
		ids := make([]heap.StackID, 0, len(sites))
		for site := range sites {
			ids = append(ids, site)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, site := range ids {
			st := sites[site]
			out = append(out, event.Event{Kind: event.RootCause, Proc: idx, Stack: st.AgentID,
				X: &event.Extra{RootCause: analyze(st)}})
		}
	}
	return out
}

// analyze finds where a site's leaked (E) paths part from its freed (F)
// ones (seed 000 step 335, fig. 11): walking back from the end of each E
// path to the last event that also occurs in an F path; the function the
// thread is in after that event is where they part, and the E path's next
// event, when it is a branch, is the branch whose direction leaks.
func analyze(st *collect.SiteTrace) *event.RootCauseInfo {
	rc := &event.RootCauseInfo{Note: st.Note, WindowNs: uint64(st.WindowTime), Stops: uint64(st.Stops),
		FoundAfterNs: uint64(st.Last)}
	var fs, es []*steptrace.Path
	for _, path := range st.Paths {
		switch path.Outcome {
		case steptrace.Freed:
			fs = append(fs, path)
		case steptrace.EndReached:
			es = append(es, path)
		}
	}
	rc.Traced, rc.Freed, rc.Leaked = uint32(len(fs)+len(es)), uint32(len(fs)), uint32(len(es))
	switch {
	case rc.Traced == 0:
		rc.Status = event.RootCauseNotTraced
		return rc
	case len(es) == 0 || len(fs) == 0:
		rc.Status = event.RootCauseInconclusive
		if rc.Note == "" {
			rc.Note = "every traced execution ended the same way"
		}
		return rc
	}
	inF := map[steptrace.Event]bool{}
	for _, f := range fs {
		for _, e := range events(f) {
			inF[e] = true
		}
	}
	funcs := map[uint64]int{}
	branches := map[event.RootBranch]int{}
	// How many E paths take each branch the way no F path does: where
	// a path's walk back ends elsewhere (a run perturbed by signals, a
	// loop), its most common such branch stands in.
	leakOnly := map[steptrace.Event]int{}
	for _, e := range es {
		seen := map[steptrace.Event]bool{}
		for _, ev := range events(e) {
			if ev.Kind == steptrace.Branch && !inF[ev] && !seen[ev] {
				seen[ev] = true
				leakOnly[ev]++
			}
		}
	}
	for _, e := range es {
		evs := events(e)
		at := len(evs) - 1
		for at >= 0 && !inF[evs[at]] {
			at--
		}
		fn := functionAfter(evs[:at+1], st.Frames)
		if fn == 0 {
			continue
		}
		b, ok := steptrace.Event{}, false
		if at+1 < len(evs) && evs[at+1].Kind == steptrace.Branch {
			b, ok = evs[at+1], true
		} else {
			for _, ev := range evs[at+1:] {
				if ev.Kind == steptrace.Branch && leakOnly[ev] > 0 && (!ok || leakOnly[ev] > leakOnly[b]) {
					b, ok = ev, true
				}
			}
		}
		if ok {
			branches[event.RootBranch{Addr: b.Addr, LeaksWhenTaken: b.Taken, To: b.To}]++
			fn = b.Addr // the function, shown where it parts
		}
		funcs[fn]++
	}
	if len(funcs) == 0 {
		rc.Status = event.RootCauseInconclusive
		return rc
	}
	rc.Status = event.RootCauseFound
	rc.Functions = byCount(funcs, func(a, b uint64) bool { return a < b })
	rc.Branches = byCount(branches, func(a, b event.RootBranch) bool { return a.Addr < b.Addr })
	return rc
}

// events returns a path's events but the exit out of its end point,
// which ends F paths judged later as well as E paths.
func events(p *steptrace.Path) []steptrace.Event {
	if p.Ended && len(p.Events) > 0 {
		return p.Events[:len(p.Events)-1]
	}
	return p.Events
}

// functionAfter returns an address in the function a path is in after
// its events evs: a call's entry, or, at and above the allocating
// function where the path began, the allocation stack's return address
// into that function (frames, innermost first).
func functionAfter(evs []steptrace.Event, frames []uint64) uint64 {
	var stack []uint64 // the functions entered, innermost last
	up := 0            // how far above the allocating function
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
		return stack[len(stack)-1]
	}
	if up < len(frames) {
		return frames[up] - 1
	}
	return 0
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
