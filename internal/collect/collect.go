// Package collect runs a program under the agent and turns what its
// process images record into the heap model (and, optionally, a trace):
// one pipeline per image drains its rings and merges them in time order;
// one sink applies the merged events to the model and the trace, keeping a
// fork child after its parent's fork. It runs no analysis: analyses
// register with it and get each image stopped, with the model synced
// (hook.go).
package collect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/clock"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/inject"
	"github.com/leakpath/leakpath/internal/target/launch"
	"github.com/leakpath/leakpath/internal/target/region"
)

// TraceWriter receives every event the model receives, in the same order.
type TraceWriter interface {
	Write(evs []event.Event) error
	Flush() error
}

// Options say what to run and how to record it.
type Options struct {
	Argv       []string
	Agent      string // the agent library (see launch.FindAgent)
	Region     region.Options
	FollowFork bool        // record fork children (exec'd images are always recorded)
	Trace      TraceWriter // nil: no trace
	Stdin      io.Reader   // nil: the collector's own stdin, passed as is
	Stdout     io.Writer
	Stderr     io.Writer
	Env        []string // nil: the collector's environment
	// Logf reports noteworthy things while running (nil: silent).
	Logf func(format string, args ...any)
	// Warm is told, once each, of the modules recorded stacks go through,
	// so that their symbols can load while the program runs. It must not
	// block. nil: not told.
	Warm func(m *event.Module)
	// Observer, when not nil, follows the model as events are applied
	// (heap.Session.Observer): on the goroutine that applies them, so it
	// must be quick.
	Observer heap.Observer
	// Snapshot, when not nil, answers `leakpath snapshot` (package
	// control): after the scan of image proc it is called, on the
	// goroutine that applies events, with the model as the scan left it.
	// The process runs meanwhile; its events wait. nil: snapshots are
	// refused.
	Snapshot func(s *heap.Session, proc uint32, req control.Request) control.Response
	// Asked, when not nil, is told of each snapshot or leak check the
	// program asked for itself (leakpath_snapshot, leakpath_leak_check),
	// with what Snapshot answered (its Error when it failed), on the
	// image's pipeline after the asking thread got its answer. The
	// requests are served (by Snapshot) whether or not Asked is set.
	Asked func(pid int32, req control.Request, resp control.Response)
	// Analyses follow each image and get it stopped at its exit, for
	// snapshots and before a detach (hook.go), in this order.
	Analyses []Analysis
	// Signals, when not nil, are the signals caught for Run (from
	// CatchSignals, called early); nil: Run catches them itself.
	Signals *Signals
	// MemoryLimit bounds the collector's live heap, in bytes: past it,
	// recording stops (budget.go). 0: DefaultMemoryLimit.
	MemoryLimit uint64
}

// Result is what a run produced.
type Result struct {
	Session *heap.Session
	Main    int32 // index of the main program's last image; -1 if it never registered
	PID     int
	Exited  bool // the program exited (else a signal killed it)
	Code    int
	Signal  syscall.Signal
	Start   time.Time
	Elapsed time.Duration
	// TicksPerSec converts event times to seconds.
	TicksPerSec float64
	Warnings    []string
	Events      int64
	// ChildUser and ChildSys are the CPU time the program itself used
	// (the main process and the children it waited for).
	ChildUser, ChildSys time.Duration
	// NoAgent: no image of the program ever registered (it did not load
	// the agent: statically linked, setuid, LD_PRELOAD removed), so
	// nothing was measured.
	NoAgent bool
}

// ExitCode is the code leakpath exits with to mirror the program: its own
// exit code, or 128+signal.
func (r *Result) ExitCode() int {
	if r.Exited {
		return r.Code
	}
	return 128 + int(r.Signal)
}

// StartError is a program that could not be started at all.
type StartError struct {
	Argv []string
	Err  error
	Code int // the exit code a shell would use: 127 not found, 126 not executable
}

