// Package inject loads leakpath's agent into a process that is already
// running and unloads its hooks again (`leakpath attach` / `detach`).
//
// It seizes every thread with ptrace and stops them all, picks one thread
// at a safe point, makes that thread call dlopen(agent, RTLD_NOW) and then
// leakpath_agent_attach(socket) (the agent redirects the allocator's GOT
// slots of every module), puts the thread's registers back and lets the
// process go. Detach makes a thread call leakpath_agent_detach the same
// way.
//
// The safe point. A thread taken at a random instruction may hold a lock
// that dlopen needs: malloc's arena lock (dlopen allocates), the dynamic
// loader's lock, the lock dl_iterate_phdr holds while its callback runs.
// Calling dlopen there deadlocks the thread on itself, for ever (gdb's
// `call dlopen(...)`, which heaptrack's attach relies on, takes whatever
// thread is current, hence its "unstable"). Other injectors either accept
// that or single-step the thread out of libc first. Here a thread
// qualifies when its instruction pointer is not in libc's allocator (the
// code between its exported malloc functions), dl_iterate_phdr, dlopen &
// co, or the dynamic loader, and either it is blocked in a system call
// other than those made with an allocator lock held (mmap, munmap,
// mprotect, brk, madvise, mremap by malloc; clone and fork by fork, whose
// handlers hold every arena lock) - the common case for a server: waiting
// in epoll, accept, a condition variable, a sleep - or, running user code,
// no word of the top 8 KiB of its stack points into that code either.
// Saved registers and stale words make that test conservative, never lax:
// a return address into the allocator is on the stack while the thread
// runs there; stale ones, left in slots a later call's frames reuse, are
// why a blocked thread is not judged by its stack. Threads blocked in a
// system call come first. (One case escapes the rule: a signal handler
// blocked in a system call on top of an interrupted malloc.) When no
// thread qualifies, the
// process runs for 20 ms and the choice is made again, up to Options.Tries
// times. Another thread may still hold a lock the call needs (its arena's,
// when two threads share one): the call then waits, and after
// Options.Patience the other threads are let run until it returns.
//
// The call. The thread's registers are saved; the stack pointer moves below
// the red zone (128 bytes) and a scratch area for the strings, aligned to
// 16 bytes with the return address pushed as a call would; the return
// address is an int3 written over the program's entry point (AT_ENTRY,
// never executed again after start-up) and restored afterwards. A thread
// stopped inside an interrupted system call gets it restarted when its
// registers are restored (Orig_rax is kept), as after any signal.
package inject

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

const (
	rtldNow = 2 // <dlfcn.h> RTLD_NOW
	atEntry = 9 // <elf.h> AT_ENTRY: the program's entry point
)

// Errors callers may test with errors.Is (the wrapping error says more).
var (
	// ErrStatic: the process has no libc.so.6 mapped (a static binary):
	// there is no dlopen to call.
	ErrStatic = errors.New("no libc.so.6 in the process (statically linked?): cannot load the agent")
	// ErrNoDlopen: libc is older than glibc 2.34 (dlopen lives in libdl).
	ErrNoDlopen = errors.New("libc.so.6 exports no dlopen (glibc older than 2.34)")
	// ErrNoSafePoint: no thread left the allocator or the loader in time.
	ErrNoSafePoint = errors.New("no thread reached a safe point (every one stayed inside the allocator or the dynamic loader)")
	// ErrPreloaded: the agent is already preloaded (`leakpath run`).
	ErrPreloaded = errors.New("the process already runs under leakpath run")
	// ErrNotAttached: detach of a process without the agent.
	ErrNotAttached = errors.New("the leakpath agent is not loaded in the process")
	// ErrOtherLibc: the process runs on a C library other than glibc
	// (musl): the agent is built for glibc.
	ErrOtherLibc = errors.New("the process uses another C library than glibc (musl?): the agent needs glibc's libc.so.6")
	// ErrSeccomp: a thread runs under a seccomp filter (or strict mode),
	// which may kill the process for a system call of dlopen or the agent
	// (open, mmap, socket, connect).
	ErrSeccomp = errors.New("a thread of the process runs under a seccomp filter, which may kill it for a system call the agent makes; use `leakpath run` to record such a program from its start")
	// ErrStopped: the process is stopped (SIGSTOP, job control); the
	// attach cannot run code in it without waking it.
	ErrStopped = errors.New("the process is stopped (SIGSTOP or job control): continue it first (kill -CONT)")
)

