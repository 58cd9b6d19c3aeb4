package heap

import "github.com/leakpath/leakpath/internal/model/event"

// Observer is told of the heap as the model changes it, in the order the
// model applies events, for analyses that follow the heap over time
// (internal/analysis/usage). Set it with Session.Observer before applying events;
// nil (the default) costs nothing.
//
// Every call of the allocator the model counts in Totals.Calls reaches
// the observer exactly once: as Freed when it released a known block (a
// free, a delete, the realloc of a block), else as Call. Every allocation
// the model counts in Totals.Allocations reaches it as Allocated or, folded
// by the agent, within Folded.
//
// Times are agent ticks. The methods run on the goroutine applying events
// and must not modify p.
type Observer interface {
	// Call reports one call of fn charged to b: for an allocating call,
	// the block it asked for (b.Site its stack, b.Thread its thread; b.Size
	// 0 and so on when it failed); for a failed realloc, the block it
	// left in place; for a release that matched no block (a free of an
	// address never allocated, or inherited from a fork's parent), a Block
	// with the call's stack as Site and its thread as Thread.
	Call(p *Process, b Block, fn event.Fn, t uint64)
	// Allocated reports that block b was allocated at b.Time (its call is
	// reported by Call, or, for the new block of a realloc of a known
	// block, by Freed).
	Allocated(p *Process, b Block)
	// Freed reports that block b was released at time t by one call of fn
	// (free, delete, or realloc, whose new block Allocated reports).
	Freed(p *Process, b Block, fn event.Fn, t uint64)
	// Folded reports an Agg event: ev.Addr pairs of an allocation at site
	// by ev.Fn and a free by the same thread, ev.Size bytes in all.
	Folded(p *Process, site StackID, ev *event.Event)
	// Pending reports that the allocations the agent held pending (not
	// yet reported by Allocated; later Allocated or Folded) came to bytes
	// at time t: in use then were the blocks Allocated and not Freed,
	// plus these.
	Pending(p *Process, bytes, t uint64)
	// Forked reports that p starts as a fork child, holding its parent's
	// live blocks (see Process.Live).
	Forked(p *Process)
}

// calledAt tells the observer of a call that is charged to its own stack
// and thread (it allocated or released no known block).
func (p *Process) calledAt(ev *event.Event) {
	if p.obs != nil {
		p.obs.Call(p, Block{Site: p.stackOf(ev.Stack), Thread: ev.Thread, Fn: ev.Fn, Time: ev.Time}, ev.Fn, ev.Time)
	}
}
