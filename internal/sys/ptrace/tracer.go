package ptrace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Tracer controls one process. All ptrace requests run on one goroutine
// locked to its OS thread (the kernel accepts them only from the thread
// that attached); the exported methods hand them to it and wait. Methods
// may be called from any goroutine; requests are served one at a time.
// Memory reads run on the caller's goroutine.
//
// Between Seize (or ResumeAll) and StopAll the process runs; the Tracer
// serves its ptrace-stops in the background (re-injecting signals, letting
// new threads go). Between StopAll and ResumeAll no thread of the process
// runs.
type Tracer struct {
	pid     int
	isChild bool // the process is a child of this process: its exit is never reaped here

	reqs   chan func()
	quit   chan struct{} // closed by Close
	done   chan struct{} // closed when the goroutine has returned
	exited chan struct{} // closed when the process is seen gone

	quitOnce sync.Once

	// Owned by the locked goroutine.
	threads   map[int]*thread
	running   bool // the threads should run (false between StopAll and ResumeAll)
	detached  bool
	sigchld   chan os.Signal
	tracerTid int
	lastCheck time.Time

	// Shared with the other goroutines.
	gone       atomic.Bool
	mu         sync.Mutex
	exitErr    error // wraps ErrExited once gone
	exitStatus unix.WaitStatus
	exitKnown  bool
	execs      int
	memFile    *os.File
	memKey     [2]int       // execs and tid when memFile was opened
	memTid     atomic.Int64 // a live thread whose address space memory calls use
}

// threadState is where a traced thread is, as far as the Tracer knows.
type threadState uint8

const (
	// running: resumed (or just attached); a stop may be reported at any time.
	running threadState = iota
	// stopped: in a ptrace-stop whose report was consumed; see kind.
	stopped
	// listening: group-stopped and restarted with PTRACE_LISTEN: it does
	// not run, and reports again on SIGCONT or PTRACE_INTERRUPT.
	listening
	// exiting: past its PTRACE_EVENT_EXIT stop (or the leader, a zombie):
	// it runs no more user code; its exit is still to be reaped.
	exiting
	// untraced: the leader, already a zombie when seized (the main thread
	// called pthread_exit). Only an execve by another thread revives it.
	untraced
)

// stopKind says how a stopped thread must be resumed.
type stopKind uint8

const (
	stopEvent  stopKind = iota // PTRACE_EVENT_* or an interrupt: PTRACE_CONT with no signal
	stopSignal                 // signal-delivery-stop: PTRACE_CONT with that signal
	stopGroup                  // group-stop: PTRACE_LISTEN, so that it stays stopped
)

type thread struct {
	tid   int
	state threadState
	kind  stopKind
	sig   int // the signal of a signal-delivery-stop or group-stop
}

// Seize attaches to every thread of process pid with PTRACE_SEIZE (listing
// /proc/PID/task until no new thread shows up), with options that make new
// threads traced automatically and report thread exits and execve. The
// process keeps running. It fails with an *Error wrapping ErrNoProcess,
// ErrZombie, ErrTraced or unix.EPERM (with the reason: another tracer,
// kernel.yama.ptrace_scope, not root).
func Seize(pid int) (*Tracer, error) {
	fail := func(err error) (*Tracer, error) { return nil, &Error{Op: "seize", Pid: pid, Err: err} }
	if pid <= 0 {
		return fail(fmt.Errorf("%w: invalid pid %d", ErrNoProcess, pid))
	}
	st, err := ProcStatus(pid, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fail(ErrNoProcess)
		}
		return fail(err)
	}
	if tgid := statusInt(st, "Tgid"); tgid != pid {
		return fail(fmt.Errorf("%w: %d is a thread of process %d, not a process", ErrNoProcess, pid, tgid))
	}
	if pid == os.Getpid() {
		return fail(fmt.Errorf("%w: a process cannot trace itself", unix.EPERM))
	}
	if s := st["State"]; (s != "" && (s[0] == 'Z' || s[0] == 'X')) && statusInt(st, "Threads") <= 1 {
		return fail(fmt.Errorf("%w (exited; parent pid %d has not reaped it)", ErrZombie, statusInt(st, "PPid")))
	}
	t := &Tracer{
		pid:     pid,
		isChild: statusInt(st, "PPid") == os.Getpid(),
		reqs:    make(chan func()),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
		threads: map[int]*thread{},
		running: true,
		sigchld: make(chan os.Signal, 1),
	}
	t.memTid.Store(int64(pid))
	started := make(chan error, 1)
	select {
	case jobs := <-spare:
		jobs <- func() { t.loop(started) }
	default:
		go t.run(started)
	}
	if err := <-started; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