// Options tune an injection.
type Options struct {
	// Tries is how many times a safe point is looked for (0: 50), 20 ms
	// of running apart.
	Tries int
	// Patience is how long a call may run with the other threads stopped
	// (0: 200 ms).
	Patience time.Duration
}

// Result is what an injection measured.
type Result struct {
	Thread int           // the thread that made the calls
	Pause  time.Duration // the longest time every thread was stopped
	Tries  int           // stops needed to find a safe point
	Value  int64         // what the last call returned
	// Released: the call outlasted Options.Patience, the other threads ran.
	Released bool
}

// Attach loads agent (a path the process can open) and starts recording
// to the collector listening on sock.
func Attach(ctx context.Context, pid int, agent, sock string, o Options) (*Result, error) {
	p, err := prepare(pid)
	if err != nil {
		return nil, err
	}
	if p.agent != nil && p.preloaded() {
		return nil, fmt.Errorf("attach to pid %d: %w", pid, ErrPreloaded)
	}
	dlopen, _, ok := p.libc.symbol("dlopen")
	dlsym, _, ok2 := p.libc.symbol("dlsym")
	dlerror, _, ok3 := p.libc.symbol("dlerror")
	if !ok || !ok2 || !ok3 {
		return nil, fmt.Errorf("attach to pid %d: %w", pid, ErrNoDlopen)
	}
	return p.inject(ctx, o, func(c *call) (int64, error) {
		h, err := c.run(dlopen, c.str(agent), rtldNow)
		if err != nil {
			return 0, fmt.Errorf("dlopen: %w", err)
		}
		if h == 0 {
			msg := "unknown error"
			if e, err := c.run(dlerror); err == nil && e != 0 {
				msg = c.readStr(e)
			}
			return 0, fmt.Errorf("dlopen %s in pid %d failed: %s", agent, pid, msg)
		}
		fn, err := c.run(dlsym, h, c.str("leakpath_agent_attach"))
		if err != nil || fn == 0 {
			return 0, fmt.Errorf("dlsym leakpath_agent_attach in pid %d: not found (an agent older than this leakpath?)", pid)
		}
		rc, err := c.run(fn, c.str(sock))
		if err != nil {
			return 0, fmt.Errorf("leakpath_agent_attach: %w", err)
		}
		if int32(rc) != 0 {
			why := "an agent older than this leakpath"
			if wf, err := c.run(dlsym, h, c.str("leakpath_agent_why")); err == nil && wf != 0 {
				if w, err := c.run(wf); err == nil && w != 0 {
					why = c.readStr(w)
				}
			}
			return 0, fmt.Errorf("attach to pid %d refused, nothing was changed: %s", pid, why)
		}
		return 0, nil
	})
}

// Detach makes the agent in pid stop recording and give the allocator's
// slots back; Result.Value is the number of slots restored.
func Detach(ctx context.Context, pid int, o Options) (*Result, error) {
	p, fn, err := prepareDetach(pid)
	if err != nil {
		return nil, err
	}
	return p.inject(ctx, o, detachCall(fn))
}

// DetachStopped is Detach in a process t has stopped (every thread): the
// call runs in a thread at a safe point and the process stays stopped.
// It fails with ErrNoSafePoint when no thread is at one now.
func DetachStopped(ctx context.Context, t *ptrace.Tracer, pid int, o Options) (*Result, error) {
	p, fn, err := prepareDetach(pid)
	if err != nil {
		return nil, err
	}
	tid, regs := p.pick(t)
	if tid == 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoSafePoint)
	}
	if o.Patience <= 0 {
		o.Patience = 200 * time.Millisecond
	}
	res := &Result{Thread: tid, Tries: 1}
	start := time.Now()
	res.Value, err = p.callIn(ctx, t, tid, regs, o.Patience, detachCall(fn), res)
	res.Pause = time.Since(start) // added to the stop of the caller's
	if err != nil {
		return nil, err
	}
	return res, nil
}

func prepareDetach(pid int) (*process, uint64, error) {
	p, err := prepare(pid)
	if err != nil {
		return nil, 0, err
	}
	if p.agent == nil {
		return nil, 0, fmt.Errorf("detach from pid %d: %w", pid, ErrNotAttached)
	}
	fn, _, ok := p.agent.symbol("leakpath_agent_detach")
	if !ok {
		return nil, 0, fmt.Errorf("detach from pid %d: the agent %s has no leakpath_agent_detach", pid, p.agent.path)
	}
	return p, fn, nil
}

func detachCall(fn uint64) func(*call) (int64, error) {
	return func(c *call) (int64, error) {
		n, err := c.run(fn)
		if err != nil {
			return 0, fmt.Errorf("leakpath_agent_detach: %w", err)
		}
		return int64(int32(n)), nil
	}
}

