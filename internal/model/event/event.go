// Package event defines the records that flow from a recorded process to
// the heap model: the common currency of the wire decoder (live runs), the
// trace file reader (offline reports) and the model. It holds plain data
// only and imports nothing of the engine.
package event

import "fmt"

// Kind says what an Event records.
type Kind uint8

// The kinds of events. Fields not named for a kind are zero. Where a
// kind gives a field its own meaning, an accessor of kinds.go names it
// (AllocTime, AggFree, ForkID, ...).
const (
	// Alloc: an allocating call returned Addr (0: it failed) for Size
	// bytes, called from Stack. Addr2, when not 0, is the time of the
	// allocation, which then came later than Time says (the agent kept
	// it pending; Time orders the event among the others): AllocTime.
	Alloc Kind = iota + 1
	// Free: Addr is about to be released (recorded before the real free).
	// Stack is the free's stack when free stacks are recorded, else 0.
	// Aux is 1 when the block was its thread's latest allocation (a
	// temporary one), else 0: Temporary.
	Free
	// ReallocBegin: realloc of Addr is about to run, called from Stack
	// (0: unknown); from here on the address may be handed out again.
	ReallocBegin
	// Realloc: realloc(Addr, Size) returned Addr2 (NewAddr). Addr2 == 0
	// means it failed (Size > 0: Addr is still live) or freed Addr (Size
	// == 0).
	Realloc
	// StackDef defines stack id Stack as Frames (return addresses,
	// innermost first).
	StackDef
	// ModuleLoad: Module was mapped.
	ModuleLoad
	// ModuleUnload: module Module.ID went away (only ID is set).
	ModuleUnload
	// ThreadStart: thread Thread began recording; Addr is its pthread_t
	// (Pthread).
	ThreadStart
	// ThreadExit: thread Thread is exiting (it may still free a little).
	ThreadExit
	// ThreadName: the thread Thread (when 0: the one whose pthread_t, as
	// ThreadStart's Addr gave it, is Addr) is now called Text.
	ThreadName
	// Fork: the process is about to fork; Aux is the fork id (ForkID).
	Fork
	// ForkDone: fork Aux returned Addr (the child's pid, or -errno):
	// ForkID, ForkResult.
	ForkDone
	// Exec: the process image is about to exec Text.
	Exec
	// Exit: the process called exit (Size 1) or _exit (Size 2) with
	// status Aux: ExitCall, ExitStatus.
	Exit
	// ProcessStart: the collector registered a process image (Process).
	ProcessStart
	// ProcessEnd: the process image ended (Process carries the outcome).
	ProcessEnd
	// Clock: a clock calibration (Clock).
	Clock
	// Agg: Addr pairs of an allocation at Stack by Fn and a free by the
	// same thread at stack uint32(Aux) by Fn(Aux>>32), folded by the agent
	// instead of recorded one by one: Size bytes, Addr2 of them
	// temporary (freed with no other allocation in between). AggPairs,
	// AggFree and AggTemporary read them; SetAgg packs them.
	Agg
	// Scan: the collector stopped the process and classified its live
	// blocks by reachability (Scan).
	Scan
	// RootCause: why the blocks of the site whose agent stack id is
	// Stack are not freed, as the root-cause analysis found it
	// (RootCause).
	RootCause
	// ScopeBegin: thread Thread entered the scope named Text (a
	// LEAKPATH_SCOPE or leakpath_scope_begin of agent/include/leakpath.h)
	// at depth Aux (1: none other open on the thread; 0: unknown):
	// ScopeDepth.
	ScopeBegin
	// ScopeEnd: thread Thread left its innermost scope, at depth Aux
	// (0: unknown).
	ScopeEnd
	// StaleEpoch: the collector read which pages of the agent's slot pool
	// were touched since the previous epoch (Stale), and cleared the
	// accessed bits again. Aux 1: a reading between epochs (before a scan
	// touches the memory), which takes the accesses and ages nothing
	// (BetweenEpochs).
	StaleEpoch
	// Pending: the agent's threads held Size bytes of allocations pending
	// at Time (allocated, not recorded yet: see Agg), as thread Thread
	// counted them at a new high of its own, after recording a big block,
	// or exiting. The heap in use then is what the records say plus
	// these.
	Pending
	// Refree: the thread's next Free or Realloc is of Addr, where the
	// agent folded a block (Size: 0, not kept) allocated at Stack by Fn and
	// freed by Fn(Aux) returning to Addr2 (the pair left no records:
	// RefreeOf).
	// Unless a block is live at Addr by then, that release frees the
	// folded block a second time.
	Refree
	// Ignore: the block Addr points into (its start or inside it) is no
	// leak, as the program says (__lsan_ignore_object, or allocated by a
	// thread between __lsan_disable and __lsan_enable).
	Ignore
	// RootRegion: the program registered (Aux 1) or unregistered (Aux 0)
	// [Addr, Addr+Size) as a root region of leak scans
	// (__lsan_register_root_region): Registered.
	RootRegion
	// LeakCheckOff: the program's __lsan_is_turned_off returned nonzero
	// at its exit: no leak check for its image.
	LeakCheckOff
	// PoolCreate: the program created the pool named Addr (an address of
	// its choosing) at Stack (LEAKPATH_POOL_CREATE of
	// agent/include/leakpath.h).
	PoolCreate
	// PoolDestroy: the pool Addr ended at Stack, and with it the objects
	// it still had.
	PoolDestroy
	// PoolAlloc: the program handed out Size bytes at Addr from pool Aux
	// (Pool, as for every pool event), at Stack (Fn PoolAllocFn): a block
	// of its own.
	PoolAlloc
	// PoolFree: the object at Addr of pool Aux is gone; Stack is the
	// call's when free stacks are recorded, else 0 (Fn PoolFreeFn).
	PoolFree
	// AllocFamilyFn: the agent found the allocator function Text (recorded as
	// Fn) at Addr, which none of its hooks sees (the executable's own
	// malloc, or a prefixed family's), and traced it by patching its
	// entry (Aux 1) or could not (Aux 2: its first instructions could
	// not be moved; 3: the process had threads; 4: the code could not be
	// written), or (Aux 5) that the malloc its hooks call is another
	// library's than the C library's (traced as the C library's):
	// FamilyOutcome.
	AllocFamilyFn
)

