package collect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/region"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// holdExit serves an image's exit hold: it stops the process, brings the
// model up to date and hands it to the analyses (hook.go), then lets the
// process exit. A failed stop goes to the ExitMissers, so that the report
// says why it has no scan.
func (c *collector) holdExit(im *image, m *merger) {
	if !im.reg.TakeHold() {
		return
	}
	im.scanned = true
	defer im.reg.ReleaseHold()
	if err := c.stop(im, m, StopExit, nil, nil, nil); err != nil {
		c.sink.send(im.idx, c.exitMissed(im, err.Error()))
	}
}

// exitMissed returns what the ExitMissers of im record when its exit
// stop did not happen or failed.
func (c *collector) exitMissed(im *image, why string) []event.Event {
	var out []event.Event
	for _, a := range im.as {
		if x, ok := a.(ExitMisser); ok {
			out = append(out, x.ExitMissed(why)...)
		}
	}
	return out
}

// snapshot serves a snapshot request: the stop of holdExit on a process
// that goes on running, then the response Options.Snapshot makes of the
// model as the analyses left it (made while the process runs again).
// caller, if not nil, is the asking thread's state where the program
// asked.
func (c *collector) snapshot(im *image, m *merger, req control.Request, caller *Caller) control.Response {
	var resp control.Response
	err := c.stop(im, m, StopSnapshot, caller, nil, func(s *heap.Session) { resp = c.opts.Snapshot(s, im.idx, req) })
	if err != nil {
		return control.Response{Error: fmt.Sprintf("pid %d: %v", im.pid, err)}
	}
	return resp
}

// serveAsk serves a request of the program itself (leakpath_snapshot,
// leakpath_leak_check): a snapshot, as `leakpath snapshot` takes it,
// while the asking thread waits; it returns 0, or for a leak check the
// blocks leaked, or -1 when the snapshot failed.
func (c *collector) serveAsk(im *image, m *merger) {
	a, ok := im.reg.TakeAsk()
	if !ok {
		return
	}
	req := control.Request{Op: "snapshot", PID: int(im.pid), TID: int(a.TID), Label: a.Label}
	if a.Kind == wire.AskLeakCheck {
		req.Op = "leak-check"
	}
	var resp control.Response
	if c.opts.Snapshot == nil {
		resp.Error = "this leakpath run takes no snapshots"
	} else {
		var caller *Caller
		if a.SP != 0 && a.Regs != 0 {
			// The scan starts at the program's frame that asked, not at
			// the agent's (whose dead frames below hold stale pointers).
			caller = &Caller{TID: int(a.TID), SP: a.SP, RegsAddr: a.Regs}
		}
		resp = c.snapshot(im, m, req, caller)
	}
	result := int64(-1)
	if resp.Error == "" {
		result = 0
		if req.Op == "leak-check" {
			result = int64(min(resp.LeakedBlocks, 1<<62))
		}
	}
	im.reg.Answer(result)
	if c.opts.Asked != nil {
		c.opts.Asked(im.pid, req, resp)
	}
}

