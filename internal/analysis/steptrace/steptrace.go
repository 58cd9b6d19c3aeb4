// Package steptrace records the path one thread takes: the functions it
// enters and leaves and the conditional branches it takes or not, from
// where it stands until an outcome (root cause, JP2009-217617 steps
// 320-335).
//
// It drives a ptrace.Stepper block by block, without the CPU's block
// stepping (PTRACE_SINGLEBLOCK needs the BTF bit of DEBUGCTL, which
// virtual machines commonly ignore: they step every instruction then).
// From where the thread stands it decodes forward (golang.org/x/arch) to
// the next control transfer, runs to it on a hardware breakpoint (the
// thread's own debug register: other threads never meet it), then steps
// that one instruction to see where it went. Two stops per basic block,
// whatever its length. Calls into code that cannot matter (the C runtime,
// the dynamic loader, leakpath's agent: Options.Boring) are run through
// at full speed with a breakpoint on the return address.
//
// Where the debug registers do not fire (some hypervisors accept them and
// never trap), Options.Soft does the same on software breakpoints: an
// int3 written at each block end the thread meets, left in for the
// window (ptrace.Stepper.Insert: the process's other threads are seized
// so that one meeting an int3 is held, not killed, and all go when the
// window's thread is detached). There a conditional branch is decided
// from the flags the thread stopped with and a direct jump is followed
// in the code, so a window stops about once per conditional branch,
// call and return of the code it runs, not once per instruction.
package steptrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// Kind is what an Event records.
type Kind uint8

// The kinds of events.
const (
	// Enter: a call entered function Addr (its first instruction).
	Enter Kind = iota + 1
	// Exit: the function containing Addr returned (Addr: its return
	// instruction, or the entry of a function run through).
	Exit
	// Branch: the conditional branch at Addr was taken or not.
	Branch
)

// Event is one step of a path.
type Event struct {
	Kind  Kind
	Addr  uint64
	Taken bool   // Branch
	To    uint64 // Branch: where it went
	// Data (Branch): bit k says the branch's flags were computed from
	// data loaded out of Options.Blocks[k] (see dataMask).
	Data uint8
}

func (e Event) String() string {
	switch e.Kind {
	case Enter:
		return fmt.Sprintf("enter %#x", e.Addr)
	case Exit:
		return fmt.Sprintf("exit %#x", e.Addr)
	case Branch:
		if e.Taken {
			return fmt.Sprintf("branch %#x taken", e.Addr)
		}
		return fmt.Sprintf("branch %#x not taken", e.Addr)
	}
	return fmt.Sprintf("event(%d) %#x", e.Kind, e.Addr)
}

// Outcome is how a recorded path ended.
type Outcome uint8

// The outcomes.
const (
	// Freed (F): Options.Freed said the block was freed.
	Freed Outcome = iota + 1
	// EndReached (E): the thread returned out of the end point.
	EndReached
	// Budget: the path grew past Options.MaxStops or its deadline.
	Budget
	// Gone: the thread ended, or could not be stepped on.
	Gone
	// Next: the thread came back to Options.StopAt (its next
	// allocation at the same place: a loop's next iteration).
	Next
)

func (o Outcome) String() string {
	return [...]string{"?", "F", "E", "budget", "gone", "next"}[min(int(o), 5)]
}

// Thread is what steptrace needs of a stepped thread (a ptrace.Stepper).
type Thread interface {
	SetBreakpoint(slot int, addr uint64) error
	Step() (ptrace.Stop, error)
	Cont() (ptrace.Stop, error)
	// Deliver resumes from a signal stop so that a breakpoint on the
	// interrupted instruction fires when the signal's handler returns.
	Deliver() (ptrace.Stop, error)
	Regs() (unix.PtraceRegs, error)
	SetRegs(unix.PtraceRegs) error
}