func (e *StartError) Error() string {
	return fmt.Sprintf("cannot run %s: %v", e.Argv[0], e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// image is one recorded process image.
type image struct {
	idx     uint32
	pid     int32
	reg     *region.Region
	pidfd   int
	start   event.Event
	execd   chan struct{} // closed when a newer image of the same pid registered
	snaps   chan snapRequest
	gone    chan struct{} // closed when its pipeline ended
	once    sync.Once
	outcome *event.ProcessInfo // set by the collector for the main pid
	scanned bool               // its exit hold was taken (owned by its pipeline)
	img     *Image             // the analyses' view of it
	as      []ImageAnalysis    // the analyses that follow it
	pollers []Poller
}

type collector struct {
	opts        Options
	src         *clock.Source
	sink        *sink
	mu          sync.Mutex
	images      []*image
	current     map[int32]*image // pid → latest image
	mainPID     int32
	wg          sync.WaitGroup
	pipelines   atomic.Int32 // running (in wg)
	keepers     atomic.Int32 // pipelines asleep that kept their processor
	spare       spareRegion
	warnMu      sync.Mutex
	warns       []string
	mainEnd     chan *event.ProcessInfo
	mainOutcome *event.ProcessInfo
	// clocked: the regions whose clock tickClock renews (under mu), while
	// clockStop is open.
	clocked   map[*region.Region]struct{}
	clockStop chan struct{}
	started   time.Time
	// attached: recording a process that was running already (Attach);
	// detach is closed when it is to stop.
	attached bool
	detach   chan struct{}
	detachMu sync.Once
	// gaveUp: Run stopped recording the program while it runs (a second
	// SIGINT or SIGTERM); overBudget: the collector passed its memory
	// limit. Both under mu.
	gaveUp, overBudget bool
	budget             *budget
	// Of Attach's detach, set by detachScan.
	detachOpts inject.Options
	detached   *inject.Result
	detachErr  error
}

// Run runs opts.Argv to completion (and every recorded descendant) and
// returns the model. The program's stdio, environment (but LD_PRELOAD),
// file descriptors, signals and exit status are its own.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if len(opts.Argv) == 0 {
		return nil, errors.New("no program to run")
	}
	// Signals meant for the program: the terminal's reach it directly
	// (same process group); others sent to leakpath are passed on.
	sg := opts.Signals
	if sg == nil {
		sg = CatchSignals()
	}
	defer sg.Stop()
	sigs := sg.c
	go probeStart()
	c := newCollector(opts)
	sess, err := launch.NewSession(opts.Agent, c.register, c.control)
	if err != nil {
		return nil, err
	}
	c.sink.agentAs = [2]string{sess.Agent, opts.Agent}
	go c.sink.run() // after its settings: no registration comes before the program starts
	c.spare.take()  // the first one's region, made while the program starts
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	cmd := exec.Command(opts.Argv[0], opts.Argv[1:]...)
	cmd.Env = sess.Env(env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = opts.Stdin, opts.Stdout, opts.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	<-sg.caught // before the program can be sent one

	start := time.Now()
	c.mu.Lock()
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		sess.Close(false)
		c.spare.close()
		c.sink.close()
		return nil, startError(opts.Argv, err)
	}
	c.mainPID = int32(cmd.Process.Pid)
	c.mu.Unlock()

	waited := make(chan waitResult, 1)
	go func() { waited <- waitExit(cmd.Process.Pid) }()

	// A first SIGINT or SIGTERM is the program's; a second one while it
	// runs stops the recording and leaves it running.
	var state waitResult
	stops, interrupted := 0, false
	var interruptedAt time.Time
	var gaveUp os.Signal
wait:
	for {
		select {
		case state = <-waited:
			break wait
		case s := <-sigs:
			switch s {
			case syscall.SIGINT, syscall.SIGQUIT:
				// The program got it from the terminal too.
			default:
				cmd.Process.Signal(s)
			}
			if isStop(s) {
				if stops++; stops > 1 {
					gaveUp = s
					break wait
				}
			}
		case <-ctx.Done():
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	res := &Result{PID: cmd.Process.Pid, Start: start, Main: -1}
	if gaveUp != nil {
		// Its end is not known: leakpath ends as that signal would end it.
		res.Signal = gaveUp.(syscall.Signal)
		c.logf("stopping the recording; %s runs on (pid %d)", opts.Argv[0], res.PID)
		c.mu.Lock()
		c.gaveUp = true
		c.mu.Unlock()
		c.mainEnd <- &event.ProcessInfo{Detached: true}
		interrupted, interruptedAt = true, time.Now()
		c.detachAll()
	} else {
		res.ChildUser, res.ChildSys = time.Duration(state.ru.Utime.Nano()), time.Duration(state.ru.Stime.Nano())
		if ws := state.ws; ws.Signaled() {
			res.Signal = syscall.Signal(ws.Signal())
		} else {
			res.Exited, res.Code = true, ws.ExitStatus()
		}
		c.mainEnd <- &event.ProcessInfo{Exited: res.Exited, Code: int32(res.Code), Signal: int32(res.Signal)}
		c.ringPipelines()
	}

	// Wait for every recorded image to end and drain, descendants that
	// outlive the program included, unless interrupted: then for the
	// pipelines to stop, unless interrupted again.
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	noted := false
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(2 * time.Second):
			if !noted {
				if interrupted {
					c.logf("waiting for the recording to stop; interrupt again to end at once, without a report")
				} else {
					c.logf("waiting for %d recorded process(es) still running; interrupt to stop", c.running())
				}
				noted = true
			}
		case s := <-sigs:
			if !isStop(s) && s != syscall.SIGQUIT {
				continue
			}
			if interrupted {
				// One sent with the one that interrupted (mpiexec, a
				// user's double Ctrl-C) lets the recording stop.
				if time.Since(interruptedAt) < time.Second {
					continue
				}
				return nil, &InterruptedError{Signal: s.(syscall.Signal), Code: res.ExitCode()}
			}
			interrupted, interruptedAt, noted = true, time.Now(), false
			c.detachAll()
		}
	}
	res.Elapsed = time.Since(start)
	if c.wrapUp(sess, res, interrupted) == 0 {
		res.NoAgent = true
		c.warn("%s did not load leakpath's agent (statically linked? setuid? LD_PRELOAD removed?); nothing was recorded", opts.Argv[0])
	}
	res.TicksPerSec = c.src.TicksPerSecond()
	res.Events = c.sink.events
	res.Warnings = c.warns
	return res, nil
}

