package collect

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/inject"
	"github.com/leakpath/leakpath/internal/target/launch"
)

// opDetachScan is the pipeline's own request: scan the image before the
// detach (see Attach).
const opDetachScan = "detach-scan"

// AttachInfo is what an attach measured.
type AttachInfo struct {
	AttachPause, DetachPause time.Duration // every thread stopped (ptrace side)
	Thread                   int           // the thread that loaded the agent
	Restored                 int           // allocator slots given back at detach
	Detached                 bool          // the process ran on after the detach (else it ended)
}

// Attach records process pid, which runs already: it loads the agent into
// it (package inject) and records from then on, until ctx ends, SIGINT or
// SIGTERM arrives, `leakpath detach PID` asks (a "detach" control
// request), or the process ends. Then, if the process still runs, the
// live blocks are scanned (their kinds: definite leaks are found), the
// agent stops recording and gives the allocator back, and the process runs
// on. Result.Exited/Code/Signal are meaningful only when the process ended
// (info.Detached false).
func Attach(ctx context.Context, pid int, opts Options, o inject.Options) (*Result, *AttachInfo, error) {
	c := newCollector(opts)
	c.attached, c.detach, c.mainPID = true, make(chan struct{}), int32(pid)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, nil, fmt.Errorf("attach to pid %d: no such process", pid)
		}
		return nil, nil, fmt.Errorf("attach to pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	c.opts.Argv, _ = procArgs(int32(pid))
	sess, err := launch.NewAttachSession(pid, procUID(pid), opts.Agent, c.register, c.control)
	if err != nil {
		return nil, nil, err
	}
	c.sink.agentAs = [2]string{opts.Agent, opts.Agent}
	go c.sink.run()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	start := time.Now()
	info := &AttachInfo{}
	ir, err := inject.Attach(ctx, pid, opts.Agent, filepath.Join(sess.Dir, control.SocketName), o)
	if err != nil {
		sess.Close(false)
		c.sink.close()
		for _, e := range sess.Errors() {
			err = fmt.Errorf("%w; %v", err, e)
		}
		return nil, nil, err
	}
	info.AttachPause, info.Thread = ir.Pause, ir.Thread
	c.logf("attached to pid %d (paused %.3g ms); `leakpath detach %d` or an interrupt ends the recording", pid, ms(ir.Pause), pid)

	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	res := &Result{PID: pid, Start: start, Main: -1}
	stop := false
	for !stop {
		select {
		case <-ctx.Done():
			stop = true
		case <-sigs:
			stop = true
		case <-c.detach:
			stop = true
		case <-time.After(100 * time.Millisecond):
			if exited(pidfd) {
				stop = true
			}
		}
	}
	if !exited(pidfd) {
		// The kinds of what is live now, while every block is known,
		// and the detach in the same stop when a thread is at a safe
		// point then (else after it); then the pipeline drains.
		var dr *inject.Result
		var err error
		c.detachOpts = o
		if c.opts.Region.HoldExit { // --scan
			if resp := c.askPipeline(int32(pid), control.Request{Op: opDetachScan, PID: pid}); resp.Error != "" {
				c.warn("scan before detach: %s", resp.Error)
			}
			dr, err = c.detached, c.detachErr
		}
		if dr == nil && (err == nil || errors.Is(err, inject.ErrNoSafePoint)) {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			dr, err = inject.Detach(dctx, pid, o)
			cancel()
		}
		switch {
		case err == nil:
			info.DetachPause, info.Restored, info.Detached = dr.Pause, int(dr.Value), true
		case exited(pidfd):
		default:
			c.warn("detach: %v", err)
		}
		c.detachAll()
	}
	<-done
	res.Elapsed = time.Since(start)
	if c.wrapUp(sess, res, false) == 0 {
		c.warn("the agent in pid %d never registered: nothing was recorded", pid)
	}
	if p := res.Session.Process(uint32(max(res.Main, 0))); p != nil && p.End != nil && !p.End.Detached {
		res.Exited, res.Code, res.Signal = p.End.Exited, int(p.End.Code), syscall.Signal(p.End.Signal)
	}
	res.TicksPerSec = c.src.TicksPerSecond()
	res.Events = c.sink.events
	res.Warnings = c.warns
	return res, info, nil
}

// procUID is the uid pid runs as (its /proc directory's owner), or -1.
func procUID(pid int) int {
	var st syscall.Stat_t
	if syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st) != nil {
		return -1
	}
	return int(st.Uid)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stopAttach ends an Attach (a detach request).
func (c *collector) stopAttach() {
	c.detachMu.Do(func() { close(c.detach) })
}

// askPipeline hands a request to the pipeline of pid's current image.
func (c *collector) askPipeline(pid int32, req control.Request) control.Response {
	c.mu.Lock()
	im := c.current[pid]
	c.mu.Unlock()
	if im == nil {
		return control.Response{Error: fmt.Sprintf("pid %d is not recorded", pid)}
	}
	r := snapRequest{req: req, resp: make(chan control.Response, 1)}
	select {
	case im.snaps <- r:
		return <-r.resp
	case <-im.gone:
		return control.Response{Error: fmt.Sprintf("pid %d ended", pid)}
	}
}

// detachScan stops im before a detach, for the analyses (the kinds of
// the live blocks) and, with every thread still stopped, detaches
// (c.detached, c.detachErr).
func (c *collector) detachScan(im *image, m *merger) control.Response {
	// Still stopped: a detach now leaves no block unscanned.
	detach := func(tr *ptrace.Tracer) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.detached, c.detachErr = inject.DetachStopped(ctx, tr, int(im.pid), c.detachOpts)
	}
	if err := c.stop(im, m, StopDetach, nil, detach, nil); err != nil {
		return control.Response{Error: err.Error()}
	}
	return control.Response{}
}