// SoftThread is a Thread that can write software breakpoints into its
// code (a ptrace.LockedStepper): the thread's other threads are held
// rather than harmed if they meet one, and all of them go when it is
// detached.
type SoftThread interface {
	Thread
	Insert(addr uint64) error
	// Original overwrites the breakpoints in b, read at addr, with
	// the code's own bytes.
	Original(addr uint64, b []byte)
}

// Options say what to record and when to stop.
type Options struct {
	// Read reads the process's memory (its code, and the GOT of a PLT
	// stub).
	Read func(addr uint64, b []byte) (int, error)
	// Boring reports code that cannot matter: calls into it are run
	// through, recorded as an Enter and an Exit.
	Boring func(addr uint64) bool
	// EndDepth: the path ends (EndReached) when the thread returns out of
	// the function EndDepth levels above the one it starts in (0: when
	// the starting function returns).
	EndDepth int
	// Freed is asked after every stop whether the block was freed.
	Freed func() bool
	// Branches says whether to record the branches of the function
	// containing an address (nil: all).
	Branches func(addr uint64) bool
	// MaxStops and Deadline bound the path (0: no bound).
	MaxStops int
	Deadline time.Time
	// Code, when not nil, keeps decoded code from path to path (of one
	// process image: its code does not change).
	Code *Code
	// StepOnly: hardware breakpoints do not fire here (see
	// ptrace.HardwareBreakpoints): every instruction is stepped,
	// boring calls and signal handlers too. Correct, and much slower.
	StepOnly bool
	// Caught reports whether the program has a handler for signal sig
	// (with StepOnly; nil: it has).
	Caught func(sig int) bool
	// Vdso, with StepOnly, makes the vDSO's calls as system calls: a
	// clock read stepped an instruction at a time can retry forever.
	Vdso *Vdso
	// Soft: hardware breakpoints do not fire here, and the thread is a
	// SoftThread: the path is recorded on software breakpoints (int3
	// written into the code) instead of a step at a time.
	Soft bool
	// StopAt (not 0): the path ends (Next) when the thread returns from
	// a call it ran through to StopAt, the return address of the
	// allocation the path began at, or reaches it while running a call
	// through (an exception that left the call for good). Breakpoint
	// slot 1 is used for it.
	StopAt uint64
	// Blocks (at most 8 [start, end) ranges): each conditional branch
	// says which of them its flags were computed from (Event.Data).
	Blocks [][2]uint64
}

// Code is decoded code, by block start address.
type Code struct{ blocks map[uint64]*block }

// NewCode returns an empty cache of decoded code.
func NewCode() *Code { return &Code{blocks: map[uint64]*block{}} }

// Path is a recorded path.
type Path struct {
	Events  []Event
	Outcome Outcome
	// Ended: the path ended at the end point, its last event the Exit
	// out of it (a caller may judge its outcome otherwise later).
	Ended bool
	Stops int // ptrace stops it took
	Err   error
}

// Record steps t from where it stands until an outcome. The thread is
// left stopped; the caller detaches it.
func Record(t Thread, opts Options) *Path {
	if opts.Code == nil {
		opts.Code = NewCode()
	}
	r := newRecorder(t, opts)
	r.code = opts.Code.blocks
	p := &Path{}
	p.Outcome, p.Err = r.run(p)
	p.Ended = p.Outcome == EndReached
	if errors.Is(p.Err, errBudget) {
		p.Err = nil
	}
	p.Stops = r.stops
	t.SetBreakpoint(0, 0)
	return p
}

// RunTo runs t to addr with the stack pointer at or above rsp (0: any),
// on a hardware breakpoint or, with opts.StepOnly, a step at a time,
// within opts' budget; signals on the way run their handlers.
func RunTo(t Thread, addr, rsp uint64, opts Options) (ptrace.Stop, error) {
	r := newRecorder(t, opts)
	st, err := r.runTo(addr, rsp)
	t.SetBreakpoint(0, 0)
	return st, err
}