// isStop reports whether s asks leakpath to stop (SIGINT, SIGTERM).
func isStop(s os.Signal) bool { return s == syscall.SIGINT || s == syscall.SIGTERM }

// InterruptedError is a run interrupted twice while leakpath waited for
// its recording to stop: it ended without a report.
type InterruptedError struct {
	Signal syscall.Signal
	Code   int // the exit code leakpath mirrors: the program's, when it ended
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("interrupted (%v) while the recording stopped: no report", e.Signal)
}

// Signals are the signals Run passes on to the program (SIGINT, SIGQUIT,
// SIGTERM, SIGHUP, SIGUSR1, SIGUSR2), caught from CatchSignals on.
type Signals struct {
	c      chan os.Signal
	caught chan struct{}
}

// CatchSignals starts catching the signals Run passes on, on another
// goroutine: the runtime enables each on a thread of its own and waits for
// it, 2-5 ms on some virtual machines, which the caller's setup can use
// meanwhile (Options.Signals).
func CatchSignals() *Signals {
	s := &Signals{c: make(chan os.Signal, 8), caught: make(chan struct{})}
	go func() {
		signal.Notify(s.c, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
		close(s.caught)
	}()
	return s
}

// Stop stops catching them.
func (s *Signals) Stop() {
	<-s.caught
	signal.Stop(s.c)
}

// probeStart has the os package probe its process-starting features
// (pidfd support: it clones a child that exits at once) while the session
// is set up, not when the program starts.
func probeStart() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		p.Release()
	}
}

// wrapUp ends the session and the sink once every pipeline has ended,
// and fills in res's model and main image; it returns how many images
// registered.
func (c *collector) wrapUp(sess *launch.Session, res *Result, keepLink bool) int {
	c.mu.Lock()
	if m := c.current[c.mainPID]; m != nil {
		res.Main = int32(m.idx)
	}
	n := len(c.images)
	c.mu.Unlock()
	sess.Close(keepLink)
	c.spare.close() // no registration comes any more
	for _, e := range sess.Errors() {
		c.warn("%v", e)
	}
	c.finishAnalyses()
	c.sink.close()
	if err := c.sink.err; err != nil {
		c.warn("trace: %v", err)
	}
	res.Session = c.sink.model
	return n
}