var kindNames = [...]string{
	Alloc: "alloc", Free: "free", ReallocBegin: "realloc-begin", Realloc: "realloc",
	StackDef: "stack", ModuleLoad: "module", ModuleUnload: "module-unload",
	ThreadStart: "thread-start", ThreadExit: "thread-exit", ThreadName: "thread-name",
	Fork: "fork", ForkDone: "fork-done", Exec: "exec", Exit: "exit",
	ProcessStart: "process-start", ProcessEnd: "process-end", Clock: "clock", Agg: "agg", Scan: "scan",
	RootCause: "root-cause", ScopeBegin: "scope-begin", ScopeEnd: "scope-end",
	StaleEpoch: "stale-epoch", Pending: "pending", Refree: "refree",
	Ignore: "ignore", RootRegion: "root-region", LeakCheckOff: "leak-check-off",
	PoolCreate: "pool-create", PoolDestroy: "pool-destroy", PoolAlloc: "pool-alloc", PoolFree: "pool-free",
	AllocFamilyFn: "alloc-family",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Fn is the allocator function behind a heap event.
type Fn uint8

// The allocator functions, numbered as on the wire.
const (
	Malloc Fn = iota + 1
	Calloc
	ReallocFn
	ReallocArray
	FreeFn
	Memalign
	PosixMemalign
	AlignedAlloc
	Valloc
	Pvalloc
	New
	NewArray
	Delete
	DeleteArray
	PoolAllocFn // an object of a program's pool (LEAKPATH_POOL_ALLOC)
	PoolFreeFn  // its release (LEAKPATH_POOL_FREE, or its pool's end)
	NumFn       // one past the last
)

// FnNames are the names of the functions as the JSON report spells them.
var FnNames = [NumFn]string{
	Malloc: "malloc", Calloc: "calloc", ReallocFn: "realloc", ReallocArray: "reallocarray",
	FreeFn: "free", Memalign: "memalign", PosixMemalign: "posix_memalign",
	AlignedAlloc: "aligned_alloc", Valloc: "valloc", Pvalloc: "pvalloc",
	New: "new", NewArray: "new_array", Delete: "delete", DeleteArray: "delete_array",
	PoolAllocFn: "pool_alloc", PoolFreeFn: "pool_free",
}

func (f Fn) String() string {
	if f < NumFn && FnNames[f] != "" {
		return FnNames[f]
	}
	return fmt.Sprintf("fn(%d)", uint8(f))
}

// Family groups functions whose blocks must be released by the same kind
// of call: malloc-family memory by free, new by delete, new[] by delete[].
type Family uint8

// The families.
const (
	FamilyNone Family = iota
	FamilyMalloc
	FamilyNew
	FamilyNewArray
	FamilyPool
)

// AllocFamily is the family of memory returned by f.
func (f Fn) AllocFamily() Family {
	switch f {
	case New:
		return FamilyNew
	case NewArray:
		return FamilyNewArray
	case PoolAllocFn:
		return FamilyPool
	case 0, FreeFn, Delete, DeleteArray, PoolFreeFn:
		return FamilyNone
	}
	return FamilyMalloc
}

// FreeFamily is the family of memory that f may release.
func (f Fn) FreeFamily() Family {
	switch f {
	case FreeFn, ReallocFn, ReallocArray:
		return FamilyMalloc
	case Delete:
		return FamilyNew
	case DeleteArray:
		return FamilyNewArray
	case PoolFreeFn:
		return FamilyPool
	}
	return FamilyNone
}

// Limits of what an event may carry, so that a model that keeps a dense
// table by process image or by stack id stays bounded (256 MB, 32 MB)
// when a trace or a target's ring is corrupt. A process defines its
// stacks with ids counted from 1 (the agent's threads share the count):
// 64M definitions would be gigabytes of trace; a trace of 4M images,
// millions of processes recorded.
const (
	MaxStackID = 1 << 26 // Event.Stack of a StackDef
	MaxImages  = 1 << 22 // Event.Proc, ProcessInfo.Index
)

// Event is one thing that happened in a recorded process. It is 64 bytes
// with a single pointer: millions of them pass through slices, and what
// only rare kinds carry lives behind X.
type Event struct {
	Kind   Kind
	Fn     Fn
	Proc   uint32 // the collector's index of the process image
	Thread int32  // OS thread id
	Stack  uint32 // stack id, per process image; 0: none
	Time   uint64 // agent clock ticks (see ClockInfo)
	Addr   uint64
	Addr2  uint64
	Size   uint64
	Aux    uint64
	X      *Extra // nil for heap events; read only: events may share one
}

// Extra holds what only some kinds of event carry.
type Extra struct {
	Frames    []uint64       // StackDef
	Module    *Module        // ModuleLoad, ModuleUnload
	Text      string         // ThreadName, Exec
	Process   *ProcessInfo   // ProcessStart, ProcessEnd
	Clock     *ClockInfo     // ProcessStart, Clock
	Scan      *ScanInfo      // Scan
	RootCause *RootCauseInfo // RootCause
	Stale     *StaleInfo     // StaleEpoch
}

// Ext returns e's extra part, creating it if absent.
func (e *Event) Ext() *Extra {
	if e.X == nil {
		e.X = &Extra{}
	}
	return e.X
}

// Frames returns the frames of a StackDef (nil for other kinds).
func (e *Event) Frames() []uint64 {
	if e.X == nil {
		return nil
	}
	return e.X.Frames
}

// ModuleInfo returns the module of a ModuleLoad or ModuleUnload, or nil.
func (e *Event) ModuleInfo() *Module {
	if e.X == nil {
		return nil
	}
	return e.X.Module
}

// ProcessInfo returns the process of a ProcessStart or ProcessEnd, or nil.
func (e *Event) ProcessInfo() *ProcessInfo {
	if e.X == nil {
		return nil
	}
	return e.X.Process
}

// ClockInfo returns the clock of a ProcessStart or Clock event, or nil.
func (e *Event) ClockInfo() *ClockInfo {
	if e.X == nil {
		return nil
	}
	return e.X.Clock
}

// Text returns the text of a ThreadName or Exec event.
func (e *Event) Text() string {
	if e.X == nil {
		return ""
	}
	return e.X.Text
}

// ScanInfo returns the result of a Scan event, or nil.
func (e *Event) ScanInfo() *ScanInfo {
	if e.X == nil {
		return nil
	}
	return e.X.Scan
}

// RootCauseInfo returns the analysis of a RootCause event, or nil.
func (e *Event) RootCauseInfo() *RootCauseInfo {
	if e.X == nil {
		return nil
	}
	return e.X.RootCause
}

// StaleInfo returns the reading of a StaleEpoch event, or nil.
func (e *Event) StaleInfo() *StaleInfo {
	if e.X == nil {
		return nil
	}
	return e.X.Stale
}

// StaleInfo is one epoch's reading of the slot pool: Count pages of Page
// bytes from Base, of which Watched were pages of their own (a VMA each:
// only those can be told apart), and Referenced, a bitset by page index
// (bit i of word i/64), those touched since the previous epoch; a page not
// watched counts as touched.
type StaleInfo struct {
	Base        uint64
	Page, Count uint32
	Watched     uint32
	Referenced  []uint64
}

// Touched reports whether page i was referenced.
func (s *StaleInfo) Touched(i uint32) bool {
	return int(i/64) < len(s.Referenced) && s.Referenced[i/64]>>(i%64)&1 != 0
}

// RootCauseStatus says whether a root cause was found.
type RootCauseStatus uint8

// The statuses of a root-cause analysis.
const (
	// RootCauseFound: the functions and branches where freed and leaked
	// executions part are known.
	RootCauseFound RootCauseStatus = iota + 1
	// RootCauseInconclusive: executions were traced; nothing told them
	// apart (or they all ended the same way).
	RootCauseInconclusive
	// RootCauseNotTraced: no execution was traced.
	RootCauseNotTraced
	NumRootCauseStatus
)

var rootCauseNames = [...]string{RootCauseFound: "found", RootCauseInconclusive: "inconclusive", RootCauseNotTraced: "not_traced"}

func (s RootCauseStatus) String() string {
	if s > 0 && s < NumRootCauseStatus {
		return rootCauseNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// RootCauseInfo is why a site's blocks are not freed (JP2009-217617's culprit function and branch).
type RootCauseInfo struct {
	Status                RootCauseStatus
	Traced, Freed, Leaked uint32
	// Functions: addresses in the functions where freed and leaked
	// executions part, most paths first.
	Functions []uint64
	// Branches: the branches whose direction separates them.
	Branches []RootBranch
	Note     string // why there is no answer, if there is none
	// What it cost: the traced thread's time in windows, the ptrace
	// stops, and when the last path was recorded since the run started.
	WindowNs, Stops, FoundAfterNs uint64
}

// RootBranch is a conditional branch and the way the leaking executions
// went from it: taken or not, to To.
type RootBranch struct {
	Addr, To       uint64
	LeaksWhenTaken bool
}

// LeakKind is how a live block is reachable, with memcheck's names.
type LeakKind uint8

// The leak kinds; Unclassified: no scan saw the block.
const (
	Unclassified LeakKind = iota
	Definite
	Indirect
	Possible
	Reachable
	NumLeakKinds
)

var leakKindNames = [NumLeakKinds]string{"unclassified", "definite", "indirect", "possible", "reachable"}

func (k LeakKind) String() string {
	if k < NumLeakKinds {
		return leakKindNames[k]
	}
	return fmt.Sprintf("leakkind(%d)", uint8(k))
}

// ParseLeakKind returns the kind named s ("definite", ...).
func ParseLeakKind(s string) (LeakKind, bool) {
	for k, n := range leakKindNames {
		if n == s {
			return LeakKind(k), true
		}
	}
	return 0, false
}

// ScanInfo is what a scan of a stopped process found.
type ScanInfo struct {
	// Blocks are the live blocks it classified, by address.
	Blocks []ScannedBlock
	// Suppressions is the text the program's __lsan_default_suppressions
	// returned, if it has one.
	Suppressions string
	// PauseNs is how long the process was stopped; RootBytes and
	// HeapBytes how much memory the scan read.
	PauseNs, RootBytes, HeapBytes uint64
	// Error says why the scan failed, if it did (Blocks is then empty).
	Error string
	// Part numbers the events of one scan (a big one travels in several):
	// 0 for the first, the only one with the figures and texts.
	Part uint32
	// Live marks the scan of a snapshot: the program went on running, so
	// its kinds say nothing of the blocks at exit.
	Live bool
	// Typed marks a scan that also typed its blocks and followed their
	// references (run --types). Types are the types found, Names the
	// roots and fields that hold blocks; ScannedBlock.Type and Via index
	// them from 1. Both travel in Part 0 only.
	Typed bool
	Types []TypeDef
	Names []string
	// TypeNs is how long typing took (graph, types, paths, dominators),
	// included in PauseNs.
	TypeNs uint64
}

// TypeDef is a type of heap objects: its qualified name, where it is
// defined, and the size of one (0 unknown).
type TypeDef struct {
	Name, File string
	Line       uint32
	Size       uint64
}

// Evidence of a block's type (ScannedBlock.Evidence).
const (
	TypeUnknown   = 0
	TypeAllocSite = 1 // the call site's DWARF allocation type
	TypeVtable    = 2 // the vtable pointer in its first word
	TypeCtor      = 3 // the constructor called on it
	TypeField     = 4 // the DWARF type of the pointer to it
	NumEvidence   = 5
)

// ScannedBlock is one block a scan classified.
type ScannedBlock struct {
	Addr, Size uint64
	Kind       LeakKind
	// Owner is the address of the definite block whose clique holds an
	// indirect block; 0 otherwise.
	Owner uint64
	// Of a typed scan: the block's type (index+1 in ScanInfo.Types, 0
	// unknown) and what typed it (TypeVtable ...); Holder, the block
	// that holds it on its shortest path to root (0: a root does, or
	// none); Via, what holds it (index+1 in ScanInfo.Names: a root, a
	// field of Holder; 0: nothing reaches it); Retained, the bytes it
	// keeps alive (itself and what it dominates).
	Type     uint32
	Evidence uint8
	Holder   uint64
	Via      uint32
	Retained uint64
}

// Module describes a loaded ELF object.
type Module struct {
	ID       uint32 // per process image
	Path     string // as the loader knows it; the executable's real path
	BuildID  []byte
	Bias     uint64 // load bias: runtime address = Bias + ELF virtual address
	Segments []Segment
}

// Segment is one PT_LOAD segment of a module.
type Segment struct {
	Vaddr, Memsz uint64
	Flags        uint32 // PF_R/PF_W/PF_X
	Offset       uint64 // file offset
}

// Contains reports whether the runtime address addr lies in one of the
// module's segments.
func (m *Module) Contains(addr uint64) bool {
	for _, s := range m.Segments {
		if addr >= m.Bias+s.Vaddr && addr < m.Bias+s.Vaddr+s.Memsz {
			return true
		}
	}
	return false
}

// ProcessInfo describes a process image (ProcessStart) and, at its end,
// how it ended (ProcessEnd).
type ProcessInfo struct {
	Index      uint32 // the collector's index, equal to Event.Proc
	PID, PPID  int32
	ParentProc int32  // index of the image this one forked from, or -1
	ForkID     uint64 // the parent's fork id (0: not a fork child)
	ExecOf     int32  // index of the image this one replaced by exec, or -1
	Argv       []string
	Exe        string
	// Outcome, set on ProcessEnd.
	Exited   bool  // ended with an exit status
	Code     int32 // exit status when Exited
	Signal   int32 // the signal that killed it, when not Exited; 0: unknown
	ExecdOut bool  // replaced by exec
	// Attached: recorded from an attach to the running process (set at
	// the start): blocks allocated before are unknown, their frees are
	// not errors. Detached, at the end: recording stopped by a detach,
	// the process runs on.
	Attached, Detached bool
}

// ClockInfo relates agent ticks to time.
type ClockInfo struct {
	Ticks       uint64  // agent ticks at Mono
	Mono        uint64  // CLOCK_MONOTONIC ns
	Real        uint64  // CLOCK_REALTIME ns at Mono
	TicksPerSec float64 // 1e9 when ticks are nanoseconds
}

// Nanos converts agent ticks to CLOCK_MONOTONIC nanoseconds.
func (c *ClockInfo) Nanos(ticks uint64) int64 {
	if c == nil || c.TicksPerSec == 0 {
		return int64(ticks)
	}
	d := float64(int64(ticks-c.Ticks)) / c.TicksPerSec * 1e9
	return int64(c.Mono) + int64(d)
}