func newRecorder(t Thread, opts Options) *recorder {
	r := &recorder{t: t, opts: opts}
	if st, ok := t.(SoftThread); ok && opts.Soft && !opts.StepOnly {
		r.soft = st
	}
	return r
}

type recorder struct {
	t     Thread
	soft  SoftThread // with Options.Soft
	opts  Options
	code  map[uint64]*block // decoded blocks by start address
	stops int
	depth int
}

// block is a run of instructions ending in a control transfer.
type block struct {
	start  uint64
	end    uint64 // address of the transfer
	length int    // its length
	inst   x86asm.Inst
}

var (
	errBudget = errors.New("budget spent")
	errNext   = errors.New("back at the start")
)

func (r *recorder) run(p *Path) (Outcome, error) {
	cur, err := r.t.Regs()
	if err != nil {
		return Gone, err
	}
	for {
		if r.opts.Freed != nil && r.opts.Freed() {
			return Freed, nil
		}
		if r.spent() {
			return Budget, nil
		}
		from := cur.Rip
		b, err := r.decodeOn(from)
		if err != nil {
			return Gone, err
		}
		if b.end != cur.Rip {
			st, err := r.runTo(b.end, 0)
			if err != nil {
				return outcomeOf(err), err
			}
			cur = st.Regs
			if cur.Rip != b.end {
				// A signal handler: start over from where it is.
				continue
			}
		}
		at := cur
		fall := b.end + uint64(b.length)
		if to, ok := r.emulate(b, cur); ok {
			// A conditional branch decided by the flags: the thread
			// is put where it goes, without a step.
			cur.Rip = to
			if err := r.t.SetRegs(cur); err != nil {
				return Gone, err
			}
		} else {
			st, err := r.step()
			if err != nil {
				return outcomeOf(err), err
			}
			cur = st.Regs
		}
		switch op := b.inst.Op; {
		case isCond(op):
			if r.opts.Branches == nil || r.opts.Branches(b.end) {
				p.Events = append(p.Events, Event{Kind: Branch, Addr: b.end, Taken: cur.Rip != fall, To: cur.Rip, Data: r.data(b, &at)})
			}
		case op == x86asm.CALL:
			callee := cur.Rip
			p.Events = append(p.Events, Event{Kind: Enter, Addr: callee})
			if r.throughStub(callee) {
				// Run the callee through: to the return address, at
				// the stack depth of the call, or back at the start.
				st, err := r.runThrough(fall, at.Rsp)
				if err != nil {
					return outcomeOf(err), err
				}
				cur = st.Regs
				p.Events = append(p.Events, Event{Kind: Exit, Addr: callee})
				if r.opts.StopAt != 0 && fall == r.opts.StopAt {
					return Next, nil
				}
				break
			}
			r.depth++
		case op == x86asm.JMP && r.throughStub(cur.Rip):
			// A tail call into boring code (free@plt at a function's
			// end): the callee returns for the function, to the
			// address on top of the stack. Run through, as a call and
			// the function's return.
			callee := cur.Rip
			var w [8]byte
			if n, err := r.opts.Read(at.Rsp, w[:]); err != nil || n != 8 {
				return Gone, fmt.Errorf("steptrace: return address of a tail call: %v", err)
			}
			ret := binary.LittleEndian.Uint64(w[:])
			p.Events = append(p.Events, Event{Kind: Enter, Addr: callee})
			st, err := r.runThrough(ret, at.Rsp+8)
			if err != nil {
				return outcomeOf(err), err
			}
			cur = st.Regs
			// The function's exit is its own jump, not a stub's that
			// the decoding followed on software breakpoints.
			own := b.end
			if fb, err := r.decode(from); err == nil {
				own = fb.end
			}
			p.Events = append(p.Events, Event{Kind: Exit, Addr: callee}, Event{Kind: Exit, Addr: own})
			if r.opts.StopAt != 0 && ret == r.opts.StopAt {
				return Next, nil
			}
			r.depth--
			if r.depth < -r.opts.EndDepth {
				return EndReached, nil
			}
		case op == x86asm.RET:
			p.Events = append(p.Events, Event{Kind: Exit, Addr: b.end})
			r.depth--
			if r.depth < -r.opts.EndDepth {
				return EndReached, nil
			}
		}
	}
}