// newCollector makes a collector with its sink (not started yet).
func newCollector(opts Options) *collector {
	c := &collector{
		opts:    opts,
		src:     clock.NewSource(clock.UseTSC()),
		current: map[int32]*image{},
		clocked: map[*region.Region]struct{}{},
		mainEnd: make(chan *event.ProcessInfo, 1),
		started: time.Now(),
	}
	c.opts.Region.ClockTSC = c.src.TSC()
	c.spare.opts = c.opts.Region
	c.sink = newSink(heap.NewSession(), opts.Trace)
	c.budget = newBudget(opts.MemoryLimit)
	c.sink.budget = c.checkBudget
	c.sink.warm = opts.Warm
	c.sink.model.Observer = opts.Observer
	for _, a := range opts.Analyses {
		if t, ok := a.(Ticker); ok {
			c.sink.tickers = append(c.sink.tickers, &ticker{Ticker: t, every: t.Every()})
		}
	}
	return c
}

// finishAnalyses records what the Finishers add once every pipeline
// ended, after every other event.
func (c *collector) finishAnalyses() {
	for _, im := range c.images {
		var fs []Finisher
		for _, a := range im.as {
			if f, ok := a.(Finisher); ok {
				fs = append(fs, f)
			}
		}
		if len(fs) == 0 {
			continue
		}
		c.sink.sendAfter(im.idx, nil, func(s *heap.Session) []event.Event {
			var out []event.Event
			p := s.Process(im.idx)
			for _, f := range fs {
				out = append(out, f.Finish(p)...)
			}
			return out
		})
	}
}

func startError(argv []string, err error) error {
	code := 126
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		code = 127
	}
	return &StartError{Argv: argv, Err: err, Code: code}
}

func (c *collector) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *collector) warn(format string, args ...any) {
	c.warnMu.Lock()
	c.warns = append(c.warns, fmt.Sprintf(format, args...))
	c.warnMu.Unlock()
}

func (c *collector) running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, im := range c.images {
		if im.reg != nil {
			n++
		}
	}
	return n
}

// detachAll stops recording in every image still running.
func (c *collector) detachAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, im := range c.images {
		im.once.Do(func() { close(im.execd) })
	}
	c.ringPipelinesLocked()
}

// ringPipelines wakes every pipeline waiting for records, to look now at
// what is not in the rings: that the program ended (otherwise seen at
// the end of the pipeline's wait, up to a millisecond later).
func (c *collector) ringPipelines() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ringPipelinesLocked()
}

func (c *collector) ringPipelinesLocked() {
	for _, im := range c.images {
		if im.reg != nil {
			im.reg.Ring()
		}
	}
}

// register is called by the session for each agent that registers.
func (c *collector) register(h launch.Hello) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.overBudget {
		return -1, errors.New("not recorded: the collector passed its memory limit")
	}
	info := event.ProcessInfo{PID: h.PID, PPID: h.PPID, ParentProc: -1, ExecOf: -1}
	// A fork child of an attached process starts with its parent's
	// unknown blocks too; an exec'd image starts afresh.
	info.Attached = c.attached && (h.PID == c.mainPID || h.ForkID != 0)
	if h.ForkID != 0 {
		if !c.opts.FollowFork {
			return -1, errors.New("fork child not recorded (--follow-fork=false)")
		}
		if p := c.current[h.ParentPID]; p != nil {
			info.ParentProc, info.ForkID = int32(p.idx), h.ForkID
		}
	}
	if old := c.current[h.PID]; old != nil {
		// A new image in a known process: the old one exec'd.
		info.ExecOf = int32(old.idx)
		old.once.Do(func() { close(old.execd) })
	}
	idx := uint32(len(c.images))
	info.Index = idx
	info.Argv, info.Exe = procArgs(h.PID)
	reg := c.spare.take()
	if reg == nil {
		var err error
		if reg, err = region.Prepare(c.opts.Region); err != nil {
			return -1, fmt.Errorf("pid %d: %w", h.PID, err)
		}
	}
	reg.Assign(h.PID, idx)
	pidfd, err := unix.PidfdOpen(int(h.PID), 0)
	if err != nil {
		reg.Close()
		return -1, fmt.Errorf("pidfd_open %d: %w", h.PID, err)
	}
	ticks := c.src.Now()
	c.clock(reg, true)
	reg.SetNow(ticks)
	im := &image{idx: idx, pid: h.PID, reg: reg, pidfd: pidfd, execd: make(chan struct{}),
		snaps: make(chan snapRequest), gone: make(chan struct{})}
	im.img = &Image{PID: h.PID, Proc: idx, c: c, im: im}
	for _, a := range c.opts.Analyses {
		if ia := a.Image(im.img); ia != nil {
			im.as = append(im.as, ia)
			if p, ok := ia.(Poller); ok {
				im.pollers = append(im.pollers, p)
			}
		}
	}
	im.start = event.Event{Kind: event.ProcessStart, Proc: idx, Time: ticks, X: &event.Extra{Process: &info,
		Clock: &event.ClockInfo{Ticks: ticks, Mono: clock.Mono(), Real: clock.Real(), TicksPerSec: c.src.TicksPerSecond()}}}
	c.images = append(c.images, im)
	c.current[h.PID] = im
	c.wg.Add(1)
	c.pipelines.Add(1)
	go c.pipeline(im)
	return reg.FD(), nil
}

