package ptrace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ErrCallFaulted means that a function run by Call stopped with a fault
// (SIGSEGV, SIGBUS, SIGILL, SIGFPE) instead of returning: the registers
// were put back and the fault was not delivered.
var ErrCallFaulted = errors.New("the called function faulted")

// CallResult is what Call observed.
type CallResult struct {
	Regs unix.PtraceRegs // at the return (Rax holds the result)
	// Released: the other threads had to run (the call took longer than
	// patience, maybe waiting for a lock one of them held).
	Released bool
}

// Call runs stopped thread tid from registers r (the caller has set Rip,
// the arguments and a stack whose top holds the return address ret, an
// int3 it wrote) until it traps at ret; the other threads stay stopped,
// unless the call takes longer than patience: then they run (and are
// stopped again before Call returns) so that a lock one of them holds
// cannot hold the call for ever. A signal for the thread meanwhile is
// delivered as it would have been; a fault ends the call with
// ErrCallFaulted. The thread's own pending stop (its signal, if it was
// stopped for one) is kept for its next resume. The caller restores the
// thread's registers afterwards.
func (t *Tracer) Call(ctx context.Context, tid int, r unix.PtraceRegs, ret uint64, patience time.Duration) (CallResult, error) {
	var res CallResult
	err := t.do("call", func() error {
		th, err := t.stoppedThread("call", tid)
		if err != nil {
			return err
		}
		kind, sig := th.kind, th.sig
		defer func() {
			if th.state == stopped {
				th.kind, th.sig = kind, sig
			}
		}()
		// Orig_rax -1: the kernel must not restart an interrupted system
		// call at the new Rip.
		r.Orig_rax = ^uint64(0)
		if err := unix.PtraceSetRegs(tid, &r); err != nil {
			return t.threadErr("call", tid, err)
		}
		res, err = t.callWait(ctx, th, ret, patience)
		return err
	})
	return res, err
}

func (t *Tracer) callWait(ctx context.Context, th *thread, ret uint64, patience time.Duration) (CallResult, error) {
	var res CallResult
	start := time.Now()
	deliver := 0
	for {
		if err := ptraceCont(th.tid, deliver); err != nil {
			return res, t.threadErr("call", th.tid, err)
		}
		th.state = running
		deliver = 0
		delay := 10 * time.Microsecond
		var si childInfo
		for {
			var err error
			si, err = waitid(th.tid, unix.WSTOPPED|unix.WEXITED|unix.WNOHANG|unix.WALL)
			if err != nil {
				t.poll()
				return res, t.goneErr("call", th.tid)
			}
			if si.Pid != 0 {
				break
			}
			if !res.Released && time.Since(start) > patience {
				res.Released = true
				t.running = true
				for _, tid := range t.tids() {
					if o := t.threads[tid]; o != th && o.state == stopped {
						t.resume(o)
					}
				}
			}
			if res.Released {
				for _, tid := range t.tids() {
					if o := t.threads[tid]; o != th {
						t.pollOne(o)
					}
				}
			}
			select {
			case <-ctx.Done():
				// The thread is inside the call: it cannot be taken out
				// of it. Say so; the caller decides.
				return res, &Error{Op: "call", Pid: t.pid, Tid: th.tid, Err: fmt.Errorf("the called function did not return: %w", ctx.Err())}
			case <-time.After(delay):
			}
			delay = min(2*delay, 2*time.Millisecond)
		}
		if si.Code != cldTrapped && si.Code != cldStopped {
			t.poll()
			return res, t.goneErr("call", th.tid)
		}
		status := int(si.Status)
		sig, event := status&0xff, status>>8&0xff
		th.state, th.kind, th.sig = stopped, stopEvent, 0
		switch {
		case event == 0 && sig == int(unix.SIGTRAP):
			if err := unix.PtraceGetRegs(th.tid, &res.Regs); err != nil {
				return res, t.threadErr("call", th.tid, err)
			}
			if res.Regs.Rip == ret+1 {
				if res.Released {
					if err := t.stopAll(ctx, false); err != nil {
						return res, err
					}
				}
				return res, nil
			}
			deliver = sig // not ours
		case event == 0 && (sig == int(unix.SIGSEGV) || sig == int(unix.SIGBUS) || sig == int(unix.SIGILL) || sig == int(unix.SIGFPE)):
			unix.PtraceGetRegs(th.tid, &res.Regs)
			if res.Released {
				t.stopAll(ctx, false)
			}
			return res, &Error{Op: "call", Pid: t.pid, Tid: th.tid, Err: fmt.Errorf("%w: %v at %#x", ErrCallFaulted, unix.Signal(sig), res.Regs.Rip)}
		case event == 0:
			deliver = sig // the program's own signal: its handler runs on top
		case event == unix.PTRACE_EVENT_EXIT:
			t.resume(th)
			th.state = exiting
			t.poll()
			return res, t.goneErr("call", th.tid)
		case event == unix.PTRACE_EVENT_CLONE:
			if msg, err := unix.PtraceGetEventMsg(th.tid); err == nil {
				if nt := int(msg); t.threads[nt] == nil {
					t.threads[nt] = &thread{tid: nt}
				}
			}
		}
	}
}