// outcomeOf is the outcome of a path that ended on err.
func outcomeOf(err error) Outcome {
	switch {
	case errors.Is(err, errBudget):
		return Budget
	case errors.Is(err, errNext):
		return Next
	}
	return Gone
}

// runThrough runs a call through to its return address fall at stack
// depth rsp, with a second breakpoint on StopAt: a call left by an
// exception never returns, and the thread's next allocation at the
// path's start ends the path (errNext).
func (r *recorder) runThrough(fall, rsp uint64) (ptrace.Stop, error) {
	stop := r.opts.StopAt
	if stop == 0 || stop == fall || r.opts.StepOnly {
		return r.runTo(fall, rsp)
	}
	if r.soft != nil {
		// Left in: the thread is caught wherever it comes back.
		if err := r.soft.Insert(stop); err != nil {
			return ptrace.Stop{}, err
		}
		return r.runTo(fall, rsp)
	}
	if err := r.t.SetBreakpoint(1, stop); err != nil {
		return ptrace.Stop{}, err
	}
	defer r.t.SetBreakpoint(1, 0)
	return r.runTo(fall, rsp)
}

// throughStub reports whether a call to addr is run through: boring code,
// or a PLT stub (an indirect jump through memory) into boring code.
func (r *recorder) throughStub(addr uint64) bool {
	if r.opts.Boring != nil && r.opts.Boring(addr) {
		return true
	}
	b, err := r.decode(addr)
	if err != nil || b.inst.Op != x86asm.JMP {
		return false
	}
	// endbr64 may come first: the jump must be within the stub's first
	// instructions.
	if b.end-addr > 8 {
		return false
	}
	m, ok := b.inst.Args[0].(x86asm.Mem)
	if !ok || m.Base != x86asm.RIP || m.Index != 0 {
		return false
	}
	slot := b.end + uint64(b.length) + uint64(m.Disp)
	var w [8]byte
	if n, err := r.opts.Read(slot, w[:]); err != nil || n != 8 {
		return false
	}
	target := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
	// An unresolved lazy binding points back into the PLT: the loader
	// resolves it, which is boring too.
	return r.opts.Boring != nil && r.opts.Boring(target) || target-addr < 64
}

// runTo runs the thread to addr on breakpoint slot 0; with rsp not 0,
// until it gets there with the stack pointer at or above rsp (the return
// of a call made at rsp, not a recursive one). Signals on the way run
// their handlers at full speed: resumed without the resume flag, which a
// signal's frame would keep and so skip the breakpoint where the handler
// returns.
func (r *recorder) runTo(addr, rsp uint64) (ptrace.Stop, error) {
	return r.runFrom(addr, rsp, r.t.Cont)
}

// runFrom is runTo, resuming first with resume.
func (r *recorder) runFrom(addr, rsp uint64, resume func() (ptrace.Stop, error)) (ptrace.Stop, error) {
	if r.opts.StepOnly {
		return r.stepTo(addr, rsp)
	}
	if r.soft != nil {
		// Left in for the window: a block's end is met again.
		if err := r.soft.Insert(addr); err != nil {
			return ptrace.Stop{}, err
		}
	} else if err := r.t.SetBreakpoint(0, addr); err != nil {
		return ptrace.Stop{}, err
	}
	for {
		r.stops++
		st, err := resume()
		if err != nil {
			return st, err
		}
		if st.Interrupted {
			return st, errBudget
		}
		if st.Breakpoint && st.Regs.Rip == addr && (rsp == 0 || st.Regs.Rsp >= rsp) {
			return st, nil
		}
		if st.Breakpoint && (st.Slot == 1 || st.Slot == -1) && r.opts.StopAt != 0 && st.Regs.Rip == r.opts.StopAt {
			return st, errNext
		}
		resume = r.t.Cont
		if st.Signal != 0 {
			resume = r.t.Deliver
		}
	}
}

