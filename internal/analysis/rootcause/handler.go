package rootcause

import (
	"fmt"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/steptrace"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/region"
)

// Windows on the thread that handles a block later. When other threads
// free a suspect's blocks, the decision to free one or not is often made
// there (a completion thread that forgets to free timed-out entries),
// and every path on the allocating thread looks the same. So a *handler
// window* waits, on a thread other than the allocating one, at the entry
// of a function the free stacks call (found from the call instruction
// before each of their return addresses: a tail call leaves no frame of
// its own), and records that function's path from there to its return,
// taking each argument register as the block it may be about. The path is
// labelled later by that block's fate, as the allocating thread's paths
// are: F freed, E still live at the exit (or long after).
//
// Only branches whose flags were computed from data loaded out of that
// block count as decisions (steptrace's Event.Data): a thread that drops
// blocks at random, or every eighth one by a counter, decides on nothing
// the block holds, and however well such a branch predicts the fate, it
// is not a reason the block can be fixed for. So it gets no claim.

// maxHandlerEntries bounds the functions tried per site.
const maxHandlerEntries = 4

// handlerWait is how long a handler window waits for its thread to
// enter the function before it tries again later.
const handlerWait = 300 * time.Millisecond

// argRegs are the System V x86-64 integer argument registers, in order.
var argRegs = [...]string{"rdi", "rsi", "rdx", "rcx", "r8", "r9"}

// handlerSide is the handler windows of one suspect.
type handlerSide struct {
	entries []uint64 // outermost first
	entry   int      // the one tried now
	misses  int      // windows in a row its thread did not enter it
	size    uint64   // the site's blocks' size, as far as known
	threads []int32  // the process's threads when the site became a suspect
	next    int      // the thread to try next
	windows []hwindow
	time    time.Duration
	done    bool
	note    string
}

// hwindow is one handler path: its events as recorded (each branch with
// its Event.Data), the argument registers at the entry, and when.
type hwindow struct {
	events []steptrace.Event
	args   [len(argRegs)]uint64
	ticks  uint64
	wall   time.Time
}

// fate labels a handler window by the first argument that was one of
// site's blocks: k is its register, outcome F or E (0: not known yet, or
// no argument was such a block).
func (w hwindow) fate(p *heap.Process, site heap.StackID, ended bool, settle time.Duration) (k int, outcome steptrace.Outcome) {
	if p == nil || p.LastTime <= w.ticks {
		return 0, 0 // the model has not caught up with the window yet
	}
	for k, a := range w.args {
		if a == 0 {
			continue
		}
		if b, ok := p.LiveBlock(a); ok && b.Site == site && b.Time <= w.ticks {
			if ended || time.Since(w.wall) > settle {
				return k, steptrace.EndReached
			}
			return 0, 0
		}
		if _, ok := p.LastFree(a, site); ok {
			return k, steptrace.Freed
		}
	}
	return 0, 0
}

// decisions returns w's events about its block k: calls, returns, and
// the branches whose flags came from that block's data.
func (w hwindow) decisions(k int) []steptrace.Event {
	out := make([]steptrace.Event, 0, len(w.events))
	for _, e := range w.events {
		if e.Kind == steptrace.Branch {
			if e.Data&(1<<k) == 0 {
				continue
			}
			e.Data = 0
		}
		out = append(out, e)
	}
	return out
}

// newHandlerSide prepares the handler windows of site (with rc.mu held),
// or returns nil when no function of its free stacks can be found.
func (rc *rootCauses) newHandlerSide(p *heap.Process, site heap.StackID) *handlerSide {
	pid := int(rc.im.PID)
	if rc.boring == nil {
		rc.code, rc.boring = steptrace.NewCode(), boringCode(pid)
	}
	h := &handlerSide{}
	seen := map[uint64]bool{}
	for fs := range p.Site(site).FreeStacks() {
		frames := userFrames(p, fs)
		for i := len(frames) - 1; i >= 0; i-- {
			if to, ok := callTarget(pid, frames[i]); ok && !rc.boring(frames[i]) && !rc.boring(to) && !isStub(pid, to) && !seen[to] {
				seen[to] = true
				h.entries = append(h.entries, to)
			}
		}
	}
	if len(h.entries) == 0 {
		return nil
	}
	h.entries = h.entries[:min(len(h.entries), maxHandlerEntries)]
	s := p.Site(site)
	h.size = 1
	if s.LiveBlocks > 0 {
		h.size = max(1, (s.LiveBytes+s.LiveBlocks-1)/s.LiveBlocks)
	}
	for tid, t := range p.Threads {
		if t.Exit == 0 {
			h.threads = append(h.threads, tid)
		}
	}
	if len(h.threads) < 2 {
		return nil // no other thread to wait on
	}
	return h
}

