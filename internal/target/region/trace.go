package region

import (
	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/target/wire"
)

// The collector's side of root-cause windows (LP_TRACE_* in lp_wire.h).

// ArmSuspects makes the agent ask for a window when a thread allocates at
// one of these stack ids (at most wire.Suspects; nil disarms).
func (r *Region) ArmSuspects(ids []uint32) {
	n := min(len(ids), wire.Suspects)
	r.put32(wire.OffSuspectsN, 0)
	for i := 0; i < n; i++ {
		r.put32(wire.OffSuspects+4*i, ids[i])
	}
	r.put32(wire.OffSuspectsN, uint32(n))
}

// TraceRequest is a thread's request for a window: it allocated Addr
// (Size bytes) at agent stack id Stack, and waits.
type TraceRequest struct {
	TID   int32
	Addr  uint64
	Size  uint64
	Stack uint32
}

// PendingTrace returns the request a thread posted, if one waits.
func (r *Region) PendingTrace() (TraceRequest, bool) {
	if r.Corrupt() != nil || r.u32(wire.OffTraceState).Load() != wire.TraceRequested {
		return TraceRequest{}, false
	}
	req := TraceRequest{
		TID:   int32(r.u32(wire.OffTraceTID).Load()),
		Addr:  r.u64(wire.OffTraceAddr).Load(),
		Size:  r.u64(wire.OffTraceSize).Load(),
		Stack: r.u32(wire.OffTraceStack).Load(),
	}
	// The thread is traced: it must be one of this process's, not any
	// thread a scribbled region names.
	if req.TID <= 0 || r.pid <= 0 || unix.Tgkill(int(r.pid), int(req.TID), 0) != nil {
		r.RefuseTrace()
		return TraceRequest{}, false
	}
	return req, true
}

// TakeTrace claims the posted request (the collector has attached to the
// thread) and lets the thread go on, into its window. It fails if the
// thread withdrew the request (it waits only so long).
func (r *Region) TakeTrace() bool {
	if !r.u32(wire.OffTraceState).CompareAndSwap(wire.TraceRequested, wire.TraceTaken) {
		return false
	}
	futexWake(&r.mem[wire.OffTraceState], 1)
	return true
}

// RefuseTrace turns the posted request down: its thread goes on at once.
func (r *Region) RefuseTrace() {
	if r.u32(wire.OffTraceState).CompareAndSwap(wire.TraceRequested, wire.TraceIdle) {
		r.put32(wire.OffTraceTID, 0)
		futexWake(&r.mem[wire.OffTraceState], 1)
	}
}

// Watch makes the agent note the free (or realloc) of block addr (0:
// none), from now on.
func (r *Region) Watch(addr uint64) {
	r.u64(wire.OffWatchAddr).Store(0)
	r.put32(wire.OffWatchFreed, 0)
	r.u64(wire.OffWatchAddr).Store(addr)
}

// WatchFreed reports whether the watched block was freed since Watch.
func (r *Region) WatchFreed() bool { return r.u32(wire.OffWatchFreed).Load() != 0 }

// EndTrace ends a window: the next request may come after skip more
// allocations at suspect sites.
func (r *Region) EndTrace(skip uint32) {
	r.Watch(0)
	r.put32(wire.OffTraceSkip, skip)
	r.put32(wire.OffTraceTID, 0)
	r.put32(wire.OffTraceState, wire.TraceIdle)
}
