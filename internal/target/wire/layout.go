// Package wire is the collector's side of the agent↔collector format
// defined in agent/lp_wire.h: the layout of the shared region and the
// decoding of ring records into events. It is a parser: it knows nothing of
// the heap model. layout_test.go checks every constant here against the C
// header.
package wire

import "github.com/leakpath/leakpath/internal/model/event"

// Version is the wire version this collector speaks (LP_WIRE_VERSION).
const Version = 14

// Magic numbers.
const (
	RegionMagic = 0x4e4f494745524c50 // "PLREGION"
	HelloMagic  = 0x4f4c4c4548504c   // "LPHELLO"
)

// Sizes.
const (
	HeaderSize  = 4096
	SlotSize    = 128
	MaxDepth    = 128
	Pend        = 256   // pending allocations per thread
	Agg         = 64    // aggregates per thread
	FoldSize    = 16384 // bytes per fold area
	HelloSize   = 32
	WelcomeSize = 16
)

// Record types (LP_REC_*).
const (
	RecPad          = 1
	RecAlloc        = 2
	RecFree         = 3
	RecReallocBegin = 4
	RecRealloc      = 5
	RecStack        = 6
	RecModule       = 7
	RecModuleUnload = 8
	RecThreadStart  = 9
	RecThreadExit   = 10
	RecFork         = 11
	RecForkDone     = 12
	RecExec         = 13
	RecExecFailed   = 14
	RecExit         = 15
	RecClock        = 16
	RecThreadName   = 17
	RecAgg          = 18
	RecAllocLate    = 19
	RecScopeBegin   = 20 // aux=depth; w1 ts, then the name, NUL padded
	RecScopeEnd     = 21 // aux=depth; w1 ts
	RecPending      = 22 // w1 ts, w2 bytes the threads hold pending
	// RecRefree: the thread's next free or realloc is of w2, a block a
	// fold freed: fn=alloc fn, aux=alloc stack; w1 ts, w2 addr, w3 0,
	// w4 return address of the folding free, w5 its fn.
	RecRefree = 23
	// RecIgnore: w1 ts, w2 an address in a block that is no leak
	// (__lsan_ignore_object, or allocated under __lsan_disable).
	RecIgnore = 24
	// RecRootRegion: aux 1 registered, 0 unregistered; w1 ts, w2 addr,
	// w3 size (__lsan_register_root_region and its undoing).
	RecRootRegion = 25
	// RecPool: aux=stack (0: none); w1 ts, w2 the pool's handle, w3
	// PoolCreate or PoolDestroy.
	RecPool = 26
	// RecPoolAlloc: aux=stack; w1 ts, w2 addr, w3 size, w4 the pool.
	RecPoolAlloc = 27
	// RecPoolFree: aux=stack (0: none); w1 ts, w2 addr, w3 the pool.
	RecPoolFree = 28
	// RecFamily: aux=the function (Fn); w1 ts, w2 its entry's address,
	// w3 Family* (what the agent did with it), then its name, NUL padded.
	RecFamily = 29
	RecMax    = 29
)

// RecFamily's outcomes (LP_FAMILY_*): the model's names for them.
const (
	FamilyTraced     = event.FamilyTraced
	FamilyRefused    = event.FamilyRefused
	FamilyThreads    = event.FamilyThreads
	FamilyFailed     = event.FamilyFailed
	FamilyHooked     = event.FamilyHooked
	FamilyUnfollowed = event.FamilyUnfollowed
	FamilyNoSlot     = event.FamilyNoSlot

	FamilyNameMax = 63  // bytes of a RecFamily's name
	FamiliesMax   = 256 // bytes of the header's alloc_families, NUL included
)

// RecPool's operations (LP_POOL_*).
const (
	PoolCreate  = 1
	PoolDestroy = 2
)

// StaleMaxSize is the largest block the agent serves from the slot pool
// (LP_STALE_MAX_SIZE).
const StaleMaxSize = 4080

// ScopeNameMax is the most bytes of a scope's name the agent sends
// (LP_SCOPE_NAME_MAX).
const ScopeNameMax = 127

// Requests of the program (LP_ASK_*): the states of the header's
// ask_state, and the kinds of ask_kind.
const (
	AskIdle      = 0
	AskClaimed   = 1 // a thread fills in the request
	AskRequested = 2
	AskTaken     = 3 // the collector is serving it
	AskDone      = 4 // ask_result is written

	AskSnapshot  = 1
	AskLeakCheck = 2

	AskLabelMax = 64 // bytes of ask_label, its NUL included
)

// FnTemporary flags a FREE record's function: the block was the thread's
// latest allocation (LP_FN_TEMPORARY).
const FnTemporary = 0x80

// Exit hold states (LP_HOLD_*), in the header's hold word.
const (
	HoldNone      = 0
	HoldRequested = 1 // by the agent, at exit
	HoldScanning  = 2 // the collector took the request
	HoldReleased  = 3 // the collector is done: the process may exit

	// HoldFlagOff, in the header's hold_flags: the program's
	// __lsan_is_turned_off returned nonzero (LP_HOLD_F_OFF).
	HoldFlagOff = 1
)

// Root-cause window states (LP_TRACE_*), in the header's trace_state.
const (
	TraceIdle      = 0
	TraceRequested = 1 // by a thread that allocated at a suspect site
	TraceTaken     = 2 // the collector attached to it
)

// Suspects is how many suspect sites the header arms at once
// (LP_SUSPECTS).
const Suspects = 16

