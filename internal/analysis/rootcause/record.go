package rootcause

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/procmaps"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/region"
)

// Root cause, the recording half (JP2009-217617), an analysis of the
// collector (Recorder, a collect.Analysis): it judges the allocation
// sites in the model now and then; a site some of whose blocks
// were freed but whose live blocks keep growing becomes a suspect, armed
// in the agent. A thread that allocates at a suspect asks for a window: a
// goroutine of the image attaches to that thread alone, runs it to the
// allocation's return address and records its path (steptrace) until the
// block is freed, the thread returns out of the end point (the innermost
// function the allocation shares with the frees seen, at most
// maxEndDepth frames up), it comes back to the allocation (a loop's next
// iteration), or the window's budget is spent. The path is not judged by
// where it ended but by its block's fate, later: freed (F), or still live
// when the program ends, or long after at a snapshot (E). So frees far
// away or on other threads, a main that never returns and exceptions all
// resolve. Once the program ended, the paths are analysed (Analyze) into a
// RootCause event per site; a snapshot gets those with an answer so far.

// Options configure the recording of root causes.
type Options struct {
	Enabled bool
	// After: judge sites only this long after the start.
	After time.Duration
	// OnRequest: judge the sites of a process only once asked to (a
	// control request "root-cause"), After counted from then.
	OnRequest bool
	// Every: how often sites are judged (default 200 ms).
	Every time.Duration
	// Growth: a suspect's live blocks grew at each of the last Rounds
	// judgements, by Growth blocks in all (defaults 3 and 3).
	Growth, Rounds int
	// MaxSites: suspects armed at once (default 4).
	MaxSites int
	// Budget: time in windows per site (default 10 s, 30 s where
	// hardware breakpoints do not fire); Windows: paths per
	// site (default 80); Enough: a site is done with this many paths of
	// each outcome, or this many E paths once every free stack was met
	// (default 10).
	Budget          time.Duration
	Windows, Enough int
	// MaxSlowdown: windows are paced so that the traced threads spend
	// at most MaxSlowdown-1 of the time since the first suspect in them
	// (default 1.25): the program's slowdown, whatever a window costs.
	MaxSlowdown float64
	// Settle: a window's block still live this long after it was
	// allocated counts as leaked before the program ends (default 1 s).
	Settle           time.Duration
	WindowBudget     time.Duration // per path (default 2 s)
	WindowStopsLimit int           // per path (default 500,000)
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Growth, 3)
	def(&o.Rounds, 3)
	def(&o.MaxSites, 4)
	def(&o.Windows, 80)
	def(&o.Enough, 10)
	def(&o.WindowStopsLimit, 500000)
	if o.Every <= 0 {
		o.Every = 200 * time.Millisecond
	}
	if o.Budget <= 0 {
		o.Budget = 10 * time.Second
		if hw, _ := ptrace.HardwareBreakpoints(); !hw && !ptrace.SoftBreakpoints() {
			o.Budget = 30 * time.Second // stepping every instruction
		}
	}
	if o.WindowBudget <= 0 {
		o.WindowBudget = 2 * time.Second
	}
	if o.Settle <= 0 {
		o.Settle = time.Second
	}
	if o.MaxSlowdown <= 1 {
		o.MaxSlowdown = 1.25
	}
}

// maxEndDepth bounds how far above the allocating function a window goes
// on: the decision is near the allocation, and a window open until main
// returns would never end.
const maxEndDepth = 2

// SiteTrace is what was recorded for one suspect site.
type SiteTrace struct {
	Site    heap.StackID
	AgentID uint32 // one of the agent's ids of the site's stack
	// Frames: the allocation stack's return addresses, innermost first,
	// the agent's own frames left out: Frames[0] is in the allocating
	// function, where paths begin.
	Frames   []uint64
	EndDepth int // frames above the allocating function: where a window ends
	// Paths: the recorded paths, closed by F or E, as a grammar (each
	// distinct path stored once). While recording, every path not freed
	// in its window is stored as E; traces labels it by its block's fate.
	Paths *Paths
	// Handler: the paths of the handler windows (handler.go), closed by
	// their blocks' fates, only the branches on the block's own data
	// kept; nil without them.
	Handler *Paths
	Note    string // why recording stopped early, if it did
	// Cost: the time the windows took in all, and their ptrace stops;
	// Last: when the last path ended, since the site became a suspect
	// (how long its answer took).
	WindowTime time.Duration
	Stops      int
	Last       time.Duration
}