// callTarget returns the function a direct call ending just before the
// return address ret calls.
func callTarget(pid int, ret uint64) (uint64, bool) {
	var b [5]byte
	if n, err := ptrace.ReadProcess(pid, ret-5, b[:]); err != nil || n != 5 || b[0] != 0xe8 {
		return 0, false
	}
	rel := int32(uint32(b[1]) | uint32(b[2])<<8 | uint32(b[3])<<16 | uint32(b[4])<<24)
	return ret + uint64(int64(rel)), true
}

// isStub reports a PLT stub (an indirect jump through memory, after
// endbr64 and bnd): the call goes into another module.
func isStub(pid int, addr uint64) bool {
	var b [8]byte
	if n, err := ptrace.ReadProcess(pid, addr, b[:]); err != nil || n != len(b) {
		return true
	}
	c := b[:]
	if c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa {
		c = c[4:]
	}
	if c[0] == 0xf2 {
		c = c[1:]
	}
	return c[0] == 0xff && c[1] == 0x25
}

// handlerDue returns a suspect whose handler windows go on (with rc.mu
// held), nil if none.
func (rc *rootCauses) handlerDue() *suspect {
	if rc.paced || rc.paused {
		return nil
	}
	for _, sus := range rc.sites {
		if h := sus.handler; h != nil && !h.done && sus.allocTID != 0 {
			return sus
		}
	}
	return nil
}

// handlerWindow waits on another thread than the allocating one for the
// entry of sus's handler function, and records its path.
func (rc *rootCauses) handlerWindow(reg *region.Region, sus *suspect) {
	o := rc.o
	rc.mu.Lock()
	h := sus.handler
	entry := h.entries[h.entry]
	var tid int32
	for range h.threads {
		tid = h.threads[h.next%len(h.threads)]
		h.next++
		if tid != sus.allocTID {
			break
		}
	}
	// No window on the allocating thread meanwhile: it would wait for
	// this one, which may wait for it.
	reg.ArmSuspects(nil)
	rc.mu.Unlock()
	stopRefusing := make(chan struct{})
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		for {
			select {
			case <-stopRefusing:
				return
			case <-time.After(time.Millisecond):
				if _, ok := reg.PendingTrace(); ok {
					reg.RefuseTrace()
				}
			}
		}
	}()
	defer func() {
		close(stopRefusing)
		<-refused
		rc.mu.Lock()
		rc.arm()
		rc.mu.Unlock()
	}()
	if tid == sus.allocTID {
		rc.handlerMiss(sus, "no thread but the allocating one")
		return
	}
	st, release, err := rc.attach(int(tid))
	if err != nil {
		rc.handlerMiss(sus, fmt.Sprintf("cannot attach to thread %d: %v", tid, err))
		return
	}
	defer release()
	wait := time.AfterFunc(handlerWait, st.Interrupt)
	opts := rc.stepOptions()
	opts.Deadline = time.Now().Add(handlerWait + o.WindowBudget)
	opts.Soft = true
	if hw, _ := ptrace.HardwareBreakpoints(); hw {
		opts.Soft = false
	} else if !ptrace.SoftBreakpoints() {
		wait.Stop()
		rc.handlerGiveUp(sus, "handler windows need breakpoints (hardware or int3)")
		return
	}
	var w hwindow
	var path *steptrace.Path
	var began time.Time
	entered := false
	err = st.Locked(func(t *ptrace.LockedStepper) {
		s, err := steptrace.RunTo(t, entry, 0, opts)
		wait.Stop()
		if err != nil || s.Regs.Rip != entry {
			return
		}
		entered = true
		w.args = [...]uint64{s.Regs.Rdi, s.Regs.Rsi, s.Regs.Rdx, s.Regs.Rcx, s.Regs.R8, s.Regs.R9}
		for _, a := range w.args {
			opts.Blocks = append(opts.Blocks, [2]uint64{a, a + h.size})
		}
		w.ticks, w.wall = rc.im.Now(), time.Now()
		watchdog := time.AfterFunc(o.WindowBudget+time.Second, st.Interrupt)
		defer watchdog.Stop()
		began = time.Now()
		opts.Deadline = began.Add(o.WindowBudget)
		path = steptrace.Record(t, opts)
	})
	if !entered {
		rc.handlerMiss(sus, "")
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h.misses = 0
	if err != nil || path == nil {
		return
	}
	spent := time.Since(began)
	rc.spent += spent
	h.time += spent
	sus.Stops += path.Stops
	if path.Outcome != steptrace.EndReached {
		return // only a path to the function's return is whole
	}
	w.events = path.Events
	if len(w.events) > 0 {
		w.events = w.events[:len(w.events)-1] // the return itself
	}
	h.windows = append(h.windows, w)
	sus.Last = time.Since(sus.since)
	if len(h.windows) >= 3*o.Windows || h.time > o.Budget {
		h.done = true
	}
}

