package collect

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/region"
)

// The collector knows no analysis: the analyses register with it
// (Options.Analyses) and it hands them each process image it records, and
// the image stopped, with every thread held and the model up to date,
// whenever it stops one (at its exit, for a snapshot, before a detach).
// The exit scan and types (internal/analysis/kinds), stale epochs
// (internal/analysis/stale) and root-cause windows
// (internal/analysis/rootcause) are such analyses; docs/design.md draws
// where the hook sits.

// Analysis is an analysis registered with the collector.
type Analysis interface {
	// Image is called when process image im registers and returns what
	// follows it (nil: nothing). It runs with the collector's lock held:
	// it must be quick and must not call back into the collector.
	Image(im *Image) ImageAnalysis
}

// ImageAnalysis follows one process image. Besides Stopped it may
// implement BeforeStopper, AfterStopper, Poller, Closer, ExitMisser and
// Finisher.
type ImageAnalysis interface {
	// Stopped runs with every thread of the image stopped and the model
	// synced (every record the rings held merged and applied), on the
	// goroutine that applies events, in the order the analyses were
	// registered. It must not change the model but through s.Emit. An
	// error ends the stop: the later analyses are not called, and a
	// snapshot gets the error; at the exit, nobody does (what the
	// analysis emitted says why).
	Stopped(s *Stopped) error
}

// BeforeStopper is told of a stop before it, on the image's pipeline, the
// process still running: to prepare what the stop should not wait for,
// or to get out of the tracer's way (a thread has one tracer at a time).
// The function it returns, if not nil, runs once the process runs again.
type BeforeStopper interface {
	BeforeStop(kind StopKind) (resume func())
}

// AfterStopper runs after every Stopped of a stop, on the image's
// pipeline, the process still stopped.
type AfterStopper interface {
	AfterStop(s *Stopped)
}

// Poller is called each time the image's pipeline looks at its rings
// (about each millisecond while the image runs, not during a stop); the
// events it returns are recorded.
type Poller interface {
	Poll() []event.Event
}

// Closer is told that the collector stops recording the image (it ended,
// or its region is corrupt), on its pipeline, before its region goes;
// the events it returns are recorded before the image's end.
type Closer interface {
	Close() []event.Event
}

// ExitMisser is told, on the image's pipeline, that the stop at the
// image's exit (region.Options.HoldExit) did not happen or failed, and
// why; the events it returns are recorded.
type ExitMisser interface {
	ExitMissed(why string) []event.Event
}

// Requester is an Analysis that answers the control requests of an
// operation of its own about an image (`leakpath root-cause PID` sends
// "root-cause"). A request that no analysis answers is refused as coming
// to a run started without the flag named as the operation.
type Requester interface {
	Op() string
	Request(im *Image, req control.Request) control.Response
}

// Ticker is an Analysis that looks at the model every Every() while the
// program runs, on the goroutine that applies events.
type Ticker interface {
	Every() time.Duration
	Tick(s *heap.Session)
}

// Finisher is an ImageAnalysis with events to add once the image's
// recording is over, after every event of every image (the root causes
// of a run); p is the image in the model, complete.
type Finisher interface {
	Finish(p *heap.Process) []event.Event
}

// Image is a recorded process image, as analyses see it.
type Image struct {
	PID  int32
	Proc uint32 // its index in the model (heap.Session.Process)
	c    *collector
	im   *image
}

// Region returns the image's shared region, nil once the collector let
// it go (the image ended). It may go any time after the call, except
// during a stop and on the image's pipeline.
func (i *Image) Region() *region.Region {
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	return i.im.reg
}

// Exited reports whether the image's process has exited.
func (i *Image) Exited() bool { return exited(i.im.pidfd) }

// Now is the collector's clock, the events' time base.
func (i *Image) Now() uint64 { return i.c.src.Now() }

// Started is when the collector started.
func (i *Image) Started() time.Time { return i.c.started }

// WithModel calls f with the image in the model (nil if it is not there)
// once the events its pipeline sent so far are applied, on the goroutine
// that applies events; it does not wait for that. f must be quick and
// must not change the model.
func (i *Image) WithModel(f func(p *heap.Process)) {
	i.c.sink.sendAfter(i.Proc, nil, func(s *heap.Session) []event.Event {
		f(s.Process(i.Proc))
		return nil
	})
}

// Warn adds a warning to the run's result.
func (i *Image) Warn(format string, args ...any) { i.c.warn(format, args...) }

// StopKind says why the collector stopped an image.
type StopKind int

const (
	// StopExit: the image waits at its exit (region.Options.HoldExit);
	// it exits once released.
	StopExit StopKind = iota
	// StopSnapshot: a snapshot (`leakpath snapshot`, or one the program
	// asked for); the process runs on.
	StopSnapshot
	// StopDetach: before an attach detaches; the process runs on,
	// unrecorded.
	StopDetach
)

// Caller is a thread's state where the program called the agent: the
// scan of that thread starts at the program's frame, not the agent's.
type Caller struct {
	TID      int    // the thread; 0: the one whose thread pointer is TP
	TP       uint64 // its thread pointer (fs base)
	SP       uint64
	RegsAddr uint64 // where the agent saved its callee-saved registers
}

// Stopped is an image the collector holds stopped with the model synced.
type Stopped struct {
	*Image
	Kind StopKind
	// Tracer reads the process's memory and threads: every thread
	// stopped (ptrace.Tracer.StopAll) unless Held is set.
	Tracer *ptrace.Tracer
	// Held, if not nil, is the registers of the process's only thread,
	// which the agent holds at its exit without a ptrace stop; Tracer
	// then only reads.
	Held *unix.PtraceRegs
	// Caller, if not nil, is where the program called the agent (a
	// snapshot it asked for, the exit hold).
	Caller *Caller
	// Process is the image in the model, up to date (during Stopped
	// only: the model belongs to the goroutine that applies events).
	Process *heap.Process
	// Pending are the allocations the threads keep pending, which the
	// model learns of only later.
	Pending []region.PendingBlock
	// Start is when the stop began: what the program waits is counted
	// from it.
	Start time.Time
	out   []event.Event
}

// Emit records events (the model and the trace get them after the
// stop's analyses, in the order emitted).
func (s *Stopped) Emit(evs ...event.Event) { s.out = append(s.out, evs...) }
