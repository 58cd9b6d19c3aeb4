package usage

import (
	"fmt"
	"sort"

	"github.com/leakpath/leakpath/internal/model/heap"
)

// Per-call rows (Options.PerCall): each invocation of an entry unit is a
// row of its own. A thread's allocator calls belong to one invocation
// while their stacks have the same entry unit entered from the same call
// site (the return address in the entry's caller); a call with another
// entry, or the same entry from another call site, starts the next one,
// as JP2014-149606 aggregates per library call. Two invocations in a row from
// the same call site (a loop calling the entry, with no allocator call
// from elsewhere between them) are one row: the stacks of their
// allocations are the same.
//
// Frees and reallocs are charged, like every count, to the invocation
// that allocated the block: the one its thread was in at the block's
// allocation time.

// callSite is a site's entry unit and the address it was entered from.
type callSite struct {
	unit int32
	from uint64
	ok   bool
}

// callThread is where one thread's invocations stand.
type callThread struct {
	entry int32 // the current invocation's entry unit; -1: none yet
	from  uint64
	row   int32
	spans []callSpan // every invocation's start, in time order
}

type callSpan struct {
	t   uint64
	row int32
}

// callSiteOf returns the entry unit and call site of site.
func (e *Engine) callSiteOf(im *image, site heap.StackID) callSite {
	if int(site) < len(im.callSites) && im.callSites[site].ok {
		return im.callSites[site]
	}
	if int(site) >= len(im.callSites) {
		im.callSites = append(im.callSites, make([]callSite, int(site)+1-len(im.callSites)+256)...)
	}
	cs := callSite{unit: e.siteUnits(im, site)[0], ok: true}
	if site != 0 {
		if frames := e.opts.Stack(im.p, site); len(frames) > 0 {
			if j := e.entryFrame(frames, rootOf(frames, im.exe), im.exe); j+1 < len(frames) {
				cs.from = frames[j+1].Address
			}
		}
	}
	im.callSites[site] = cs
	return cs
}

// thread returns the invocation state of thread tid.
func (im *image) thread(tid int32) *callThread {
	th := im.callThreads[tid]
	if th == nil {
		th = &callThread{entry: -1, row: -1}
		if im.callThreads == nil {
			im.callThreads = map[int32]*callThread{}
		}
		im.callThreads[tid] = th
	}
	return th
}

// callRow returns the row of an allocator call at site by thread tid at
// time t, starting a new invocation when the entry or call site changed.
func (e *Engine) callRow(im *image, site heap.StackID, tid int32, t uint64) []int32 {
	cs := e.callSiteOf(im, site)
	th := im.thread(tid)
	if th.row < 0 || th.entry != cs.unit || th.from != cs.from {
		base := im.units[cs.unit]
		if im.callCount == nil {
			im.callCount = map[int32]int{}
		}
		im.callCount[cs.unit]++
		n := im.callCount[cs.unit]
		th.row = im.add(&unit{key: fmt.Sprintf("%s\x00call %d", base.key, n), name: base.name, kind: base.kind,
			module: base.module, call: n, callTID: tid, first: t})
		th.entry, th.from = cs.unit, cs.from
		th.spans = append(th.spans, callSpan{t: t, row: th.row})
	}
	u := im.units[th.row]
	u.first, u.last = min(u.first, t), max(u.last, t)
	im.one[0] = th.row
	return im.one[:]
}

// rowAt returns the row of the invocation thread tid was in at time t:
// the one a block allocated then belongs to. Without one (a block a fork
// child inherited), the site's entry unit.
func (e *Engine) rowAt(im *image, site heap.StackID, tid int32, t uint64) []int32 {
	im.one[0] = e.callSiteOf(im, site).unit
	if th := im.callThreads[tid]; th != nil {
		if i := sort.Search(len(th.spans), func(i int) bool { return th.spans[i].t > t }) - 1; i >= 0 {
			im.one[0] = th.spans[i].row
		}
	}
	return im.one[:]
}