// suspect is a site being recorded.
type suspect struct {
	SiteTrace
	agentIDs []uint32
	ret      uint64    // the allocation's return address
	frames   int       // user frames of the allocation stack
	since    time.Time // when the site became a suspect
	windows  []window  // the paths recorded, in order
	done     bool
	allocTID int32        // the thread of the last window
	handler  *handlerSide // other threads free the blocks: handler windows
}

// window is one recorded path: its index in Paths, its outcome (Freed,
// or how the window ended before the block's fate was known) and its
// block.
type window struct {
	path    int
	outcome steptrace.Outcome
	blk     eBlock
}

// fate labels a window by what became of its block in p (the image
// now): F freed, E leaked (live when the image ended, or for longer than
// settle), or 0 not known yet.
func (w window) fate(p *heap.Process, ended bool, settle time.Duration) steptrace.Outcome {
	if w.outcome == steptrace.Freed {
		return steptrace.Freed
	}
	if p == nil {
		return 0
	}
	if b, ok := p.LiveBlock(w.blk.addr); !ok || b.Time > w.blk.ticks {
		// Freed since (or replaced by a newer block).
		if p.LastTime > w.blk.ticks {
			return steptrace.Freed
		}
		return 0 // its records may still be on their way
	}
	if ended || time.Since(w.blk.wall) > settle {
		return steptrace.EndReached
	}
	return 0
}

// fates counts a suspect's windows by fate so far.
func (sus *suspect) fates(p *heap.Process, settle time.Duration) (f, e int) {
	for _, w := range sus.windows {
		switch w.fate(p, false, settle) {
		case steptrace.Freed:
			f++
		case steptrace.EndReached:
			e++
		}
	}
	return f, e
}

// eBlock is the block of an E path: allocated before ticks (the
// collector's clock) and wall.
type eBlock struct {
	addr, ticks uint64
	wall        time.Time
}

// Recorder records root causes in every image (collect.Analysis).
type Recorder struct {
	o    Options
	mu   sync.Mutex
	imgs map[*collect.Image]*rootCauses
	all  []*rootCauses // in the order the images registered
}

// NewRecorder returns the recording, to register with the collector
// (collect.Options.Analyses) after the scan: a snapshot shows the root
// causes found so far if the scan succeeded. It probes the hardware
// breakpoints now, not with a thread of the program held.
func NewRecorder(o Options) *Recorder {
	o.defaults()
	return &Recorder{o: o, imgs: map[*collect.Image]*rootCauses{}}
}

// Image starts the recording of an image (collect.Analysis).
func (r *Recorder) Image(im *collect.Image) collect.ImageAnalysis {
	rc := &rootCauses{o: &r.o, im: im, sites: map[heap.StackID]*suspect{}, byAgent: map[uint32]*suspect{},
		history: map[heap.StackID][]uint64{}, start: time.Now(), quit: make(chan struct{})}
	r.mu.Lock()
	r.imgs[im] = rc
	r.all = append(r.all, rc)
	r.mu.Unlock()
	return rc
}

// Op is the control request Request answers (collect.Requester).
func (r *Recorder) Op() string { return "root-cause" }

// Request starts the judging of an image's sites (`leakpath root-cause
// PID`, with OnRequest) and describes it (collect.Requester).
func (r *Recorder) Request(im *collect.Image, _ control.Request) control.Response {
	r.mu.Lock()
	rc := r.imgs[im]
	r.mu.Unlock()
	if rc == nil {
		return control.Response{Error: fmt.Sprintf("pid %d is not recorded by this leakpath run", im.PID)}
	}
	return control.Response{Text: rc.request() + "\n"}
}

// Every is how often the sites are judged (collect.Ticker).
func (r *Recorder) Every() time.Duration { return r.o.Every }

