package event

// Typed access to the fields a kind overloads. Event keeps every kind in
// one 64-byte shape, so Addr, Addr2, Size and Aux mean different things
// per kind (see the Kind constants); the accessors and setters below name
// them, and hold the packings and sentinels in one place. Each is
// meaningful only for the kinds it names.

// AllocTime returns when an Alloc's allocation happened, and whether the
// agent kept it pending: then it happened at Addr2, before Time (which
// orders the event among the others); else at Time.
func (e *Event) AllocTime() (t uint64, late bool) {
	if e.Addr2 != 0 {
		return e.Addr2, true
	}
	return e.Time, false
}

// SetLate marks an Alloc as kept pending by the agent since at; an at of
// 0 is taken as 1, lest the allocation read as an ordinary one.
func (e *Event) SetLate(at uint64) { e.Addr2 = max(at, 1) }

// Temporary reports whether a Free's block was its thread's latest
// allocation (no other allocation on the thread in between).
func (e *Event) Temporary() bool { return e.Aux&1 != 0 }

// SetTemporary marks a Free's block as its thread's latest allocation.
func (e *Event) SetTemporary() { e.Aux = 1 }

// NewAddr returns what a Realloc returned: the block's new address; 0
// when it failed (Size > 0) or freed Addr (Size 0).
func (e *Event) NewAddr() uint64 { return e.Addr2 }

// Pthread returns the pthread_t of a ThreadStart's thread, or of a
// ThreadName's when its Thread is 0.
func (e *Event) Pthread() uint64 { return e.Addr }

// ForkID returns the fork id of a Fork or a ForkDone.
func (e *Event) ForkID() uint64 { return e.Aux }

// ForkResult returns what the fork of a ForkDone returned: the child's
// pid, or -errno.
func (e *Event) ForkResult() int64 { return int64(e.Addr) }

// SetFork makes e a Fork of fork id.
func (e *Event) SetFork(id uint64) { e.Kind, e.Aux = Fork, id }

// SetForkDone makes e the ForkDone of fork id, which returned result
// (the child's pid, or -errno, as a word).
func (e *Event) SetForkDone(id, result uint64) { e.Kind, e.Aux, e.Addr = ForkDone, id, result }

// How an Exit's process called for its end (ExitCall).
const (
	ExitByExit  = 1 // exit(3): atexit handlers and destructors run
	ExitByUExit = 2 // _exit(2): nothing more runs
)

// ExitStatus returns the status an Exit's process passed to exit or
// _exit.
func (e *Event) ExitStatus() int32 { return int32(e.Aux) }

// ExitCall returns how an Exit's process called for its end: ExitByExit
// or ExitByUExit (another value: unknown).
func (e *Event) ExitCall() uint64 { return e.Size }

// SetExit makes e an Exit with status, called as call (ExitByExit ...).
func (e *Event) SetExit(status uint32, call uint64) {
	e.Kind, e.Aux, e.Size = Exit, uint64(status), call
}

// AggPairs returns the allocation and free pairs an Agg folds.
func (e *Event) AggPairs() uint64 { return e.Addr }

// AggTemporary returns how many of an Agg's pairs were temporary (freed
// with no other allocation on the thread in between).
func (e *Event) AggTemporary() uint64 { return e.Addr2 }

// AggFree returns the stack id and the function of the frees an Agg
// folds (packed in Aux: the stack in the low 32 bits, the function
// above).
func (e *Event) AggFree() (stack uint32, fn Fn) { return uint32(e.Aux), Fn(e.Aux >> 32) }

// SetAgg sets what an Agg folds: pairs pairs of bytes in all, temporary
// of them temporary, freed at stack by fn (the allocations are Stack's,
// by Fn).
func (e *Event) SetAgg(pairs, bytes, temporary uint64, stack uint32, fn Fn) {
	e.Addr, e.Size, e.Addr2, e.Aux = pairs, bytes, temporary, uint64(stack)|uint64(fn)<<32
}

// ScopeDepth returns the depth of a ScopeBegin's or a ScopeEnd's scope
// (1: the thread's outermost; 0: unknown).
func (e *Event) ScopeDepth() uint64 { return e.Aux }

// SetScope makes e a ScopeBegin or ScopeEnd (kind) at depth.
func (e *Event) SetScope(kind Kind, depth uint64) { e.Kind, e.Aux = kind, depth }

// BetweenEpochs reports whether a StaleEpoch is a reading between epochs
// (before a scan touches the memory): it takes the accesses and ages
// nothing.
func (e *Event) BetweenEpochs() bool { return e.Aux == 1 }

// SetBetweenEpochs marks a StaleEpoch as a reading between epochs.
func (e *Event) SetBetweenEpochs() { e.Aux = 1 }

// RefreeOf returns, of a Refree, the function of the folded free and
// the address it returned to (0: unknown).
func (e *Event) RefreeOf() (fn Fn, ret uint64) { return Fn(e.Aux), e.Addr2 }

// SetRefreeOf sets a Refree's folded free: by fn, returning to ret.
func (e *Event) SetRefreeOf(fn Fn, ret uint64) { e.Aux, e.Addr2 = uint64(fn), ret }

// Registered reports whether a RootRegion registers its region (else it
// unregisters it).
func (e *Event) Registered() bool { return e.Aux == 1 }

// SetRootRegion makes e a RootRegion of [addr, addr+size), registered
// (1) or unregistered (0).
func (e *Event) SetRootRegion(addr, size uint64, registered uint32) {
	e.Kind, e.Addr, e.Size, e.Aux = RootRegion, addr, size, uint64(registered)
}

// Pool returns the pool of a PoolCreate or PoolDestroy (Addr) or of a
// PoolAlloc or PoolFree (Aux); 0 for other kinds.
func (e *Event) Pool() uint64 {
	switch e.Kind {
	case PoolCreate, PoolDestroy:
		return e.Addr
	case PoolAlloc, PoolFree:
		return e.Aux
	}
	return 0
}

// SetPool sets the pool of a PoolAlloc or PoolFree.
func (e *Event) SetPool(pool uint64) { e.Aux = pool }

// What the agent did with an allocator family's function (FamilyOutcome);
// the values are the wire's LP_FAMILY_* (agent/lp_wire.h).
const (
	FamilyTraced  = 1 // its entry patched: its calls are recorded
	FamilyRefused = 2 // its first instructions could not be moved
	FamilyThreads = 3 // the process had threads already: not patched
	FamilyFailed  = 4 // the code could not be written, or no room near it
	FamilyHooked  = 5 // another library's malloc, which the hooks call: traced as glibc's
	// FamilyUnfollowed: its module came through a dlopen the agent
	// could not follow (see docs/allocators.md): not patched.
	FamilyUnfollowed = 6
	// FamilyNoSlot: more families than the agent has room for (eight,
	// the executable's included): not patched.
	FamilyNoSlot = 7
)

// FamilyOutcome returns how an AllocFamilyFn's function was dealt with:
// 1 traced; 2 not (its first instructions could not be moved), 3 not
// (the process had threads), 4 not (the code could not be written); 5:
// the malloc the hooks call is another library's than the C library's.
func (e *Event) FamilyOutcome() uint64 { return e.Aux }

// SetFamilyOutcome sets how an AllocFamilyFn's function was dealt with.
func (e *Event) SetFamilyOutcome(o uint64) { e.Aux = o }