// process is what prepare learnt of the target before stopping it.
type process struct {
	pid    int
	libc   *module
	loader *module
	agent  *module
	entry  uint64
	avoid  [][2]uint64 // code ranges no thread may be in or return to
}

func prepare(pid int) (*process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ptrace.ErrNoProcess)
	}
	b, err := procmaps.Read(pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, ptrace.ErrNoProcess)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, ptrace.PermissionError(pid)
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	ms := procmaps.Parse(b)
	if len(ms) == 0 {
		return nil, fmt.Errorf("pid %d: no memory mappings (a zombie or a kernel thread)", pid)
	}
	p := &process{pid: pid}
	if p.libc, err = findModule(pid, ms, isLibc); err != nil {
		return nil, goneOr(pid, err)
	}
	if p.libc == nil {
		for _, m := range ms {
			if b := filepath.Base(m.Path); strings.HasPrefix(b, "ld-musl") || strings.HasPrefix(b, "libc.musl") {
				return nil, fmt.Errorf("pid %d: %w", pid, ErrOtherLibc)
			}
		}
		return nil, fmt.Errorf("pid %d: %w", pid, ErrStatic)
	}
	if err := checkThreads(pid, true); err != nil {
		return nil, err
	}
	if p.loader, err = findModule(pid, ms, isLoader); err != nil {
		return nil, goneOr(pid, err)
	}
	if p.agent, err = findModule(pid, ms, func(b string) bool { return b == "libleakpath.so" }); err != nil {
		return nil, goneOr(pid, err)
	}
	auxv, err := os.ReadFile(fmt.Sprintf("/proc/%d/auxv", pid))
	if err != nil {
		return nil, goneOr(pid, err)
	}
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == atEntry {
			p.entry = binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	if p.entry == 0 {
		return nil, fmt.Errorf("pid %d: no entry point in its auxiliary vector", pid)
	}
	p.avoid = p.unsafeCode()
	return p, nil
}

// maxThreads bounds the threads of a target read from /proc.
const maxThreads = 1 << 16

// checkThreads refuses a process that an attach could harm: a thread under
// seccomp, and (when running) a process stopped by a signal. Read from
// /proc/PID/task/TID/status.
func checkThreads(pid int, running bool) error {
	d, err := os.Open(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return goneOr(pid, err)
	}
	names, err := d.Readdirnames(maxThreads)
	d.Close()
	if err != nil && len(names) == 0 {
		return goneOr(pid, err)
	}
	for _, n := range names {
		tid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, err := ptrace.ProcStatus(pid, tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		if v := st["Seccomp"]; v != "" && v != "0" {
			return fmt.Errorf("pid %d (thread %s, seccomp mode %s): %w", pid, n, v, ErrSeccomp)
		}
		if running && strings.HasPrefix(st["State"], "T") {
			return fmt.Errorf("pid %d: %w", pid, ErrStopped)
		}
	}
	return nil
}

// goneOr says that pid exited (ptrace.ErrNoProcess) if it did, else
// wraps err.
func goneOr(pid int, err error) error {
	if _, serr := os.Stat(fmt.Sprintf("/proc/%d/maps", pid)); serr != nil {
		return fmt.Errorf("pid %d exited during the attach: %w", pid, ptrace.ErrNoProcess)
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// preloaded says whether the agent came by LD_PRELOAD (leakpath run).
func (p *process) preloaded() bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.pid))
	if err != nil {
		return false
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' }) {
				if filepath.Base(e) == "libleakpath.so" {
					return true
				}
			}
		}
	}
	return false
}

// allocatorFuncs are libc's exported functions of its allocator (malloc.c)
// and of the dynamic loading interface: the code between the lowest and
// the highest of the former is the allocator's (its internal functions lie
// between them).
var allocatorFuncs = []string{"malloc", "free", "calloc", "realloc", "memalign", "posix_memalign",
	"aligned_alloc", "valloc", "pvalloc", "malloc_usable_size", "malloc_trim", "mallopt",
	"malloc_stats", "malloc_info", "mallinfo", "mallinfo2", "__libc_malloc", "__libc_free",
	"__libc_calloc", "__libc_realloc", "__libc_memalign"}

var loaderFuncs = []string{"dlopen", "dlclose", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo",
	"dlmopen", "dl_iterate_phdr", "dlerror", "fork", "__libc_dlopen_mode"}