// Header flags (LP_HF_*).
const (
	FlagClockTSC   = 1
	FlagFreeStacks = 2
	FlagFold       = 4
	FlagHoldExit   = 8  // hold the process at exit for a scan
	FlagStale      = 16 // serve sampled small blocks from the slot pool (stale objects)
	// FlagFoldFreeStacks: folded pairs keep their free's stack too.
	FlagFoldFreeStacks = 32
	// FlagExactTimes: pending allocations keep exact own times (else the
	// collector's clock in the region, OffNowTS: up to about a millisecond
	// early).
	FlagExactTimes = 64
)

// Slot states (LP_SLOT_*).
const (
	SlotFree   = 0
	SlotActive = 1
	SlotExited = 2
	SlotTaking = 3
)

// Collector states (LP_COLLECTOR_*).
const (
	CollectorAlive = 1
	CollectorGone  = 2
)

// Byte offsets of struct lp_header fields.
const (
	OffMagic             = 0
	OffVersion           = 8
	OffHeaderSize        = 12
	OffSlotCount         = 16
	OffRingSize          = 20
	OffDataOffset        = 24
	OffRegionSize        = 32
	OffFlags             = 40
	OffMaxDepth          = 44
	OffCollectorPID      = 48
	OffPID               = 52
	OffSlotsUsed         = 56
	OffAgentState        = 60
	OffNextStackID       = 64
	OffNextModuleID      = 72
	OffClockTS           = 80
	OffClockMono         = 88
	OffClockReal         = 96
	OffLostRecords       = 104
	OffFoldOffset        = 112
	OffBigSlots          = 120 // the first rings, of OffBigRingSize bytes
	OffBigRingSize       = 124
	OffDoorbell          = 128
	OffCollectorSleeping = 132
	OffProgress          = 192
	OffProducersWaiting  = 196
	OffCollectorState    = 256
	OffNowTS             = 264 // the collector's clock for pending allocations' times
	OffHold              = 320 // futex word: Hold*
	OffHoldFlags         = 324 // HoldFlag*
	OffHoldSupp          = 328
	OffOwnTable          = 336
	OffTLSOffset         = 344
	OffTLSSize           = 352
	OffHoldSP            = 360 // the holding thread's stack pointer; 0: not known
	OffHoldTP            = 368 // its thread pointer
	OffHoldRegs          = 376 // address of the program's callee-saved registers; 0: spilled above OffHoldSP
	OffTraceState        = 384 // futex word: Trace*
	OffTraceTID          = 388
	OffTraceAddr         = 392
	OffTraceSize         = 400
	OffTraceStack        = 408
	OffSuspectsN         = 412
	OffSuspects          = 416 // Suspects uint32 stack ids
	OffWatchAddr         = 480
	OffWatchFreed        = 488
	OffTraceSkip         = 492
	OffAskState          = 512 // futex word: Ask*
	OffAskTID            = 516
	OffAskKind           = 520
	OffAskResult         = 528
	OffAskLabel          = 536
	OffAskSP             = 600  // the asking thread's stack pointer at its call; 0: not known
	OffAskRegs           = 608  // address of its callee-saved registers there
	OffStaleSlots        = 1024 // collector: slot pages in the pool
	OffStaleSample       = 1028 // collector: sample every Kth allocation of a site
	OffStaleBase         = 1032 // agent: the first slot page
	OffStaleCount        = 1040 // agent: slot pages
	OffStalePage         = 1044 // agent: bytes per slot page
	OffAllocFamilies     = 1048 // collector: prefixes of more allocator families (run --alloc-family)
	OffStaleEpochs       = 1304 // collector: stale epochs ended so far

	// struct lp_own_table
	OwnMax         = 256
	OffOwnCount    = 0
	OffOwnOverflow = 4
	OffOwnRanges   = 8
	OwnRangeSize   = 16
	DeadMax        = 256  // entries of the dead stacks' ring
	OffOwnDeadNext = 4104 // the next entry the agent writes
	OffOwnDead     = 4112 // DeadMax struct lp_dead_stack: exited threads' stacks
	DeadSize       = 32   // its size: addr, len (the dead frames), tp
)

// Byte offsets of struct lp_slot fields.
const (
	OffSlotHead  = 0
	OffSlotState = 8
	OffSlotTID   = 12
	OffSlotTail  = 64
)

// Byte offsets in struct lp_fold and its entries.
const (
	OffFoldHead      = 0
	OffFoldCount     = 4
	OffFoldPendBytes = 8 // the agent's count of bytes pending (fold.c)
	OffFoldPend      = 64
	PendingSize      = 32
	OffPendAddr      = 0
	OffPendSize      = 8
	OffPendTS        = 16
	OffPendStack     = 24
	OffPendFn        = 28
	OffFoldAgg       = 8256
	AggSize          = 56
	OffAggAStack     = 0
	OffAggFStack     = 4
	OffAggAFn        = 8
	OffAggFFn        = 9
	OffAggUsed       = 10
	OffAggPairs      = 16
	OffAggBytes      = 24
	OffAggTemp       = 32
	OffAggFirst      = 40
	OffAggLast       = 48
)

// Byte offsets of struct lp_hello fields.
const (
	OffHelloMagic     = 0
	OffHelloVersion   = 8
	OffHelloPID       = 12
	OffHelloPPID      = 16
	OffHelloParentPID = 20
	OffHelloForkID    = 24
)