// stop is the stopped-process hook: it stops im's process (every
// thread), brings the model up to date (everything in the rings) and
// hands the stopped image to the analyses, which record what they found
// (Stopped.Emit). Then, still stopped, it calls during (if not nil) with
// the tracer when every thread was ptrace-stopped; then, with the process
// running again (but at its exit), after (if not nil) on the sink's
// goroutine with the analyses' events applied. An exit stop that fails
// once the analyses are reached goes to the ExitMissers there (and stop
// returns nil); one that fails before, to holdExit. caller, if not nil,
// is a thread's state where the program called the agent (the exit's
// comes from the hold).
func (c *collector) stop(im *image, m *merger, kind StopKind, caller *Caller,
	during func(tr *ptrace.Tracer), after func(*heap.Session)) error {
	var resumes []func()
	defer func() {
		for _, r := range resumes {
			r()
		}
	}()
	for _, a := range im.as {
		if b, ok := a.(BeforeStopper); ok {
			if r := b.BeforeStop(kind); r != nil {
				resumes = append(resumes, r)
			}
		}
	}
	st := &Stopped{Image: im.img, Kind: kind, Caller: caller, Start: time.Now()}
	if kind == StopExit {
		sp, tp, regs := im.reg.HoldStack()
		if regs != 0 && sp != 0 {
			st.Caller = &Caller{TP: tp, SP: sp, RegsAddr: regs}
		}
		st.Tracer, st.Held = heldAlone(im.pid, sp, tp)
	}
	if st.Held == nil {
		var err error
		if st.Tracer, err = ptrace.Seize(int(im.pid)); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = st.Tracer.StopAll(ctx)
		cancel()
		if err != nil {
			st.Tracer.Close()
			return err
		}
	}
	tr := st.Tracer
	defer tr.Close()
	// Stopped: its threads write nothing more (a corrupt region stops
	// here; its pipeline sees it next).
	for range finalDrains {
		if n, _ := im.reg.Drain(m); n == 0 {
			break
		}
	}
	out := m.takeAll()
	st.Pending = im.reg.PeekPending()
	done := make(chan error, 1)
	c.sink.sendAfter(im.idx, out, func(s *heap.Session) []event.Event {
		if st.Process = s.Process(im.idx); st.Process == nil {
			err := errors.New("the process is not in the model")
			done <- err
			if kind != StopExit {
				return nil
			}
			return c.exitMissed(im, err.Error())
		}
		for _, a := range im.as {
			if err := a.Stopped(st); err != nil {
				done <- err
				return st.out
			}
		}
		done <- nil
		return st.out
	})
	err := <-done
	st.Process = nil // the sink's from now on
	for _, a := range im.as {
		if x, ok := a.(AfterStopper); ok {
			x.AfterStop(st)
		}
	}
	if err != nil {
		if kind == StopExit {
			return nil // recorded
		}
		return err
	}
	if during != nil && st.Held == nil {
		during(tr)
	}
	if after == nil {
		return nil
	}
	tr.Close()
	finished := make(chan struct{})
	c.sink.sendAfter(im.idx, nil, func(s *heap.Session) []event.Event {
		defer close(finished)
		if p := s.Process(im.idx); p != nil {
			p.Pending = pendingBlocks(p, st.Pending)
			defer func() { p.Pending = nil }()
		}
		after(s)
		return nil
	})
	<-finished
	return nil
}

// heldAlone returns, for a stop without ptrace of process pid held at its
// exit by a thread with stack pointer sp and thread pointer tp
// (region.HoldStack), a Tracer that only reads the process's memory and
// that thread's registers; nil, nil unless the thread is the process's
// only one (then nothing else runs in it: no stop is needed) and the
// memory can be read so.
func heldAlone(pid int32, sp, tp uint64) (*ptrace.Tracer, *unix.PtraceRegs) {
	if sp == 0 {
		return nil, nil
	}
	if n, err := ptrace.ThreadCount(int(pid)); err != nil || n != 1 {
		return nil, nil
	}
	tr := ptrace.Untraced(int(pid))
	var b [8]byte
	if _, err := tr.ReadMemory(sp, b[:]); err != nil {
		return nil, nil // not readable without ptrace (not our child under Yama, say)
	}
	return tr, &unix.PtraceRegs{Rsp: sp, Fs_base: tp}
}

// pendingBlocks returns the pending blocks the model does not know yet,
// by address.
func pendingBlocks(p *heap.Process, pending []region.PendingBlock) map[uint64]heap.Block {
	out := map[uint64]heap.Block{}
	for _, pb := range pending {
		if _, known := p.LiveBlock(pb.Addr); !known {
			out[pb.Addr] = heap.Block{Size: pb.Size, Time: pb.Time, Site: p.StackOf(pb.Stack), Fn: pb.Fn}
		}
	}
	return out
}