// Untraced returns a Tracer of process pid that traces no thread, for a
// process that holds still by other means (its only thread waits for the
// caller): its memory reads work (ReadMemory, ReadRanges), every call
// that needs a traced thread fails with ErrClosed, and Threads is empty.
func Untraced(pid int) *Tracer {
	t := &Tracer{pid: pid, quit: make(chan struct{}), done: make(chan struct{}), exited: make(chan struct{}),
		threads: map[int]*thread{}}
	t.memTid.Store(int64(pid))
	close(t.done)
	return t
}

// Pid returns the traced process's id.
func (t *Tracer) Pid() int { return t.pid }

// run starts loop on a goroutine locked to an OS thread other than the
// process's main thread (see lockedOffMain).
func (t *Tracer) run(started chan<- error) {
	lockedOffMain(func() { t.loop(started) })
}

// lockedOffMain runs f on a goroutine locked to an OS thread other than
// the process's main thread: the calling one's, or a new one's. A
// goroutine that returns while locked ends its thread, except the main
// thread, which Go parks for ever instead: that thread would stay the
// tracer of whatever it still traces, and a traced zombie that nobody
// reaps keeps its leader's exit from being reported, so the parent's Wait
// would never return. Holding the main thread while the new goroutine
// locks its own keeps f off it.
func lockedOffMain(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	locked := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(locked)
		f()
	}()
	<-locked
	runtime.UnlockOSThread()
}

// spare holds a goroutine locked to an OS thread, not the main one,
// waiting to serve the next Seize (see Prewarm).
var spare = make(chan chan<- func(), 1)

var sigchldOnce sync.Once

// Prewarm readies an OS thread for the next Seize while nothing waits on
// it: a new thread costs ~1 ms on some virtual machines, and a Seize
// stops the program. A no-op when one is ready.
func Prewarm() {
	if len(spare) > 0 {
		return
	}
	jobs := make(chan func())
	go func() {
		// The runtime's first Notify of a signal enables it on a
		// thread of its own and waits for it: done here, once, not in
		// each loop.
		sigchldOnce.Do(func() { signal.Notify(make(chan os.Signal, 1), unix.SIGCHLD) })
		lockedOffMain(func() { serveSpare(jobs) })
	}()
}

// serveSpare offers the locked thread, then runs the loop it is given;
// like loop, it never unlocks.
func serveSpare(jobs chan func()) {
	spareTid.Store(int64(unix.Gettid()))
	select {
	case spare <- jobs:
	default:
		runtime.UnlockOSThread() // another spare is ready: not needed
		return
	}
	(<-jobs)()
}

// spareTid is the thread of the latest spare offered (for the tests).
var spareTid atomic.Int64

// loop is the locked goroutine: it attaches, then serves requests and the
// process's ptrace-stops until Close or Detach. It never unlocks its OS
// thread, so the thread exits with it, and the kernel detaches whatever
// the thread still traces (resuming it with any pending signal).
func (t *Tracer) loop(started chan<- error) {
	runtime.LockOSThread()
	defer close(t.done)
	t.tracerTid = unix.Gettid()
	signal.Notify(t.sigchld, unix.SIGCHLD)
	defer signal.Stop(t.sigchld)

	if err := t.seizeAll(); err != nil {
		t.detachAll()
		started <- err
		return
	}
	t.updateMemTid()
	started <- nil
	t.poll()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !t.detached {
		select {
		case f := <-t.reqs:
			f()
		case <-t.sigchld:
			t.poll()
		case <-tick.C:
			t.poll()
			if time.Since(t.lastCheck) > time.Second {
				t.adoptStolen()
				t.adoptUnknown()
			}
		case <-t.quit:
			t.detachAll()
		}
	}
}

// do runs f on the locked goroutine and returns its error.
func (t *Tracer) do(op string, f func() error) error {
	errc := make(chan error, 1)
	select {
	case t.reqs <- func() { errc <- f() }:
		return <-errc
	case <-t.done:
		return &Error{Op: op, Pid: t.pid, Err: ErrClosed}
	}
}