func (p *process) unsafeCode() [][2]uint64 {
	var out [][2]uint64
	lo, hi := ^uint64(0), uint64(0)
	for _, name := range allocatorFuncs {
		if a, n, ok := p.libc.symbol(name); ok {
			lo, hi = min(lo, a), max(hi, a+max(n, 1))
		}
	}
	if lo < hi {
		out = append(out, [2]uint64{lo, hi})
	}
	for _, name := range loaderFuncs {
		if a, n, ok := p.libc.symbol(name); ok {
			out = append(out, [2]uint64{a, a + max(n, 1)})
		}
	}
	if p.loader != nil && p.loader.textHi > p.loader.textLo {
		out = append(out, [2]uint64{p.loader.textLo, p.loader.textHi})
	}
	if p.agent != nil && p.agent.textHi > p.agent.textLo {
		// A thread inside a hook of an earlier attach.
		out = append(out, [2]uint64{p.agent.textLo, p.agent.textHi})
	}
	return out
}

func (p *process) inAvoided(a uint64) bool {
	for _, r := range p.avoid {
		if a >= r[0] && a < r[1] {
			return true
		}
	}
	return false
}

// System calls made with an allocator lock held: malloc's own (it maps,
// unmaps, trims with its arena locked) and fork's (its handlers hold
// every arena lock across it).
var allocatorSyscalls = map[int64]bool{unix.SYS_MMAP: true, unix.SYS_MUNMAP: true, unix.SYS_MPROTECT: true,
	unix.SYS_BRK: true, unix.SYS_MADVISE: true, unix.SYS_MREMAP: true,
	unix.SYS_CLONE: true, unix.SYS_CLONE3: true, unix.SYS_FORK: true, unix.SYS_VFORK: true}

// stackScan is how much of a thread's stack is searched for return
// addresses into unsafe code: deep enough for a signal frame (with its
// extended register state) over an interrupted malloc.
const stackScan = 8 << 10

// pick returns a thread at a safe point (see the package doc), preferring
// one blocked in a system call, or 0.
func (p *process) pick(t *ptrace.Tracer) (tid int, regs unix.PtraceRegs) {
	best := 0
	var bestRegs unix.PtraceRegs
	buf := make([]byte, stackScan)
	for _, id := range t.Threads() {
		r, err := t.Regs(id)
		if err != nil || p.inAvoided(r.Rip) {
			continue
		}
		sys := int64(r.Orig_rax)
		if sys >= 0 {
			if allocatorSyscalls[sys] {
				continue
			}
			// Blocked in a system call from libc, not the loader's nor
			// one made holding an allocator lock: the best there is.
			return id, r
		}
		n, _ := t.ReadMemory(r.Rsp, buf)
		if n < 8 {
			continue
		}
		bad := false
		for i := 0; i+8 <= n; i += 8 {
			if p.inAvoided(binary.LittleEndian.Uint64(buf[i:])) {
				bad = true
				break
			}
		}
		if bad {
			continue
		}
		if best == 0 {
			best, bestRegs = id, r
		}
	}
	return best, bestRegs
}

// inject stops the process, finds a safe thread, runs calls in it and
// lets the process go.
func (p *process) inject(ctx context.Context, o Options, calls func(*call) (int64, error)) (res *Result, err error) {
	defer func() {
		if err != nil && !errors.Is(err, ptrace.ErrNoProcess) {
			if _, serr := os.Stat(fmt.Sprintf("/proc/%d/maps", p.pid)); serr != nil {
				err = fmt.Errorf("pid %d exited during the attach: %w (%v)", p.pid, ptrace.ErrNoProcess, err)
			}
		}
	}()
	if o.Tries <= 0 {
		o.Tries = 50
	}
	if o.Patience <= 0 {
		o.Patience = 200 * time.Millisecond
	}
	t, err := ptrace.Seize(p.pid)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := t.Detach(); derr != nil && err == nil && !errors.Is(derr, ptrace.ErrExited) {
			err = derr
		}
		t.Close()
	}()
	res = &Result{}
	for try := 1; ; try++ {
		stopped := time.Now()
		if err := stopAll(ctx, t, p.pid); err != nil {
			return nil, err
		}
		// Every thread is stopped: none can install a filter any more.
		if err := checkThreads(p.pid, false); err != nil {
			return nil, err
		}
		tid, regs := p.pick(t)
		if tid == 0 {
			if err := t.ResumeAll(); err != nil {
				return nil, err
			}
			res.Pause = max(res.Pause, time.Since(stopped))
			if try >= o.Tries {
				return nil, fmt.Errorf("pid %d: %w after %d tries", p.pid, ErrNoSafePoint, try)
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		res.Thread, res.Tries = tid, try
		res.Value, err = p.callIn(ctx, t, tid, regs, o.Patience, calls, res)
		rerr := t.ResumeAll()
		res.Pause = max(res.Pause, time.Since(stopped))
		if err != nil {
			return nil, err
		}
		if rerr != nil {
			return nil, rerr
		}
		return res, nil
	}
}

// stopTimeout bounds the wait for every thread to stop: a thread in an
// uninterruptible sleep (a hung file system) stops only when it leaves it.
const stopTimeout = 30 * time.Second

// stopAll stops every thread of the process, or lets them all run on and
// says why after stopTimeout.
func stopAll(ctx context.Context, t *ptrace.Tracer, pid int) error {
	sctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	err := t.StopAll(sctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pid %d: not every thread stopped within %v (one in an uninterruptible sleep?); nothing was changed: %w",
			pid, stopTimeout, err)
	}
	return err
}