// rootCauses is one image's recording.
type rootCauses struct {
	o       *Options
	im      *collect.Image
	mu      sync.Mutex
	sites   map[heap.StackID]*suspect
	byAgent map[uint32]*suspect
	history map[heap.StackID][]uint64
	armed   []uint32
	start   time.Time // of the run, or of the request
	// requested: asked for (with OnRequest), then being judged.
	requested bool
	stepping  *ptrace.Stepper // the window in progress
	code      *steptrace.Code // the image's code, decoded
	vdso      *steptrace.Vdso // its vDSO, stepped past without breakpoints
	boring    func(uint64) bool
	paused    bool // by pause: no window, the agent's table empty
	// paced: the suspects are disarmed until the windows' time is back
	// within MaxSlowdown (see overBudget); spent: the time of all
	// windows; paceFrom: when the first suspect was armed.
	paced, pacedEver bool
	spent            time.Duration
	paceFrom         time.Time
	closed           bool          // by quiesce: the region is not to be touched again
	running          bool          // serve runs
	quit             chan struct{} // closed by pause
	served           chan struct{} // closed when serve returns
}

// request starts the judging of im's sites (OnRequest) and describes it.
func (rc *rootCauses) request() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.requested || !rc.o.OnRequest {
		n := 0
		for _, sus := range rc.sites {
			if !sus.done {
				n++
			}
		}
		return fmt.Sprintf("root-cause tracing of pid %d was already on: %d sites traced so far, %d still recording", rc.im.PID, len(rc.sites), n)
	}
	rc.requested, rc.start = true, time.Now()
	return fmt.Sprintf("root-cause tracing of pid %d started: its growing sites are traced from now on, and their root causes reported when it ends", rc.im.PID)
}

// Tick judges every site of every running image (collect.Ticker: on the
// goroutine that applies events, with the model up to date as far as it
// goes).
func (r *Recorder) Tick(s *heap.Session) {
	o := &r.o
	r.mu.Lock()
	all := append([]*rootCauses(nil), r.all...)
	r.mu.Unlock()
	for _, rc := range all {
		if rc.im.Region() == nil {
			continue
		}
		p := s.Process(rc.im.Proc)
		if p == nil || p.End != nil {
			continue
		}
		rc.mu.Lock()
		wait := o.OnRequest && !rc.requested || time.Since(rc.start) < o.After
		rc.mu.Unlock()
		if wait {
			continue
		}
		rc.judge(p)
	}
}

func (rc *rootCauses) judge(p *heap.Process) {
	o := rc.o
	rc.mu.Lock()
	defer rc.mu.Unlock()
	changed := false
	for _, sus := range rc.sites {
		if sus.handler != nil {
			sus.handler.judge(p, sus.Site, o)
		}
		if f, e := sus.fates(p, o.Settle); !sus.done && f >= o.Enough && e >= o.Enough {
			// Enough of each fate: the site is done.
			sus.done, changed = true, true
		}
		windows := 3 * o.Windows
		if !sus.done && (len(sus.windows) >= windows || sus.WindowTime > o.Budget) {
			sus.done, changed = true, true
			if sus.Note == "" && len(sus.windows) < windows {
				sus.Note = "time budget spent"
				if hw, _ := ptrace.HardwareBreakpoints(); !hw && !ptrace.SoftBreakpoints() {
					sus.Note += " (hardware breakpoints do not fire on this machine: every instruction was stepped, signal handlers too)"
				}
			}
		}
	}
	active := 0
	for _, sus := range rc.sites {
		if !sus.done {
			active++
		}
	}
	for id := 1; id < p.NumSites(); id++ {
		site := p.Site(heap.StackID(id))
		if site == nil || site.Frees == 0 || site.LiveBlocks == 0 {
			continue
		}
		sid := heap.StackID(id)
		h := append(rc.history[sid], site.LiveBlocks)
		if len(h) > o.Rounds+1 {
			h = h[len(h)-o.Rounds-1:]
		}
		rc.history[sid] = h
		if _, known := rc.sites[sid]; known || active >= o.MaxSites || len(h) <= o.Rounds {
			continue
		}
		grew := true
		for i := 1; i < len(h); i++ {
			grew = grew && h[i] > h[i-1]
		}
		if !grew || h[len(h)-1]-h[0] < uint64(o.Growth) {
			continue
		}
		if sus := rc.newSuspect(p, sid); sus != nil {
			if rc.paceFrom.IsZero() {
				rc.paceFrom = time.Now()
			}
			rc.sites[sid] = sus
			for _, a := range sus.agentIDs {
				rc.byAgent[a] = sus
			}
			active++
			changed = true
		}
	}
	if changed {
		rc.arm()
	}
}