// stepTo is runFrom without breakpoints: a step at a time, through
// signal handlers too (a step delivers the pending signal).
func (r *recorder) stepTo(addr, rsp uint64) (ptrace.Stop, error) {
	regs, err := r.t.Regs()
	if err != nil {
		return ptrace.Stop{}, err
	}
	signal := false // the last stop was a signal's: the next step delivers it
	for {
		if !signal {
			if err := r.syscall(&regs); err != nil {
				return ptrace.Stop{}, err
			}
		}
		if r.spent() {
			return ptrace.Stop{}, errBudget
		}
		st, err := r.step1()
		if err != nil {
			return st, err
		}
		regs, signal = st.Regs, st.Signal != 0
		if st.Step && st.Regs.Rip == addr && (rsp == 0 || st.Regs.Rsp >= rsp) {
			return st, nil
		}
		if st.Step && r.opts.StopAt != 0 && st.Regs.Rip == r.opts.StopAt && addr != r.opts.StopAt {
			return st, errNext
		}
	}
}

// spent reports a path past its budget (a clock read is nothing beside
// a stop).
func (r *recorder) spent() bool {
	return r.opts.MaxStops > 0 && r.stops >= r.opts.MaxStops || !r.opts.Deadline.IsZero() && time.Now().After(r.opts.Deadline)
}

// step1 makes one step; an interrupt spends the budget.
func (r *recorder) step1() (ptrace.Stop, error) {
	r.stops++
	st, err := r.t.Step()
	if err == nil && st.Interrupted {
		err = errBudget
	}
	return st, err
}

// step steps one instruction of the path (a signal's handler, if one
// comes first, runs as runFrom runs it).
func (r *recorder) step() (ptrace.Stop, error) {
	for {
		st, err := r.step1()
		if err != nil {
			return st, err
		}
		if st.Step || st.Breakpoint {
			return st, nil
		}
		if r.opts.StepOnly && r.opts.Caught != nil && !r.opts.Caught(st.Signal) {
			// No handler: the next step delivers the signal to nothing
			// and makes the step.
			continue
		}
		// A signal came first: its handler runs at full speed and the
		// thread comes back here, at this stack depth, before the step
		// is made.
		if _, err := r.runFrom(st.Regs.Rip, st.Regs.Rsp, r.t.Deliver); err != nil {
			return st, err
		}
	}
}

// decode returns the block from addr to its control transfer.
func (r *recorder) decode(addr uint64) (*block, error) {
	if b, ok := r.code[addr]; ok {
		return b, nil
	}
	var buf [256]byte
	pc := addr
	for guard := 0; guard < 4096; guard++ {
		n, err := r.opts.Read(pc, buf[:])
		if r.soft != nil && n > 0 {
			r.soft.Original(pc, buf[:n])
		}
		if n < 16 {
			if err == nil {
				err = errors.New("short read")
			}
			return nil, fmt.Errorf("steptrace: read code at %#x: %w", pc, err)
		}
		off := 0
		for off+15 < n || off < n && n < len(buf) {
			inst, err := x86asm.Decode(buf[off:n], 64)
			if err != nil {
				return nil, fmt.Errorf("steptrace: decode at %#x: %w", pc+uint64(off), err)
			}
			if isTransfer(inst.Op) {
				b := &block{start: addr, end: pc + uint64(off), length: inst.Len, inst: inst}
				r.code[addr] = b
				return b, nil
			}
			off += inst.Len
		}
		pc += uint64(off)
	}
	return nil, fmt.Errorf("steptrace: no control transfer after %#x", addr)
}