// callIn runs calls in thread tid, an int3 at the entry point as their
// return address, and puts the thread and the entry point back.
func (p *process) callIn(ctx context.Context, t *ptrace.Tracer, tid int, saved unix.PtraceRegs, patience time.Duration,
	calls func(*call) (int64, error), res *Result) (int64, error) {
	var orig [1]byte
	if _, err := t.ReadMemory(p.entry, orig[:]); err != nil {
		return 0, fmt.Errorf("pid %d: read entry point: %w", p.pid, err)
	}
	if err := t.WriteMemory(p.entry, []byte{0xcc}); err != nil {
		return 0, fmt.Errorf("pid %d: write entry point: %w", p.pid, err)
	}
	c := &call{ctx: ctx, t: t, tid: tid, saved: saved, ret: p.entry, patience: patience, res: res}
	// Scratch below the red zone: strings grow down from there.
	c.scratch = (saved.Rsp - 128) &^ 15
	c.low = c.scratch - 4096
	v, err := calls(c)
	// Whatever happened: the thread and the entry point as they were.
	if werr := t.WriteMemory(p.entry, orig[:]); werr != nil && err == nil {
		err = fmt.Errorf("pid %d: restore entry point: %w", p.pid, werr)
	}
	if serr := t.SetRegs(tid, saved); serr != nil && err == nil {
		err = fmt.Errorf("pid %d: restore thread %d: %w", p.pid, tid, serr)
	}
	return v, err
}

// call runs functions in one stopped thread.
type call struct {
	ctx      context.Context
	t        *ptrace.Tracer
	tid      int
	saved    unix.PtraceRegs
	ret      uint64
	patience time.Duration
	scratch  uint64 // next free byte, growing down
	low      uint64 // scratch may not go below
	res      *Result
	err      error // of str
}

// str copies s (NUL-terminated) into the scratch area and returns its
// address in the process.
func (c *call) str(s string) uint64 {
	b := append([]byte(s), 0)
	at := (c.scratch - uint64(len(b))) &^ 15
	if at < c.low {
		c.err = errors.New("strings too long for the scratch area")
		return 0
	}
	if err := c.t.WriteMemory(at, b); err != nil && c.err == nil {
		c.err = err
	}
	c.scratch = at
	return at
}

// readStr reads a NUL-terminated string of the process (up to 512 bytes).
func (c *call) readStr(addr uint64) string {
	b := make([]byte, 512)
	n, _ := c.t.ReadMemory(addr, b)
	b = b[:n]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// run calls fn(args...) (System V AMD64, integer arguments) and returns
// its result.
func (c *call) run(fn uint64, args ...uint64) (uint64, error) {
	if c.err != nil {
		return 0, c.err
	}
	r := c.saved
	sp := (c.low - 256) &^ 15
	sp -= 8 // the pushed return address: rsp+8 is 16-aligned at entry
	var ret [8]byte
	binary.LittleEndian.PutUint64(ret[:], c.ret)
	if err := c.t.WriteMemory(sp, ret[:]); err != nil {
		return 0, err
	}
	r.Rsp, r.Rip, r.Rax = sp, fn, 0
	regs := []*uint64{&r.Rdi, &r.Rsi, &r.Rdx, &r.Rcx, &r.R8, &r.R9}
	for i, a := range args {
		*regs[i] = a
	}
	cr, err := c.t.Call(c.ctx, c.tid, r, c.ret, c.patience)
	c.res.Released = c.res.Released || cr.Released
	if err != nil {
		return 0, err
	}
	return cr.Regs.Rax, nil
}