// newSuspect prepares the recording of site: its end point from the
// stacks of the frees seen.
func (rc *rootCauses) newSuspect(p *heap.Process, site heap.StackID) *suspect {
	alloc := userFrames(p, site)
	if len(alloc) == 0 {
		return nil
	}
	var frees [][]uint64
	for fs := range p.Site(site).FreeStacks() {
		frees = append(frees, userFrames(p, fs))
	}
	sus := &suspect{SiteTrace: SiteTrace{Site: site, Frames: alloc, EndDepth: min(endDepth(alloc, frees), maxEndDepth)},
		agentIDs: p.AgentIDs(site, 8), ret: alloc[0], frames: len(alloc), since: time.Now()}
	if sus.EndDepth < 0 {
		// Freed by other threads: a path ends when the allocating
		// function returns, and the decision may be made there.
		sus.EndDepth = 0
		sus.handler = rc.newHandlerSide(p, site)
	}
	if len(sus.agentIDs) == 0 {
		return nil
	}
	sus.AgentID = sus.agentIDs[0]
	return sus
}

// userFrames returns a stack's return addresses without the agent's own
// frames at its top.
func userFrames(p *heap.Process, id heap.StackID) []uint64 {
	frames := p.Stacks.Frames(id)
	mods := p.Stacks.Modules(id)
	for len(frames) > 0 {
		mi := mods[0]
		if mi < 0 || int(mi) >= len(p.Modules) || !strings.HasPrefix(filepath.Base(p.Modules[mi].Path), "libleakpath") {
			break
		}
		frames, mods = frames[1:], mods[1:]
	}
	return frames
}

// endDepth returns how many frames above the allocating function the end
// point is: the innermost function the allocation stack shares with every
// free stack. Two stacks share the frames that are equal from the root
// in, and the function called from the last equal one (the same call
// site calls the same function). With no free stack, the allocating
// function itself; -1 when a free stack shares nothing (another thread
// frees the site's blocks).
func endDepth(alloc []uint64, frees [][]uint64) int {
	depth := 0
	for _, f := range frees {
		i, j := len(alloc)-1, len(f)-1
		for i >= 0 && j >= 0 && alloc[i] == f[j] {
			i--
			j--
		}
		// alloc[i+1:] are shared frames; the function containing alloc[i]
		// (if any) was called from the shared alloc[i+1]: shared too.
		if i+1 == len(alloc) {
			return -1 // not even the root is shared
		}
		depth = max(depth, i, 0)
	}
	return depth
}

// arm writes the suspects still recording into the agent's table (with
// rc.mu held).
func (rc *rootCauses) arm() {
	if rc.paused {
		return
	}
	var ids []uint32
	for _, sus := range rc.sites {
		if !sus.done {
			ids = append(ids, sus.agentIDs...)
		}
	}
	rc.armed = ids
	reg := rc.im.Region()
	if reg == nil {
		return
	}
	if rc.paced {
		reg.ArmSuspects(nil) // serve arms them when the pace allows
	} else {
		reg.ArmSuspects(ids)
	}
	if len(ids) > 0 && !rc.running {
		rc.running = true
		rc.served = make(chan struct{})
		go rc.serve(reg, rc.quit, rc.served)
	}
}