// data returns the Options.Blocks the flags of the conditional branch
// ending b depend on, the thread standing on it with regs.
func (r *recorder) data(b *block, regs *unix.PtraceRegs) uint8 {
	if len(r.opts.Blocks) == 0 || b.end-b.start > 4096 {
		return 0
	}
	buf := make([]byte, b.end-b.start+uint64(b.length))
	if n, err := r.opts.Read(b.start, buf); err != nil || n != len(buf) {
		return 0
	}
	if r.soft != nil {
		r.soft.Original(b.start, buf)
	}
	var insts []x86asm.Inst
	var pcs []uint64
	for off := 0; off < len(buf); {
		inst, err := x86asm.Decode(buf[off:], 64)
		if err != nil {
			return 0
		}
		insts, pcs = append(insts, inst), append(pcs, b.start+uint64(off))
		off += inst.Len
	}
	return dataMask(insts, pcs, regs, r.opts.Blocks)
}

// isTransfer reports the instructions that end a block.
func isTransfer(op x86asm.Op) bool {
	return op == x86asm.CALL || op == x86asm.RET || op == x86asm.JMP || op == x86asm.LCALL ||
		op == x86asm.LRET || op == x86asm.LJMP || op == x86asm.IRET || op == x86asm.IRETD || op == x86asm.IRETQ ||
		isCond(op)
}

// isCond reports the conditional branches.
func isCond(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JCXZ, x86asm.JE, x86asm.JECXZ, x86asm.JG,
		x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JRCXZ, x86asm.JS, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return false
}

// decodeOn is decode; on software breakpoints, direct jumps are
// followed: the thread takes them by itself, and a breakpoint is set
// only where the way on is not known from the code.
func (r *recorder) decodeOn(addr uint64) (*block, error) {
	b, err := r.decode(addr)
	for hops := 0; err == nil && r.soft != nil && hops < 16; hops++ {
		rel, ok := b.inst.Args[0].(x86asm.Rel)
		if b.inst.Op != x86asm.JMP || !ok {
			break
		}
		b, err = r.decode(b.end + uint64(b.length) + uint64(int64(rel)))
	}
	return b, err
}

// emulate returns where the conditional branch ending b goes from regs
// (the thread standing on it), on software breakpoints; ok false: it is
// to be stepped.
func (r *recorder) emulate(b *block, regs unix.PtraceRegs) (uint64, bool) {
	rel, ok := b.inst.Args[0].(x86asm.Rel)
	if r.soft == nil || !ok || b.inst.Op == x86asm.JMP {
		return 0, false
	}
	taken, ok := condTaken(b.inst.Op, regs.Eflags)
	if !ok {
		return 0, false
	}
	fall := b.end + uint64(b.length)
	if taken {
		return fall + uint64(int64(rel)), true
	}
	return fall, true
}

// condTaken evaluates a conditional jump's condition on the flags; ok
// false for the jumps that test a register (jrcxz, loop), stepped.
func condTaken(op x86asm.Op, flags uint64) (taken, ok bool) {
	cf, pf, zf := flags&1 != 0, flags&(1<<2) != 0, flags&(1<<6) != 0
	sf, of := flags&(1<<7) != 0, flags&(1<<11) != 0
	switch op {
	case x86asm.JO:
		return of, true
	case x86asm.JNO:
		return !of, true
	case x86asm.JB:
		return cf, true
	case x86asm.JAE:
		return !cf, true
	case x86asm.JE:
		return zf, true
	case x86asm.JNE:
		return !zf, true
	case x86asm.JBE:
		return cf || zf, true
	case x86asm.JA:
		return !cf && !zf, true
	case x86asm.JS:
		return sf, true
	case x86asm.JNS:
		return !sf, true
	case x86asm.JP:
		return pf, true
	case x86asm.JNP:
		return !pf, true
	case x86asm.JL:
		return sf != of, true
	case x86asm.JGE:
		return sf == of, true
	case x86asm.JLE:
		return zf || sf != of, true
	case x86asm.JG:
		return !zf && sf == of, true
	}
	return false, false
}