// seizeAll attaches to every thread listed in /proc/PID/task, repeating
// until a listing shows no thread it has not seen.
func (t *Tracer) seizeAll() error {
	seen := map[int]bool{}
	for round := 0; ; round++ {
		if round == 1000 {
			return &Error{Op: "seize", Pid: t.pid, Err: errors.New("the thread list never settled")}
		}
		tids, err := listTasks(t.pid)
		if err != nil || len(tids) == 0 {
			return &Error{Op: "seize", Pid: t.pid, Err: ErrNoProcess}
		}
		added := 0
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			seen[tid] = true
			added++
			err := ptraceSeize(tid)
			switch {
			case err == nil:
				t.threads[tid] = &thread{tid: tid}
			case err == unix.ESRCH:
				// Exited since the listing.
				if tid == t.pid {
					return &Error{Op: "seize", Pid: t.pid, Err: fmt.Errorf("%w (it exited)", ErrNoProcess)}
				}
			case err == unix.EPERM:
				st, serr := ProcStatus(t.pid, tid)
				if errors.Is(serr, os.ErrNotExist) || errors.Is(serr, unix.ESRCH) {
					// Refused as a zombie, and reaped since: it exited.
					if tid == t.pid {
						return &Error{Op: "seize", Pid: t.pid, Err: fmt.Errorf("%w (it exited)", ErrNoProcess)}
					}
					continue
				}
				if statusInt(st, "TracerPid") == t.tracerTid {
					// Created by a thread seized meanwhile: already ours.
					if t.threads[tid] == nil {
						t.threads[tid] = &thread{tid: tid}
					}
					continue
				}
				if s := st["State"]; s != "" && (s[0] == 'Z' || s[0] == 'X') {
					if tid == t.pid {
						t.threads[tid] = &thread{tid: tid, state: untraced}
					}
					continue // a thread on its way out
				}
				return &Error{Op: "seize", Pid: t.pid, Tid: tid, Err: diagnoseEPERM(t.pid, tid)}
			default:
				return &Error{Op: "seize", Pid: t.pid, Tid: tid, Err: err}
			}
		}
		if added == 0 {
			break
		}
	}
	// The leader may have been seized on its way out (pthread_exit in
	// main), past its PTRACE_EVENT_EXIT stop: a zombie that will never
	// stop. adoptStolen catches one that becomes a zombie only later.
	if th := t.threads[t.pid]; th != nil && th.state == running && isZombie(taskState(t.pid, t.pid)) {
		th.state = exiting
	}
	for _, th := range t.threads {
		if th.state != untraced {
			return nil
		}
	}
	return &Error{Op: "seize", Pid: t.pid, Err: ErrZombie}
}

func isZombie(state byte) bool { return state == 'Z' || state == 'X' }