// clock adds region r to those whose clock tickClock renews, or removes
// it; the ticking runs while there are any. Under c.mu.
func (c *collector) clock(r *region.Region, add bool) {
	if add {
		c.clocked[r] = struct{}{}
		if c.clockStop == nil {
			c.clockStop = make(chan struct{})
			go c.tickClock(c.clockStop)
		}
		return
	}
	delete(c.clocked, r)
	if len(c.clocked) == 0 && c.clockStop != nil {
		close(c.clockStop)
		c.clockStop = nil
	}
}

// tickClock sets the clock of every region in c.clocked every
// clockFallback (region.SetNow) until stop closes. Each pipeline sets its
// region's clock every time it looks at the rings (at least each
// millisecond): this is for one busy elsewhere (a snapshot, a sink that
// makes it wait), so that the time the agent gives the allocations it
// keeps pending stays that close. (A millisecond ticker of its own woke
// the collector's threads twice as often as the pipelines do, and they
// preempted the program now and then on a machine with few cores.)
func (c *collector) tickClock(stop <-chan struct{}) {
	t := time.NewTicker(clockFallback)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		now := c.src.Now() // after the lock: register may hold it a while
		for r := range c.clocked {
			r.SetNow(now)
		}
		c.mu.Unlock()
	}
}

func procArgs(pid int32) (argv []string, exe string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/cmdline")
	if err == nil {
		argv = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	}
	exe, _ = os.Readlink("/proc/" + strconv.Itoa(int(pid)) + "/exe")
	return argv, exe
}

// clockFallback is how often tickClock sets the regions' clocks.
const clockFallback = 10 * time.Millisecond

// lateness is how long a record may take from its timestamp to being
// visible in its ring; events younger than that wait before merging.
const lateness = 2 * time.Millisecond

// pipeline drains one image's rings until the image is gone.
func (c *collector) pipeline(im *image) {
	defer c.wg.Done()
	defer c.pipelines.Add(-1)
	defer close(im.gone)
	defer unix.Close(im.pidfd)
	c.sink.send(im.idx, []event.Event{im.start})
	if c.opts.Region.HoldExit {
		ptrace.Prewarm() // for the scan at its exit
	}
	tps := c.src.TicksPerSecond()
	if tps <= 0 {
		tps = 1e9
	}
	lag := uint64(lateness.Seconds() * tps)
	ahead := uint64(aheadLimit.Seconds() * tps)
	m := c.newMerger(im)
	// Events of several rings are copied a lateness after they could
	// be: the sink gets fewer, fuller batches.
	m.age = lag
	lastReclaim, lastEndCheck := time.Now(), time.Now()
	more := false // the last take stopped at its budget
	procs := runtime.GOMAXPROCS(0)
	for {
		now := c.src.Now()
		im.reg.SetNow(now) // for the allocations the agent keeps pending
		n := 0             // events drained
		if !more || m.n < maxPending {
			n, _ = im.reg.Drain(&m) // a corrupt region is seen below
		}
		if m.latest > now+ahead {
			// Such events would wait in the merger for ever.
			im.reg.Fail(fmt.Sprintf("an event at %.0f s from now", float64(m.latest-now)/tps))
		}
		var upto uint64
		if now > lag {
			upto = now - lag
		}
		more = m.takeSome(upto, false, takeBudget)
		m.sendOut()
		if bad := im.reg.Corrupt(); bad != nil {
			c.abandon(im, &m, bad)
			return
		}
		for _, p := range im.pollers {
			if evs := p.Poll(); len(evs) > 0 {
				m.addPolled(evs)
			}
		}
		if time.Since(lastReclaim) > 100*time.Millisecond {
			im.reg.Reclaim(func(tid int32) bool { return region.ThreadAlive(im.pid, tid) }, func(ring int) {
				q := m.Buffer(ring)
				from := len(*q)
				*q = im.reg.Leftovers(ring, c.src.Now(), *q)
				m.Filled(ring, from)
			})
			lastReclaim = time.Now()
		}
		if c.opts.Region.HoldExit && im.reg.HoldRequested() {
			c.holdExit(im, &m)
		}
		if im.reg.AskRequested() {
			c.serveAsk(im, &m)
		}
		select {
		case r := <-im.snaps:
			if r.req.Op == opDetachScan {
				r.resp <- c.detachScan(im, &m)
			} else {
				r.resp <- c.snapshot(im, &m, r.req, nil)
			}
		default:
		}
		if bad := im.reg.Corrupt(); bad != nil {
			c.abandon(im, &m, bad)
			return
		}
		// Rings that never run dry (written by another process that
		// maps the region) must not keep the image from ending; while
		// events come, the end is looked for every endCheck.
		if (n > 0 || more) && time.Since(lastEndCheck) < endCheck {
			continue
		}
		lastEndCheck = time.Now()
		if ended := c.ended(im); ended != nil {
			c.finish(im, &m, ended)
			return
		}
		if !more {
			c.sleep(im, procs)
		}
	}
}