// serve answers the image's window requests until it ends.
func (rc *rootCauses) serve(reg *region.Region, quit <-chan struct{}, served chan<- struct{}) {
	defer close(served)
	for {
		select {
		case <-quit:
			return
		case <-time.After(time.Millisecond):
		}
		rc.pace(reg)
		req, ok := reg.PendingTrace()
		if !ok {
			rc.mu.Lock()
			sus := rc.handlerDue()
			rc.mu.Unlock()
			if sus != nil {
				rc.handlerWindow(reg, sus)
			}
			continue
		}
		rc.mu.Lock()
		sus := rc.byAgent[req.Stack]
		if sus == nil || sus.done {
			rc.mu.Unlock()
			reg.RefuseTrace()
			continue
		}
		rc.mu.Unlock()
		rc.window(reg, sus, req)
	}
}

// overBudget reports windows that took more than their share of the
// time since the first suspect (with rc.mu held).
func (rc *rootCauses) overBudget() bool {
	if rc.paceFrom.IsZero() {
		return false
	}
	share := rc.o.MaxSlowdown - 1
	return rc.spent > paceBurst+time.Duration(share*float64(time.Since(rc.paceFrom)))
}

// paceBurst is the windows' time allowed beyond their share: one slow
// window (a loaded machine) must not stop a short run's recording.
const paceBurst = 250 * time.Millisecond

// pace disarms the suspects while the windows are over their share of
// the time, and arms them again once they are not: a thread that
// allocates at a suspect meanwhile does not even ask.
func (rc *rootCauses) pace(reg *region.Region) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if over := rc.overBudget(); over != rc.paced && !rc.paused {
		rc.paced = over
		if over {
			rc.pacedEver = true
			reg.ArmSuspects(nil)
		} else {
			reg.ArmSuspects(rc.armed)
		}
	}
}

// window records one path of sus on the thread that asked.
func (rc *rootCauses) window(reg *region.Region, sus *suspect, req region.TraceRequest) {
	o := rc.o
	t0 := time.Now()
	defer func() {
		rc.mu.Lock()
		rc.spent += time.Since(t0)
		rc.mu.Unlock()
	}()
	pid := int(rc.im.PID)
	// The next window starts a few allocations later, at random: a
	// site's blocks may differ by their place in a batch.
	defer func() { reg.EndTrace(uint32(rand.IntN(16))) }()
	st, release, err := rc.attach(int(req.TID))
	if err != nil {
		reg.RefuseTrace()
		rc.giveUp(sus, fmt.Sprintf("cannot attach to thread %d: %v", req.TID, err))
		return
	}
	defer release()
	rc.mu.Lock()
	sus.allocTID = req.TID
	rc.mu.Unlock()
	watchdog := time.AfterFunc(o.WindowBudget+time.Second, st.Interrupt)
	defer watchdog.Stop()
	reg.Watch(req.Addr)
	if !reg.TakeTrace() {
		return
	}
	if rc.code == nil {
		rc.code, rc.boring = steptrace.NewCode(), boringCode(pid)
	}
	hw, _ := ptrace.HardwareBreakpoints()
	soft := !hw && ptrace.SoftBreakpoints()
	opts := rc.stepOptions()
	if !hw && !soft && rc.vdso == nil {
		rc.vdso, _ = steptrace.FindVdso(pid, opts.Read)
	}
	opts.EndDepth = sus.EndDepth
	opts.Freed = reg.WatchFreed
	opts.Deadline = time.Now().Add(o.WindowBudget)
	opts.StepOnly = !hw && !soft
	opts.Soft = soft
	opts.Vdso = rc.vdso
	opts.StopAt = sus.ret
	var path *steptrace.Path
	var began time.Time
	// On the stepper's own thread: no hand-over between threads per stop.
	err = st.Locked(func(t *ptrace.LockedStepper) {
		// Out of the agent, back where the allocation was made.
		if s, err := steptrace.RunTo(t, sus.ret, 0, opts); err != nil || s.Regs.Rip != sus.ret {
			return
		}
		began = time.Now()
		path = steptrace.Record(t, opts)
	})
	if err != nil || path == nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	sus.WindowTime += time.Since(began)
	sus.Stops += path.Stops
	if path.Outcome == steptrace.Gone || len(path.Events) == 0 && path.Outcome != steptrace.Freed {
		return // the thread went away, or nothing was recorded
	}
	blk := eBlock{addr: req.Addr, ticks: rc.im.Now(), wall: time.Now()}
	if sus.Paths == nil {
		sus.Paths = NewPaths()
	}
	// The exit out of the end point closes an ended path: it says only
	// where the window ended, not what became of the block.
	evs := path.Events
	if path.Ended && len(evs) > 0 {
		evs = evs[:len(evs)-1]
	}
	stored := steptrace.EndReached // until its block's fate is known
	if path.Outcome == steptrace.Freed {
		stored = steptrace.Freed
	}
	sus.windows = append(sus.windows, window{sus.Paths.Add(evs, stored), path.Outcome, blk})
	sus.Last = time.Since(sus.since)
	if len(sus.windows) >= 3*o.Windows {
		sus.done = true
		rc.arm()
	}
}