// handlerMiss counts a handler window whose thread did not enter the
// function: after a few, the next function is tried, after all of them
// the handler side gives up.
func (rc *rootCauses) handlerMiss(sus *suspect, why string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	h := sus.handler
	h.misses++
	if h.misses < 2*len(h.threads) {
		return
	}
	h.misses = 0
	h.entry++
	if h.entry == len(h.entries) {
		h.done = true
		h.note = "no other thread entered a function of the free stacks"
		if why != "" {
			h.note += " (" + why + ")"
		}
	}
}

func (rc *rootCauses) handlerGiveUp(sus *suspect, why string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	sus.handler.done, sus.handler.note = true, why
}

// judgeHandler marks a handler side done once it has enough paths of
// each fate (with rc.mu held).
func (h *handlerSide) judge(p *heap.Process, site heap.StackID, o *Options) {
	if h.done {
		return
	}
	f, e := 0, 0
	for _, w := range h.windows {
		switch _, out := w.fate(p, site, false, o.Settle); out {
		case steptrace.Freed:
			f++
		case steptrace.EndReached:
			e++
		}
	}
	if f >= o.Enough && e >= o.Enough {
		h.done = true
	}
}

// handlerPaths returns the handler windows' paths, labelled by their
// blocks' fates (with rc.mu held).
func (h *handlerSide) paths(p *heap.Process, site heap.StackID, ended bool, settle time.Duration) *Paths {
	ps := NewPaths()
	for _, w := range h.windows {
		k, out := w.fate(p, site, ended, settle)
		if out != 0 {
			ps.Add(w.decisions(k), out)
		}
	}
	return ps
}

// withHandler answers for a site whose allocating thread's paths did not
// tell, from its handler paths: only a branch on the block's own data
// is claimed there.
func withHandler(rc *event.RootCauseInfo, st *SiteTrace) *event.RootCauseInfo {
	if rc.Status == event.RootCauseFound || st.Handler == nil || st.Handler.Len() == 0 {
		return rc
	}
	hr := Analyze(st.Handler, st.Frames)
	if hr.Status != event.RootCauseFound {
		if rc.Status != event.RootCauseNotTraced {
			rc.Note += fmt.Sprintf("; on the threads that free its blocks (%d executions, %d freed, %d leaked), no branch on the block's own data decides: %s",
				hr.Traced, hr.Freed, hr.Leaked, hr.Note)
		}
		return rc
	}
	hr.Note = "decided on the thread that frees the site's blocks, on the block's own data; " + hr.Note
	return hr
}
