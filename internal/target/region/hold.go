package region

import (
	"bytes"
	"encoding/binary"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// HoldRequested reports whether the agent is holding the process at its
// exit, waiting for a scan (Options.HoldExit).
func (r *Region) HoldRequested() bool {
	return r.u32(wire.OffHold).Load() == wire.HoldRequested
}

// TakeHold claims the agent's hold request. It fails if the agent
// withdrew it (it waits only so long for an answer): then the process is
// on its way out and must not be scanned.
func (r *Region) TakeHold() bool {
	return r.u32(wire.OffHold).CompareAndSwap(wire.HoldRequested, wire.HoldScanning)
}

// ReleaseHold lets the held process exit.
func (r *Region) ReleaseHold() {
	r.u32(wire.OffHold).Store(wire.HoldReleased)
	futexWake(&r.mem[wire.OffHold], 1<<30)
}

// HoldInfo returns what the agent left for the scan: the address of the
// program's default suppressions (0: none), and where its own memory is:
// the address of its table of mappings, and its per-thread state at
// thread pointer + tlsOffset, tlsSize bytes.
func (r *Region) HoldInfo() (supp, ownTable uint64, tlsOffset int64, tlsSize uint64) {
	return r.u64(wire.OffHoldSupp).Load(), r.u64(wire.OffOwnTable).Load(),
		int64(r.u64(wire.OffTLSOffset).Load()), r.u64(wire.OffTLSSize).Load()
}

// HoldFlags returns what the agent said of the program at its hold
// (wire.HoldFlag*).
func (r *Region) HoldFlags() uint32 {
	return r.u32(wire.OffHoldFlags).Load()
}

// HoldStack returns where the scan of the holding thread's stack starts
// and its thread pointer, as it left them before its hold request (sp is 0
// when the agent could not say), and regs, the address in the process of
// the program's callee-saved registers where it called the exit function
// (sp then is its stack pointer there). With regs 0, sp is the holding
// thread's own, its callee-saved registers spilled above it.
func (r *Region) HoldStack() (sp, tp, regs uint64) {
	return r.u64(wire.OffHoldSP).Load(), r.u64(wire.OffHoldTP).Load(), r.u64(wire.OffHoldRegs).Load()
}

// PendingBlock is an allocation a thread keeps pending in its fold area:
// live, but not yet reported as a record.
type PendingBlock struct {
	Addr, Size uint64
	Time       uint64 // when allocated, in the region's clock
	Stack      uint32 // the agent's stack id
	Fn         event.Fn
}

// PeekPending returns the live pending allocations of every thread,
// without taking them: for a scan of a stopped process, whose threads
// will go on after it.
func (r *Region) PeekPending() []PendingBlock {
	le := binary.LittleEndian
	var out []PendingBlock
	used := min(r.SlotsUsed(), r.opts.Slots)
	for i := 0; i < used; i++ {
		f := r.fold(i)
		for _, o := range pendingEntries(f) {
			e := f[o : o+wire.PendingSize]
			if addr := le.Uint64(e[wire.OffPendAddr:]); addr != 0 {
				out = append(out, PendingBlock{Addr: addr, Size: le.Uint64(e[wire.OffPendSize:]), Time: le.Uint64(e[wire.OffPendTS:]),
					Stack: le.Uint32(e[wire.OffPendStack:]), Fn: event.Fn(e[wire.OffPendFn])})
			}
		}
	}
	return out
}

// AskRequested reports whether a thread of the program asks for a
// snapshot or a leak check (leakpath_snapshot, leakpath_leak_check) and
// waits for the answer.
func (r *Region) AskRequested() bool {
	return r.u32(wire.OffAskState).Load() == wire.AskRequested
}

// Ask is a request of the program.
type Ask struct {
	Kind  uint32 // wire.AskSnapshot or wire.AskLeakCheck
	TID   int32  // the thread that asks
	Label string // leakpath_snapshot's label
	// SP and Regs: the asking thread's stack pointer where the program
	// called the agent, and the address of its callee-saved registers
	// there (0, 0: not known).
	SP, Regs uint64
}

// TakeAsk claims the program's request. It fails if the agent withdrew
// it (it waits only so long for an answer). The asking thread waits
// until Answer.
func (r *Region) TakeAsk() (Ask, bool) {
	if !r.u32(wire.OffAskState).CompareAndSwap(wire.AskRequested, wire.AskTaken) {
		return Ask{}, false
	}
	a := Ask{Kind: r.u32(wire.OffAskKind).Load(), TID: int32(r.u32(wire.OffAskTID).Load()),
		SP: r.u64(wire.OffAskSP).Load(), Regs: r.u64(wire.OffAskRegs).Load()}
	if a.Kind != wire.AskSnapshot && a.Kind != wire.AskLeakCheck {
		// Answered (the asking thread, if any, must not wait), not served.
		r.fail("a request of kind %d", a.Kind)
		r.Answer(-1)
		return Ask{}, false
	}
	label := r.mem[wire.OffAskLabel : wire.OffAskLabel+wire.AskLabelMax]
	if i := bytes.IndexByte(label, 0); i >= 0 {
		label = label[:i]
	}
	a.Label = string(label)
	return a, true
}

// Answer ends the request taken with TakeAsk: the asking thread returns
// result (a leak check: the blocks leaked; -1: it failed).
func (r *Region) Answer(result int64) {
	r.u64(wire.OffAskResult).Store(uint64(result))
	r.u32(wire.OffAskState).Store(wire.AskDone)
	futexWake(&r.mem[wire.OffAskState], 1<<30)
}