// zombieStatus returns the wait status of process pid if it is a zombie
// with no thread left (field 52 of /proc/PID/stat).
func zombieStatus(pid int) (unix.WaitStatus, bool) {
	st, err := ProcStatus(pid, 0)
	if err != nil {
		return 0, false
	}
	if s := st["State"]; s == "" || s[0] != 'Z' || statusInt(st, "Threads") > 1 {
		return 0, false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 50 {
		return 0, false
	}
	v, err := strconv.Atoi(f[49])
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(v), true
}

// ThreadCount returns the number of threads of process pid
// (/proc/PID/status).
func ThreadCount(pid int) (int, error) {
	st, err := ProcStatus(pid, 0)
	if err != nil {
		return 0, err
	}
	n := statusInt(st, "Threads")
	if n < 0 {
		return 0, fmt.Errorf("/proc/%d/status: no thread count", pid)
	}
	return n, nil
}

func listTasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// poll consumes every pending state change of the traced threads, until a
// pass finds none. It waits only for the traced tids, one by one, never
// for "any child".
func (t *Tracer) poll() {
	// A bounded number of passes: a process flooding the Tracer with
	// stops must not starve the requests; SIGCHLD brings it back.
	for pass := 0; pass < 16 && !t.gone.Load(); pass++ {
		progress := false
		for _, tid := range t.tids() {
			if th := t.threads[tid]; th != nil && t.pollOne(th) {
				progress = true
			}
			if t.gone.Load() {
				return
			}
		}
		if !progress {
			break
		}
	}
	t.updateMemTid()
}

// updateMemTid picks the thread whose pid memory calls name: the leader,
// unless it has exited (pthread_exit in main) and has no address space.
func (t *Tracer) updateMemTid() {
	live := func(tid int) bool {
		th := t.threads[tid]
		return th != nil && th.state != exiting && th.state != untraced
	}
	cur := int(t.memTid.Load())
	if live(t.pid) || t.gone.Load() {
		if cur != t.pid {
			t.memTid.Store(int64(t.pid))
		}
		return
	}
	if live(cur) {
		return
	}
	for _, tid := range t.tids() {
		if live(tid) {
			t.memTid.Store(int64(tid))
			return
		}
	}
}

func (t *Tracer) tids() []int {
	tids := make([]int, 0, len(t.threads))
	for tid := range t.threads {
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	return tids
}

// pollOne consumes one state change of th, if there is one, and reports
// whether there was.
func (t *Tracer) pollOne(th *thread) bool {
	const flags = unix.WNOHANG | unix.WALL
	if th.state == untraced {
		// Only the execve of another thread can make this tid report.
		si, err := waitid(th.tid, unix.WSTOPPED|flags)
		if err == nil && si.Pid != 0 {
			t.onStop(th, int(si.Status))
			return true
		}
		if t.isChild {
			si, err = waitid(th.tid, unix.WEXITED|unix.WNOWAIT|flags)
			switch {
			case err == unix.ECHILD:
				t.processGone(0, false)
				return true
			case err == nil && si.Pid != 0:
				t.processGone(waitStatus(si), true)
				return true
			}
			return false
		}
		// Not our child: the process is gone once its other threads are.
		if len(t.threads) == 1 {
			if ws, ok := zombieStatus(t.pid); ok {
				t.processGone(ws, true)
				return true
			}
		}
		return false
	}
	if th.tid == t.pid && t.isChild {
		// The leader of our own child: consume its stops, but only peek
		// at its exit, which belongs to whoever waits for the child
		// (os/exec's Wait). A traced child reports its ptrace-stops to
		// any wait, WEXITED or not, so peek first (WNOWAIT), then consume
		// only a stop. The kernel reports a leader's exit only once every
		// thread of the group is gone. ECHILD: someone else reaped it.
		si, err := waitid(th.tid, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT|flags)
		switch {
		case err == unix.ECHILD:
			t.processGone(0, false)
			return true
		case err != nil || si.Pid == 0:
			return false
		case si.Code == cldTrapped || si.Code == cldStopped:
			si, err = waitid(th.tid, unix.WSTOPPED|flags)
			if err == nil && si.Pid != 0 {
				t.onStop(th, int(si.Status))
			}
			return true
		}
		t.processGone(waitStatus(si), true)
		return true
	}
	si, err := waitid(th.tid, unix.WSTOPPED|unix.WEXITED|flags)
	switch {
	case err == unix.ECHILD:
		// Not our tracee any more: its tid went away with an execve by
		// another thread, or someone else reaped it.
		if th.tid == t.pid {
			t.processGone(0, false)
		} else {
			delete(t.threads, th.tid)
		}
		return true
	case err != nil || si.Pid == 0:
		return false
	case si.Code == cldTrapped || si.Code == cldStopped:
		t.onStop(th, int(si.Status))
		return true
	}
	if th.tid == t.pid {
		t.processGone(waitStatus(si), true)
	} else {
		delete(t.threads, th.tid)
	}
	return true
}

// onStop records the ptrace-stop status (sig | event<<8) of th and, when
// the threads should be running, resumes it at once.
func (t *Tracer) onStop(th *thread, status int) {
	sig := status & 0xff
	event := status >> 8 & 0xff
	th.state, th.kind, th.sig = stopped, stopEvent, 0
	switch event {
	case 0:
		th.kind, th.sig = stopSignal, sig
	case unix.PTRACE_EVENT_STOP:
		if isStopSignal(sig) {
			th.kind, th.sig = stopGroup, sig
		}
	case unix.PTRACE_EVENT_CLONE:
		if msg, err := unix.PtraceGetEventMsg(th.tid); err == nil {
			// The new thread starts with a PTRACE_EVENT_STOP of its own.
			if nt := int(msg); t.threads[nt] == nil {
				t.threads[nt] = &thread{tid: nt}
			}
		}
	case unix.PTRACE_EVENT_EXIT:
		t.resume(th) // it runs no more user code; let it finish exiting
		th.state = exiting
		return
	case unix.PTRACE_EVENT_EXEC:
		t.onExec(th)
	}
	if t.running {
		t.resume(th)
	}
}

func isStopSignal(sig int) bool {
	switch unix.Signal(sig) {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return true
	}
	return false
}

// onExec handles PTRACE_EVENT_EXEC, reported by the leader's tid whichever
// thread called execve: the other threads are gone or going.
func (t *Tracer) onExec(leader *thread) {
	if former, err := unix.PtraceGetEventMsg(leader.tid); err == nil && int(former) != leader.tid {
		delete(t.threads, int(former))
	}
	for tid, th := range t.threads {
		if tid != leader.tid {
			th.state = exiting // killed by the execve; reaped or dropped by poll
		}
	}
	t.mu.Lock()
	t.execs++
	if t.memFile != nil {
		t.memFile.Close()
		t.memFile = nil
	}
	t.mu.Unlock()
}

// resume lets a stopped thread go on the way its stop requires.
func (t *Tracer) resume(th *thread) {
	var err error
	switch th.kind {
	case stopGroup:
		// Stay group-stopped, as without a tracer; SIGCONT or
		// PTRACE_INTERRUPT make it report again.
		if err = ptraceListen(th.tid); err == nil {
			th.state, th.sig = listening, 0
			return
		}
		err = ptraceCont(th.tid, 0)
	case stopSignal:
		err = ptraceCont(th.tid, th.sig) // deliver the signal it stopped with
	default:
		err = ptraceCont(th.tid, 0)
	}
	// ESRCH: killed meanwhile; poll reaps it.
	_ = err
	th.state, th.sig = running, 0
}

// processGone records that the process has exited: ws is its wait status,
// when known.
func (t *Tracer) processGone(ws unix.WaitStatus, known bool) {
	if t.gone.Load() {
		return
	}
	t.mu.Lock()
	t.exitStatus, t.exitKnown = ws, known
	t.exitErr = fmt.Errorf("%w: %s", ErrExited, exitReason(ws, known))
	if t.memFile != nil {
		t.memFile.Close()
		t.memFile = nil
	}
	t.mu.Unlock()
	t.gone.Store(true)
	clear(t.threads)
	close(t.exited)
}

func (t *Tracer) goneErr(op string, tid int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &Error{Op: op, Pid: t.pid, Tid: tid, Err: t.exitErr}
}

// Exited returns a channel that is closed once the Tracer has seen the
// process exit (the Tracer must be open to notice it).
func (t *Tracer) Exited() <-chan struct{} { return t.exited }

// ExitStatus returns how the process ended; ok is false while it has not
// (as far as the Tracer knows), or when another waiter collected the status
// first. For a child of this process the Tracer only peeks at the status:
// the child stays a zombie for its parent's Wait.
func (t *Tracer) ExitStatus() (ws unix.WaitStatus, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exitStatus, t.exitKnown
}

// Execs returns the number of execve calls the process completed while
// seized. Addresses read before an execve mean nothing after it.
func (t *Tracer) Execs() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.execs
}

// StopAll stops every thread of the process: it interrupts each running
// one (PTRACE_INTERRUPT) and waits until each is in a ptrace-stop. Threads
// created meanwhile are waited for too; threads that exit are dropped.
// When it returns nil, no thread of the process runs until ResumeAll. If
// ctx ends first, the threads already stopped are resumed and the error
// wraps ctx.Err(). It fails with ErrExited if the process exits.
func (t *Tracer) StopAll(ctx context.Context) error {
	return t.do("stop", func() error { return t.stopAll(ctx, true) })
}

func (t *Tracer) stopAll(ctx context.Context, rollback bool) error {
	if t.gone.Load() {
		return t.goneErr("stop", 0)
	}
	t.running = false
	t.poll()
	start := time.Now()
	for _, th := range t.threads {
		if th.state == running || th.state == listening {
			// ESRCH: it is dying; poll reaps it.
			_ = ptraceInterrupt(th.tid)
		}
	}
	delay := 20 * time.Microsecond
	for {
		t.poll()
		if t.gone.Load() {
			return t.goneErr("stop", 0)
		}
		if t.allStopped() {
			if t.adoptUnknown() == 0 {
				return nil
			}
			continue
		}
		// A wait elsewhere in this process may have taken a stop (the
		// collector waits for its program's exit on a pidfd first, so it
		// takes none where pidfds work): look for such stops when the
		// reports are late.
		if time.Since(start) > 20*time.Millisecond && time.Since(t.lastCheck) > 10*time.Millisecond {
			t.adoptStolen()
			continue
		}
		timer := time.NewTimer(delay)
		delay = min(2*delay, 5*time.Millisecond)
		select {
		case <-t.sigchld:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			pending := t.pending()
			if rollback {
				t.resumeAll()
			}
			return &Error{Op: "stop", Pid: t.pid, Err: fmt.Errorf("%d threads not stopped yet: %w", pending, ctx.Err())}
		}
		timer.Stop()
	}
}

// adoptUnknown adds the threads /proc lists that the Tracer has not heard
// of, interrupting them if the threads should be stopped, and returns how
// many. A thread cloned while its creator was being killed is traced
// (PTRACE_O_TRACECLONE) but its creator's PTRACE_EVENT_CLONE stop never
// comes; unreaped, its zombie would keep the leader's exit from ever being
// reported.
func (t *Tracer) adoptUnknown() int {
	if t.gone.Load() {
		return 0
	}
	tids, err := listTasks(t.pid)
	if err != nil {
		return 0
	}
	n := 0
	for _, tid := range tids {
		if t.threads[tid] != nil {
			continue
		}
		t.threads[tid] = &thread{tid: tid}
		n++
		if !t.running {
			_ = ptraceInterrupt(tid) // ESRCH: dead or not ours; poll drops it
		}
	}
	return n
}

func (t *Tracer) allStopped() bool { return t.pending() == 0 }

func (t *Tracer) pending() int {
	n := 0
	for _, th := range t.threads {
		if th.state == running || th.state == listening {
			n++
		}
	}
	return n
}

// adoptStolen handles the threads that are running as far as the Tracer
// knows but will never report a stop:
//
//   - stops whose report another waiter in this process consumed: os/exec's
//     Wait of a child, for one, reports the ptrace-stops of the child's
//     leader as if the child had stopped. Such a thread is in a ptrace-stop
//     ('t', and PTRACE_GETSIGINFO works) with nothing to wait for; its
//     siginfo says which kind of stop it is.
//   - zombies: threads seized on their way out, past their
//     PTRACE_EVENT_EXIT stop. A zombie leader stays until the other
//     threads are gone; PTRACE_INTERRUPT does nothing to it.
func (t *Tracer) adoptStolen() {
	t.lastCheck = time.Now()
	for _, tid := range t.tids() {
		th := t.threads[tid]
		if th == nil || th.state != running {
			continue
		}
		switch state := taskState(t.pid, tid); {
		case isZombie(state):
			if !t.pollOne(th) && !t.gone.Load() {
				th.state = exiting // poll reaps it, or sees the process exit
			}
			continue
		case state != 't':
			continue
		}
		si, err := ptraceGetSiginfo(tid)
		if err != nil {
			continue // listening, or not stopped after all
		}
		// A thread in a ptrace-stop reports nothing new until resumed, so
		// if nothing is pending now, the report is gone for good.
		if t.pollOne(th) || t.gone.Load() {
			continue
		}
		status := int(si.Signo)
		if ev := int(si.Code) >> 8; si.Code > 0 && int(si.Code)&0xff == int(si.Signo) && ev != 0 {
			status |= ev << 8
		}
		t.onStop(th, status)
	}
}

// ResumeAll lets every stopped thread go on: a thread stopped for a signal
// gets that signal delivered (PTRACE_CONT with it), a group-stopped thread
// stays group-stopped (PTRACE_LISTEN), others continue.
func (t *Tracer) ResumeAll() error {
	return t.do("resume", func() error {
		if t.gone.Load() {
			return t.goneErr("resume", 0)
		}
		t.resumeAll()
		return nil
	})
}

func (t *Tracer) resumeAll() {
	t.running = true
	for _, tid := range t.tids() {
		if th := t.threads[tid]; th.state == stopped {
			t.resume(th)
		}
	}
}

// Threads returns the ids of the process's live traced threads, sorted;
// after StopAll, every one of them is stopped. It returns nil once the
// process has exited or the Tracer is closed.
func (t *Tracer) Threads() []int {
	var tids []int
	t.do("threads", func() error {
		for _, tid := range t.tids() {
			if s := t.threads[tid].state; s != exiting && s != untraced {
				tids = append(tids, tid)
			}
		}
		return nil
	})
	return tids
}

// stoppedThread returns thread tid if it is in a ptrace-stop.
func (t *Tracer) stoppedThread(op string, tid int) (*thread, error) {
	if t.gone.Load() {
		return nil, t.goneErr(op, tid)
	}
	th := t.threads[tid]
	if th == nil || th.state == exiting || th.state == untraced {
		return nil, &Error{Op: op, Pid: t.pid, Tid: tid, Err: ErrNoThread}
	}
	if th.state != stopped {
		return nil, &Error{Op: op, Pid: t.pid, Tid: tid, Err: ErrNotStopped}
	}
	return th, nil
}

// threadErr wraps the error of a ptrace request on a stopped thread. ESRCH
// means the thread died under it (SIGKILL); say whether the whole process
// is gone.
func (t *Tracer) threadErr(op string, tid int, err error) error {
	if err == unix.ESRCH {
		t.poll()
		if t.gone.Load() {
			return t.goneErr(op, tid)
		}
		if th := t.threads[tid]; th != nil {
			th.state = exiting
		}
		return &Error{Op: op, Pid: t.pid, Tid: tid, Err: fmt.Errorf("%w (it was killed): %w", ErrNoThread, err)}
	}
	return &Error{Op: op, Pid: t.pid, Tid: tid, Err: err}
}

// Regs returns the general registers of stopped thread tid.
func (t *Tracer) Regs(tid int) (unix.PtraceRegs, error) {
	var r unix.PtraceRegs
	err := t.do("regs", func() error {
		if _, err := t.stoppedThread("regs", tid); err != nil {
			return err
		}
		if err := unix.PtraceGetRegs(tid, &r); err != nil {
			return t.threadErr("regs", tid, err)
		}
		return nil
	})
	return r, err
}

// SetRegs sets the general registers of stopped thread tid; they take
// effect when it resumes.
func (t *Tracer) SetRegs(tid int, r unix.PtraceRegs) error {
	return t.do("setregs", func() error {
		if _, err := t.stoppedThread("setregs", tid); err != nil {
			return err
		}
		if err := unix.PtraceSetRegs(tid, &r); err != nil {
			return t.threadErr("setregs", tid, err)
		}
		return nil
	})
}

// Detach stops the process, detaches from every thread (PTRACE_DETACH,
// delivering any signal a thread was stopped with) and ends the Tracer:
// the process goes on as if it had never been traced, group-stopped if it
// was stopped by SIGSTOP. A thread that cannot be stopped in time is
// detached by the kernel when the Tracer's thread exits. Detach of an
// exited process returns an ErrExited error; of a closed Tracer, ErrClosed.
func (t *Tracer) Detach() error {
	return t.do("detach", t.detachAll)
}

func (t *Tracer) detachAll() error {
	t.detached = true
	if t.gone.Load() {
		return t.goneErr("detach", 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopErr := t.stopAll(ctx, false)
	if t.gone.Load() {
		return t.goneErr("detach", 0)
	}
	var firstErr error
	var leaving []*thread
	for _, tid := range t.tids() {
		th := t.threads[tid]
		switch th.state {
		case stopped:
			sig := 0
			if th.kind == stopSignal {
				sig = th.sig
			}
			if err := ptraceDetach(tid, sig); err != nil && err != unix.ESRCH && firstErr == nil {
				firstErr = &Error{Op: "detach", Pid: t.pid, Tid: tid, Err: err}
			}
			delete(t.threads, tid)
		case exiting:
			if tid != t.pid {
				leaving = append(leaving, th)
			}
		}
	}
	// Reap the threads that were exiting, so they do not linger as
	// zombies; whatever is left goes when this thread exits.
	deadline := time.Now().Add(200 * time.Millisecond)
	for len(leaving) > 0 && time.Now().Before(deadline) {
		leaving = slices.DeleteFunc(leaving, func(th *thread) bool {
			si, err := waitid(th.tid, unix.WEXITED|unix.WNOHANG|unix.WALL)
			return err != nil || si.Pid != 0
		})
		if len(leaving) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if stopErr != nil {
		return &Error{Op: "detach", Pid: t.pid, Err: fmt.Errorf("some threads did not stop; the kernel detaches them when the tracer thread exits: %w", stopErr)}
	}
	return firstErr
}

// Close detaches from the process if it is still attached (see Detach) and
// ends the Tracer. It returns nil if the process has exited meanwhile;
// calling it again returns nil.
func (t *Tracer) Close() error {
	err := t.Detach()
	t.quitOnce.Do(func() { close(t.quit) })
	<-t.done
	if errors.Is(err, ErrExited) || errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}