// sleep waits for im's rings (region.Wait); procs: the Go runtime's
// processors. Pipelines keep theirs while they sleep, all but one (the
// collector's other goroutines have that one): a processor given up in a
// sleep was taken by the runtime's monitor when none was idle, and each
// take set the monitor polling every 20 us again, on cores the program
// needed (a shell and its program: two pipelines, one asleep).
func (c *collector) sleep(im *image, procs int) {
	keep := c.takeKeep(procs)
	if keep {
		// What became runnable on this processor runs first: it has
		// no other until the pipeline wakes.
		runtime.Gosched()
	}
	im.reg.Wait(time.Millisecond, keep)
	if keep {
		c.keepers.Add(-1)
	}
}

// takeKeep reports whether a pipeline about to sleep may keep its
// processor, counting it in keepers if so (the caller takes it out when
// it wakes): while fewer than procs-1 do.
func (c *collector) takeKeep(procs int) bool {
	if c.keepers.Add(1) < int32(procs) {
		return true
	}
	c.keepers.Add(-1)
	return false
}

// takeBudget is how many events a pipeline applies between drains of its
// rings: about 0.1 ms of the model's work, while a busy thread fills its
// ring in about 0.6 ms. Applying every event due at once (a few
// milliseconds of them when the collector is behind) left the program
// waiting for ring space meanwhile.
const takeBudget = batchEvents

// maxPending bounds the events a pipeline keeps decoded (64 bytes each)
// while it has events due to apply: past it, it leaves the rest in the
// rings, whose threads wait for space.
const maxPending = 1 << 16

// aheadLimit is how far ahead of the collector's clock an event's time may
// be: the agent dates its records with the same clock, just before they
// are published.
const aheadLimit = 10 * time.Second

// endCheck is how often a pipeline whose rings always have more looks
// whether its image ended.
const endCheck = 50 * time.Millisecond

// finalDrains bounds the rounds of draining after an image ended: its own
// threads wrote everything already, and nothing else may keep it going.
const finalDrains = 16

// finish ends the pipeline of an image that ended: it drains what is left
// in the rings and the fold areas, and sends the image's end.
func (c *collector) finish(im *image, m *merger, ended *event.ProcessInfo) {
	// Gone: whatever it wrote is in the rings now.
	for range finalDrains {
		if n, _ := im.reg.Drain(m); n == 0 {
			break
		}
	}
	if bad := im.reg.Corrupt(); bad != nil {
		c.abandon(im, m, bad)
		return
	}
	// What its threads left pending or folded and not yet written.
	now := c.src.Now()
	for ring := range im.reg.SlotsUsed() {
		q := m.Buffer(ring)
		from := len(*q)
		*q = im.reg.Leftovers(ring, now, *q)
		m.Filled(ring, from)
	}
	out := append(m.takeAll(), c.closeAnalyses(im)...)
	if c.opts.Region.HoldExit && !im.scanned && !ended.ExecdOut && !ended.Detached {
		// Every image that ends is stopped at its exit, or says why not.
		out = append(out, c.exitMissed(im, noExitScan(ended))...)
	}
	if lost := im.reg.Lost(); lost > 0 {
		c.warn("pid %d: the agent lost %d records", im.pid, lost)
	}
	c.closeRegion(im)
	out = append(out, event.Event{Kind: event.ProcessEnd, Proc: im.idx, Time: c.src.Now(), X: &event.Extra{Process: ended}})
	c.sink.send(im.idx, out)
}