// attach seizes thread tid of the image for a window, as the thread that
// pause interrupts; release clears that and detaches.
func (rc *rootCauses) attach(tid int) (st *ptrace.Stepper, release func(), err error) {
	st, err = ptrace.SeizeThread(int(rc.im.PID), tid)
	if err != nil {
		return nil, nil, err
	}
	rc.mu.Lock()
	rc.stepping = st
	rc.mu.Unlock()
	return st, func() {
		rc.mu.Lock()
		rc.stepping = nil
		rc.mu.Unlock()
		st.Detach()
	}, nil
}

// stepOptions returns the steptrace options every window shares: the
// image's memory, its boring code and code cache, the stops limit.
func (rc *rootCauses) stepOptions() steptrace.Options {
	pid := int(rc.im.PID)
	return steptrace.Options{
		Read:     func(addr uint64, b []byte) (int, error) { return ptrace.ReadProcess(pid, addr, b) },
		Boring:   rc.boring,
		Code:     rc.code,
		MaxStops: rc.o.WindowStopsLimit,
		Caught:   func(sig int) bool { return ptrace.Caught(pid, sig) },
	}
}

func (rc *rootCauses) giveUp(sus *suspect, why string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	sus.done, sus.Note = true, why
	rc.arm()
}

// Close ends root-cause recording in the image for good, before its
// region goes: the agent's table disarmed, the window in progress
// interrupted, the serving goroutine gone (collect.Closer).
func (rc *rootCauses) Close() []event.Event {
	rc.pause()
	rc.mu.Lock()
	rc.closed = true
	rc.mu.Unlock()
	return nil
}

// BeforeStop pauses the recording for a stop: a thread has one tracer at
// a time, so no window during it; a snapshot's program goes on, and so
// do its windows (collect.BeforeStopper).
func (rc *rootCauses) BeforeStop(kind collect.StopKind) func() {
	if rc.pause() && kind != collect.StopExit {
		return rc.resume
	}
	return nil
}

// Stopped gives a snapshot the root causes found so far, those the end
// replaces (collect.ImageAnalysis).
func (rc *rootCauses) Stopped(st *collect.Stopped) error {
	if st.Kind != collect.StopExit {
		st.Emit(rootCauseEvents(st.Proc, rc.traces(st.Process, false), true)...)
	}
	return nil
}

// Finish analyses the paths recorded once the image's recording is over:
// a RootCause event per site (collect.Finisher).
func (rc *rootCauses) Finish(p *heap.Process) []event.Event {
	return rootCauseEvents(rc.im.Proc, rc.traces(p, true), false)
}

// pause stops root-cause recording until resume (a thread has one tracer
// at a time: a scan must not meet a window). It reports whether it
// paused (false: paused already).
func (rc *rootCauses) pause() bool {
	rc.mu.Lock()
	if rc.paused {
		rc.mu.Unlock()
		return false
	}
	if rc.running {
		if reg := rc.im.Region(); reg != nil {
			reg.ArmSuspects(nil)
		}
	}
	rc.paused = true
	st, served, running, quit := rc.stepping, rc.served, rc.running, rc.quit
	rc.mu.Unlock()
	close(quit)
	if st != nil {
		st.Interrupt()
	}
	if running {
		<-served
	}
	rc.mu.Lock()
	rc.running = false
	rc.mu.Unlock()
	return true
}