// closeRegion unmaps an image's region, under c.mu: ringPipelines finds
// it mapped, or nil.
func (c *collector) closeRegion(im *image) {
	c.mu.Lock()
	c.clock(im.reg, false)
	im.reg.Detach()
	im.reg.Close()
	im.reg = nil
	c.mu.Unlock()
}

// abandon stops recording an image whose region is corrupt: it warns,
// tells the agent nobody reads its rings any more, sends what was decoded
// before, then waits for the image to end (reading nothing more from the
// region) and sends its end. The image's model keeps what was recorded
// until then.
func (c *collector) abandon(im *image, m *merger, bad *region.CorruptError) {
	c.warn("pid %d: %v; recording of this image stopped at %.3f s", im.pid, bad, time.Since(c.started).Seconds())
	closing := c.closeAnalyses(im)
	im.reg.Detach()
	if out := append(m.takeAll(), closing...); len(out) > 0 {
		c.sink.send(im.idx, out)
	}
	var ended *event.ProcessInfo
	for ended = c.ended(im); ended == nil; ended = c.ended(im) {
		select {
		case r := <-im.snaps:
			r.resp <- control.Response{Error: fmt.Sprintf("pid %d: not recorded any more: %v", im.pid, bad)}
		case <-im.execd:
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.closeRegion(im)
	c.sink.send(im.idx, []event.Event{{Kind: event.ProcessEnd, Proc: im.idx, Time: c.src.Now(), X: &event.Extra{Process: ended}}})
}

// closeAnalyses tells the Closers that the collector stops recording im.
func (c *collector) closeAnalyses(im *image) []event.Event {
	var out []event.Event
	for _, a := range im.as {
		if x, ok := a.(Closer); ok {
			out = append(out, x.Close()...)
		}
	}
	return out
}

// noExitScan says why an image that ended had no scan at its exit.
func noExitScan(p *event.ProcessInfo) string {
	if !p.Exited && p.Signal != 0 {
		return fmt.Sprintf("killed by %s: no exit hook ran to hold the process for it", unix.SignalName(syscall.Signal(p.Signal)))
	}
	return "the process did not wait for it at its exit (no exit hook ran, or the collector answered too late)"
}

// snapRequest is a snapshot request on its way to an image's pipeline.
type snapRequest struct {
	req  control.Request
	resp chan control.Response // buffered: the pipeline never waits on it
}

// control answers a control request (launch.Controller).
func (c *collector) control(req control.Request) control.Response {
	switch {
	case req.Op == "detach" && c.attached:
		if req.PID != int(c.mainPID) {
			return control.Response{Error: fmt.Sprintf("this leakpath attach records pid %d, not %d", c.mainPID, req.PID)}
		}
		c.stopAttach()
		return control.Response{Text: fmt.Sprintf("leakpath: detaching from pid %d\n", req.PID)}
	case req.Op == "detach":
		return control.Response{Error: fmt.Sprintf("unknown control request %q", req.Op)}
	case req.Op == "snapshot" && c.opts.Snapshot == nil:
		return control.Response{Error: "this leakpath run takes no snapshots"}
	}
	var asked Requester
	if req.Op != "snapshot" {
		for _, a := range c.opts.Analyses {
			if r, ok := a.(Requester); ok && r.Op() == req.Op {
				asked = r
			}
		}
		if asked == nil {
			return control.Response{Error: fmt.Sprintf("this leakpath run was started without --%s", req.Op)}
		}
	}
	c.mu.Lock()
	im := c.current[int32(req.PID)]
	c.mu.Unlock()
	if im == nil {
		return control.Response{Error: fmt.Sprintf("pid %d is not recorded by this leakpath run", req.PID)}
	}
	if asked != nil {
		return asked.Request(im.img, req)
	}
	r := snapRequest{req: req, resp: make(chan control.Response, 1)}
	select {
	case im.snaps <- r:
		return <-r.resp
	case <-im.gone:
		return control.Response{Error: fmt.Sprintf("pid %d ended before its snapshot", req.PID)}
	}
}

// newMerger returns a merger for image im's rings, whose batches go to
// the sink.
func (c *collector) newMerger(im *image) merger {
	return merger{agent: &c.sink.agentAs, fresh: c.sink.buffer, free: func(evs []event.Event) { c.sink.recycle(evs, true) },
		send: func(evs []event.Event, plain bool) { c.sink.sendDirect(batch{proc: im.idx, evs: evs, plain: plain}) }}
}

// ended returns how the image ended, or nil while it runs.
func (c *collector) ended(im *image) *event.ProcessInfo {
	select {
	case <-im.execd:
		c.mu.Lock()
		replaced := c.current[im.pid] != im
		gaveUp := c.gaveUp || c.overBudget
		c.mu.Unlock()
		info := *im.start.ProcessInfo()
		if replaced {
			info.ExecdOut = true
			return &info
		}
		// An image that exited says how, even if it was to stop being
		// recorded (a SIGINT to leakpath and the program at once).
		if !exited(im.pidfd) {
			info.Detached = c.attached || gaveUp
			return &info
		}
	default:
		if !exited(im.pidfd) {
			return nil
		}
	}
	info := *im.start.ProcessInfo()
	if im.pid == c.mainPID && !c.attached {
		// The collector reaps the program itself: take its status.
		c.mu.Lock()
		if c.mainOutcome == nil {
			c.mu.Unlock()
			o := <-c.mainEnd
			c.mu.Lock()
			c.mainOutcome = o
		}
		o := c.mainOutcome
		c.mu.Unlock()
		info.Exited, info.Code, info.Signal, info.Detached = o.Exited, o.Code, o.Signal, o.Detached
		return &info
	}
	info.Exited, info.Code, info.Signal = zombieStatus(im.pid)
	return &info
}

// waitResult is how the program ended.
type waitResult struct {
	ws unix.WaitStatus
	ru unix.Rusage
}

// waitExit reaps the program. A wait on a child also reports its
// ptrace-stops when this process traces it (the scan at exit does), and
// the tracer would wait for a stop already reported: so it waits for the
// child's exit on a pidfd first, then reaps it. Stops a wait still
// consumes (no pidfd) are handed to a Stepper, or noticed by the tracer
// itself (ptrace.Tracer adopts stops another waiter consumed).
func waitExit(pid int) waitResult {
	if pidfd, err := unix.PidfdOpen(pid, 0); err == nil {
		pollExit(pidfd, -1) // if it fails, the wait below waits
		unix.Close(pidfd)
	}
	for {
		var r waitResult
		_, err := unix.Wait4(pid, &r.ws, unix.WALL, &r.ru)
		if err == nil && r.ws.Stopped() {
			// A root-cause window's stepped thread: its Stepper takes
			// the stop back.
			handStolen(pid, r.ws)
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Not ours to reap any more: say it exited with 0 rather
			// than hang.
			return waitResult{}
		}
		return r
	}
}

// handStolen hands a stop that waitExit consumed to its Stepper.
var handStolen = ptrace.Stolen

// exited reports whether the process behind pidfd has exited.
func exited(pidfd int) bool { return pollExit(pidfd, 0) }

// pollExit waits up to timeout milliseconds (-1: for ever) for the process
// behind pidfd to exit, and reports whether it has.
func pollExit(pidfd, timeout int) bool {
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if err == unix.EINTR {
			continue // the Go runtime's preemption signal
		}
		return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	}
}

// zombieStatus reads a dead child's wait status from /proc while it is a
// zombie (best effort: its parent may have reaped it already).
func zombieStatus(pid int32) (exited bool, code, sig int32) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return false, 0, 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	// Field 52 of stat; f[0] is field 3.
	if len(f) < 50 {
		return false, 0, 0
	}
	v, err := strconv.Atoi(f[49])
	if err != nil {
		return false, 0, 0
	}
	ws := syscall.WaitStatus(v)
	if ws.Signaled() {
		return false, 0, int32(ws.Signal())
	}
	return true, int32(ws.ExitStatus()), 0
}