// resume lets recording go on after pause, unless quiesce ended it.
func (rc *rootCauses) resume() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.closed || !rc.paused {
		return
	}
	rc.paused = false
	rc.quit = make(chan struct{})
	rc.arm()
}

// traces returns what was recorded, by site, p being the image now, each
// path labelled by its block's fate (see window.fate); a path whose fate
// is not known yet is left out. ended: the image ended (a site still
// recording says it had too few paths).
func (rc *rootCauses) traces(p *heap.Process, ended bool) map[heap.StackID]*SiteTrace {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[heap.StackID]*SiteTrace{}
	for id, sus := range rc.sites {
		st := sus.SiteTrace
		st.Paths = NewPaths()
		if sus.Paths != nil {
			for _, w := range sus.windows {
				outcome := w.fate(p, ended, rc.o.Settle)
				if outcome == 0 {
					continue
				}
				evs, _, _ := sus.Paths.Path(w.path)
				st.Paths.Add(evs, outcome)
			}
		}
		if h := sus.handler; h != nil {
			st.Handler = h.paths(p, id, ended, rc.o.Settle)
			if h.note != "" && st.Note == "" {
				st.Note = h.note
			}
		}
		if !sus.done && st.Note == "" && ended {
			st.Note = "the program ended before enough paths were recorded"
			if rc.pacedEver {
				st.Note += fmt.Sprintf(" (windows were paced to keep the program within %.3gx its time)", rc.o.MaxSlowdown)
			}
		}
		out[id] = &st
	}
	return out
}

// rootCauseEvents returns the events of one image's sites, in site order;
// with foundOnly, only of the sites with an answer.
func rootCauseEvents(idx uint32, sites map[heap.StackID]*SiteTrace, foundOnly bool) []event.Event {
	ids := make([]heap.StackID, 0, len(sites))
	for site := range sites {
		ids = append(ids, site)
	}
	slices.Sort(ids)
	var out []event.Event
	for _, site := range ids {
		st := sites[site]
		info := analyze(st)
		if foundOnly && info.Status != event.RootCauseFound {
			continue
		}
		out = append(out, event.Event{Kind: event.RootCause, Proc: idx, Stack: st.AgentID,
			X: &event.Extra{RootCause: info}})
	}
	return out
}

// analyze answers for one site from its recorded paths, with what the
// recording cost.
func analyze(st *SiteTrace) *event.RootCauseInfo {
	rc := withHandler(Analyze(st.Paths, st.Frames), st)
	switch {
	case st.Note == "":
	case rc.Status == event.RootCauseFound && rc.Note != "":
		rc.Note += "; " + st.Note
	default:
		rc.Note = st.Note
	}
	rc.WindowNs, rc.Stops, rc.FoundAfterNs = uint64(st.WindowTime), uint64(st.Stops), uint64(st.Last)
	return rc
}

// boringCode returns the test of code a path runs through: the C runtime,
// the dynamic loader, leakpath's agent, the C++ runtime, anything not
// from a file (the vdso), by /proc/PID/maps.
func boringCode(pid int) func(uint64) bool {
	type span struct {
		lo, hi uint64
		boring bool
	}
	var spans []span
	if b, err := procmaps.Read(pid); err == nil {
		for _, m := range procmaps.Parse(b) {
			if strings.Contains(m.Perms, "x") {
				spans = append(spans, span{m.Lo, m.Hi, boringModule(m.Path)})
			}
		}
	}
	return func(addr uint64) bool {
		for _, s := range spans {
			if addr >= s.lo && addr < s.hi {
				return s.boring
			}
		}
		return true // unknown code: not the program's
	}
}

// boringModule reports the modules whose code cannot be why a program's
// block is not freed.
func boringModule(path string) bool {
	if !strings.HasPrefix(path, "/") {
		return true
	}
	base := filepath.Base(path)
	for _, p := range []string{"libc.so", "libc-", "ld-linux", "ld.so", "libpthread", "libleakpath", "libstdc++", "libgcc_s", "libm.so", "libdl"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}
