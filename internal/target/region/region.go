// Package region is the collector's side of one process image's shared
// memory region (agent/lp_wire.h): it creates the memfd handed to the
// agent, reads the rings the agent's threads append to, returns consumed
// space, and frees the rings of threads that are gone.
//
// A Region is used by one goroutine at a time.
//
// Everything the agent's side of the region holds is untrusted: the
// program it runs in can write there. Every count, index and length read
// from it is checked against what the collector itself set up; the first
// one out of bounds makes the region corrupt (Corrupt), and from then on
// nothing more is read from it.
package region

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// Options size a region and tell the agent how to record.
type Options struct {
	Slots    int // rings, one per live thread; default 4096
	RingSize int // bytes per ring, a power of two; default 256 KiB
	// BigRings: the first BigRings rings are BigRingSize bytes (a power
	// of two, default 4 * RingSize). Threads take the first free slot, so
	// a program's first threads, which most often do its work, fill a
	// full ring (and sleep until the collector wakes them) less often;
	// the rest stay small, which bounds what many threads map.
	BigRings, BigRingSize int
	MaxDepth              int  // frames per stack; default 64, at most wire.MaxDepth
	FreeStacks            bool // record the stacks of frees
	ClockTSC              bool // agent timestamps are TSC ticks
	Fold                  bool // let the agent fold short-lived allocations
	// FoldFreeStacks: with FreeStacks, folded pairs keep the free's stack
	// too (root causes need every free's; reports only improper ones').
	FoldFreeStacks bool
	HoldExit       bool // have the agent hold the process at exit for a scan
	// ExactTimes: the agent dates allocations it keeps pending exactly,
	// not by the collector's clock in the region (SetNow: about a
	// millisecond early at most, one load where the exact clock is a
	// 25 ns call here).
	ExactTimes bool
	// StaleSlots, when > 0, has the agent serve sampled small blocks from
	// a pool of that many pages (stale objects); StaleSample is its K: a
	// site's 1st allocation, then every Kth (0: 1).
	StaleSlots, StaleSample int
	// AllocFamilies are the prefixes of more allocator families the agent
	// traces by patching their entries (run --alloc-family), comma
	// separated: at most wire.FamiliesMax-1 bytes.
	AllocFamilies string
}

// maxRingSize bounds a ring's size (the header keeps it in 32 bits).
const maxRingSize = 1 << 30

func (o *Options) fill() error {
	if o.Slots == 0 {
		o.Slots = 4096
	}
	if o.RingSize == 0 {
		o.RingSize = 256 << 10
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 64
	}
	if o.BigRings > 0 && o.BigRingSize == 0 {
		o.BigRingSize = min(4*o.RingSize, maxRingSize)
	}
	switch {
	case o.Slots < 1 || o.Slots > 1<<16:
		return fmt.Errorf("region: %d slots out of range", o.Slots)
	case o.RingSize < 4096 || o.RingSize > maxRingSize || o.RingSize&(o.RingSize-1) != 0:
		return fmt.Errorf("region: ring size %d is not a power of two from 4096 to %d", o.RingSize, maxRingSize)
	case o.BigRings < 0 || o.BigRings > o.Slots:
		return fmt.Errorf("region: %d big rings out of range 0..%d", o.BigRings, o.Slots)
	case o.BigRings > 0 && (o.BigRingSize < o.RingSize || o.BigRingSize > maxRingSize || o.BigRingSize&(o.BigRingSize-1) != 0):
		return fmt.Errorf("region: big ring size %d is not a power of two from %d to %d", o.BigRingSize, o.RingSize, maxRingSize)
	case o.StaleSlots < 0 || o.StaleSlots > maxStaleSlots:
		return fmt.Errorf("region: %d stale slots out of range 0..%d", o.StaleSlots, maxStaleSlots)
	case o.MaxDepth < 1 || o.MaxDepth > wire.MaxDepth:
		return fmt.Errorf("region: max depth %d out of range 1..%d", o.MaxDepth, wire.MaxDepth)
	}
	return nil
}

// Region is one mapped region.
type Region struct {
	fd      int
	mem     []byte
	opts    Options
	dataOff int
	foldOff int
	rings   []wire.Ring
	scratch []byte
	proc    uint32
	pid     int32
	// tails are the rings' tails as the collector last stored them: it
	// is their only writer, so it never reads them back.
	tails []uint64
	bad   atomic.Pointer[CorruptError]
	// loaded counts the modules loaded and not unloaded (modules: their
	// ids), as the records say.
	loaded  int
	modules map[uint32]struct{}
}

// CorruptError is a value of the shared region out of bounds: the program
// wrote over it (or the agent has a bug). Nothing more is read from a
// region once it is corrupt.
type CorruptError struct {
	What string
}

func (e *CorruptError) Error() string {
	return "the shared region is corrupt (" + e.What + ")"
}

// fail makes the region corrupt, unless it is already, and returns why it
// is.
func (r *Region) fail(format string, args ...any) *CorruptError {
	r.bad.CompareAndSwap(nil, &CorruptError{What: fmt.Sprintf(format, args...)})
	return r.bad.Load()
}

// Fail makes the region corrupt for a value out of bounds that its reader
// found in what it decoded (what).
func (r *Region) Fail(what string) { r.fail("%s", what) }

// Corrupt returns the first value found out of bounds in the region, or
// nil while it is sound.
func (r *Region) Corrupt() *CorruptError { return r.bad.Load() }

// Create makes a region for process pid, recorded as image index proc.
func Create(pid int32, proc uint32, opts Options) (*Region, error) {
	r, err := Prepare(opts)
	if err != nil {
		return nil, err
	}
	r.Assign(pid, proc)
	return r, nil
}

// Prepare makes a region for a process yet to come (Assign names it): a
// collector can have one ready before an agent registers, and hand it
// over without making the agent wait for the memfd and its mapping.
func Prepare(opts Options) (*Region, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	slotBytes := opts.Slots * wire.SlotSize
	dataOff := (wire.HeaderSize + slotBytes + 4095) &^ 4095
	foldOff := dataOff + opts.ringOff(opts.Slots) // past the last ring
	size := foldOff + opts.Slots*wire.FoldSize
	fd, err := unix.MemfdCreate("leakpath", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("region: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("region: ftruncate %d: %w", size, err)
	}
	// The program gets the memfd (and, as root, could open it again
	// through /proc/self/map_files): shrunk, the collector's next read of
	// its mapping would die of SIGBUS. Sealed, its size stays.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("region: sealing its size: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("region: mmap %d bytes: %w", size, err)
	}
	r := &Region{fd: fd, mem: mem, opts: opts, dataOff: dataOff, foldOff: foldOff, tails: make([]uint64, opts.Slots)}
	var flags uint32
	if opts.FreeStacks {
		flags |= wire.FlagFreeStacks
	}
	if opts.ClockTSC {
		flags |= wire.FlagClockTSC
	}
	if opts.Fold {
		flags |= wire.FlagFold
	}
	if opts.FoldFreeStacks && opts.FreeStacks {
		flags |= wire.FlagFoldFreeStacks
	}
	if opts.HoldExit {
		flags |= wire.FlagHoldExit
	}
	if opts.ExactTimes {
		flags |= wire.FlagExactTimes
	}
	if opts.StaleSlots > 0 {
		flags |= wire.FlagStale
		r.put32(wire.OffStaleSlots, uint32(opts.StaleSlots))
		r.put32(wire.OffStaleSample, uint32(max(opts.StaleSample, 1)))
	}
	if n := len(opts.AllocFamilies); n > 0 && n < wire.FamiliesMax {
		copy(r.mem[wire.OffAllocFamilies:wire.OffAllocFamilies+wire.FamiliesMax-1], opts.AllocFamilies)
	}
	r.put64(wire.OffMagic, wire.RegionMagic)
	r.put32(wire.OffVersion, wire.Version)
	r.put32(wire.OffHeaderSize, wire.HeaderSize)
	r.put32(wire.OffSlotCount, uint32(opts.Slots))
	r.put32(wire.OffRingSize, uint32(opts.RingSize))
	if opts.BigRings > 0 {
		r.put32(wire.OffBigSlots, uint32(opts.BigRings))
		r.put32(wire.OffBigRingSize, uint32(opts.BigRingSize))
	}
	r.put64(wire.OffDataOffset, uint64(dataOff))
	r.put64(wire.OffRegionSize, uint64(size))
	r.put32(wire.OffFlags, flags)
	r.put32(wire.OffMaxDepth, uint32(opts.MaxDepth))
	r.put32(wire.OffCollectorPID, uint32(unix.Getpid()))
	r.put64(wire.OffFoldOffset, uint64(foldOff))
	r.u32(wire.OffCollectorState).Store(wire.CollectorAlive)
	return r, nil
}

// Assign gives a prepared region to process pid, recorded as image index
// proc, before its memfd is handed over.
func (r *Region) Assign(pid int32, proc uint32) {
	r.proc, r.pid = proc, pid
	r.put32(wire.OffPID, uint32(pid))
}

func (r *Region) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&r.mem[off]))
}

func (r *Region) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.mem[off]))
}

func (r *Region) put32(off int, v uint32) { r.u32(off).Store(v) }
func (r *Region) put64(off int, v uint64) { r.u64(off).Store(v) }

func (r *Region) slotOff(i int) int { return wire.HeaderSize + i*wire.SlotSize }

// FD is the memfd to hand to the agent.
func (r *Region) FD() int { return r.fd }

// Close unmaps the region and closes the memfd. Rings not drained are lost.
func (r *Region) Close() error {
	if r.mem == nil {
		return nil
	}
	r.u32(wire.OffCollectorState).Store(wire.CollectorGone)
	err := unix.Munmap(r.mem)
	r.mem = nil
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	return err
}

// Detach tells the agent nobody will read its rings any more: its threads
// stop recording and never wait for space.
func (r *Region) Detach() {
	r.u32(wire.OffCollectorState).Store(wire.CollectorGone)
	r.wakeProducers(true)
}

// AgentClock is the agent's clock reading at its start, once it wrote it.
func (r *Region) AgentClock() (c event.ClockInfo, ok bool) {
	if r.u32(wire.OffAgentState).Load() == 0 {
		return c, false
	}
	return event.ClockInfo{
		Ticks: r.u64(wire.OffClockTS).Load(),
		Mono:  r.u64(wire.OffClockMono).Load(),
		Real:  r.u64(wire.OffClockReal).Load(),
	}, true
}

// Lost is the number of records the agent could not write.
func (r *Region) Lost() uint64 { return r.u64(wire.OffLostRecords).Load() }

// Target receives decoded events: Buffer gives the slice a ring's events
// are appended to, Filled says that events were appended from index from.
type Target interface {
	// Buffer returns ring's buffer; Drain decodes into its spare
	// capacity (growing it when it has none).
	Buffer(ring int) *[]event.Event
	Filled(ring int, from int)
}

// ring returns ring i's decoding state, made when first needed: most
// processes use a few of their thousands of slots.
func (r *Region) ring(i int) *wire.Ring {
	if i >= len(r.rings) {
		r.rings = append(r.rings, make([]wire.Ring, i+1-len(r.rings))...)
	}
	return &r.rings[i]
}

// SlotsUsed is how many rings the agent's threads have claimed so far, at
// most the region's slots (more makes the region corrupt).
func (r *Region) SlotsUsed() int {
	n := r.u32(wire.OffSlotsUsed).Load()
	if n > uint32(r.opts.Slots) {
		r.fail("%d rings in use, of %d", n, r.opts.Slots)
		return r.opts.Slots
	}
	return int(n)
}

// Drain decodes every record published so far in every ring into dst,
// then returns the space to the producers. It returns how many bytes it
// consumed. It decodes a ring within the capacity of the buffer dst gives
// (a full one is grown), and asks for another while records are left. A
// ring whose head is out of bounds or whose records do not decode makes
// the region corrupt: Drain returns the *CorruptError (dst keeps the
// buffers it was told were filled, not the one being decoded into), and
// reads nothing once the region is corrupt.
func (r *Region) Drain(dst Target) (int, error) {
	if bad := r.Corrupt(); bad != nil {
		return 0, bad
	}
	used := r.SlotsUsed()
	if bad := r.Corrupt(); bad != nil {
		return 0, bad
	}
	total := 0
	for i := 0; i < used; i++ {
		size := uint64(r.ringSize(i))
		so := r.slotOff(i)
		head := r.u64(so + wire.OffSlotHead).Load()
		tail := r.tails[i]
		if shared := r.u64(so + wire.OffSlotTail).Load(); shared != tail {
			// Only the collector writes a tail: the agent's thread
			// would wait for ever for space behind this one.
			return total, r.fail("ring %d tail %d, not the %d the collector left", i, shared, tail)
		}
		if head == tail {
			continue
		}
		switch {
		case head < tail:
			return total, r.fail("ring %d head %d behind its tail %d", i, head, tail)
		case head-tail > size:
			return total, r.fail("ring %d head %d beyond its size: %d bytes past its tail, in a ring of %d", i, head, head-tail, size)
		case (head-tail)%8 != 0:
			return total, r.fail("ring %d head %d not on a record boundary", i, head)
		}
		if k, bad := r.decodeRing(i, int(tail%size), int(head-tail), dst); bad != nil {
			// (The records before the bad one went to dst: counted.)
			return total + k, bad
		}
		r.tails[i] = head
		r.u64(so + wire.OffSlotTail).Store(head)
		total += int(head - tail)
	}
	if total > 0 {
		r.wakeProducers(false)
	}
	return total, nil
}

// decodeRing decodes the n bytes of ring i's records from offset from
// into dst and returns how many went there: n, unless a bad record
// stopped it (what came before went). Where they wrap around the ring's
// end, only the record that straddles it is copied: copied whole, they
// were read twice on most drains (a pipeline drains a ring once it is
// half full).
func (r *Region) decodeRing(i, from, n int, dst Target) (int, *CorruptError) {
	off := r.ringOff(i)
	ring := r.mem[off : off+r.ringSize(i)]
	if from+n <= len(ring) {
		return r.decode(i, ring[from:from+n], false, dst)
	}
	first, second := ring[from:], ring[:n-(len(ring)-from)]
	k, bad := r.decode(i, first, true, dst)
	if bad != nil {
		return k, bad
	}
	if rest := first[k:]; len(rest) > 0 {
		// Its header is in first: records are whole words, and so is the
		// ring. (Read again here: the program may have changed it, which
		// the decoding of the copy finds.)
		need := 0
		if len(rest) >= 8 {
			words := int(binary.LittleEndian.Uint64(rest) >> 16 & 0xffff)
			need = min(max(words*8-len(rest), 0), len(second))
		}
		r.scratch = append(append(r.scratch[:0], rest...), second[:need]...)
		j, bad := r.decode(i, r.scratch, false, dst)
		if bad != nil {
			return k + j, bad
		}
		k += len(r.scratch)
		second = second[need:]
	}
	j, bad := r.decode(i, second, false, dst)
	return k + j, bad
}

// decode decodes ring i's records in data into dst, within the capacity
// of the buffers dst gives (a full one is grown), and returns how many
// bytes it decoded: all, unless short is set and the last record runs
// past data's end. What decoded before a bad record is dropped (it may be
// garbage too).
func (r *Region) decode(i int, data []byte, short bool, dst Target) (int, *CorruptError) {
	rg := r.ring(i)
	done := 0
	for done < len(data) {
		buf := dst.Buffer(i)
		if len(*buf) == cap(*buf) {
			// A target that gives no room gets it made.
			*buf = append(*buf, event.Event{})[:len(*buf)]
		}
		before, modules := len(*buf), rg.Modules
		var err error
		var k int
		*buf, k, err = wire.DecodeSome(data[done:], r.proc, rg, *buf)
		var de *wire.DecodeError
		if err != nil && (!short || !errors.As(err, &de) || !de.Short) {
			clear((*buf)[before:])
			*buf = (*buf)[:before]
			return done, r.fail("ring %d: %v", i, err)
		}
		if rg.Modules != modules {
			if bad := r.countModules((*buf)[before:]); bad != nil {
				clear((*buf)[before:])
				*buf = (*buf)[:before]
				return done, bad
			}
		}
		dst.Filled(i, before)
		done += k
		if err != nil {
			break // the record that runs past the end
		}
	}
	return done, nil
}

// maxModules bounds the modules a process has loaded at once: each is at
// least one mapping, and Linux allows a process 65530 unless told
// otherwise. (The model sorts its loaded modules at each load: many more
// would cost it a long time.)
const maxModules = 1 << 16

// countModules follows the modules loaded by the events decoded: more
// than maxModules at once makes the region corrupt.
func (r *Region) countModules(evs []event.Event) *CorruptError {
	for i := range evs {
		switch ev := &evs[i]; ev.Kind {
		case event.ModuleLoad:
			if r.modules == nil {
				r.modules = map[uint32]struct{}{}
			}
			if r.loaded++; r.loaded > maxModules {
				return r.fail("%d modules loaded at once", r.loaded)
			}
			r.modules[ev.ModuleInfo().ID] = struct{}{}
		case event.ModuleUnload:
			if _, ok := r.modules[ev.ModuleInfo().ID]; ok {
				delete(r.modules, ev.ModuleInfo().ID)
				r.loaded--
			}
		}
	}
	return nil
}

// ringOff returns the offset of ring i's data: the big rings first.
func (r *Region) ringOff(i int) int { return r.dataOff + r.opts.ringOff(i) }

// ringOff returns where ring i's data starts in the rings' area.
func (o *Options) ringOff(i int) int {
	if i < o.BigRings {
		return i * o.BigRingSize
	}
	return o.BigRings*o.BigRingSize + (i-o.BigRings)*o.RingSize
}

// ringSize returns ring i's size in bytes.
func (r *Region) ringSize(i int) int { return r.opts.ringOff(i+1) - r.opts.ringOff(i) }

// wakeProducers tells threads waiting for ring space (or for a free slot)
// that the collector made progress.
func (r *Region) wakeProducers(force bool) {
	r.u32(wire.OffProgress).Add(1)
	if force || r.u32(wire.OffProducersWaiting).Load() > 0 {
		futexWake(&r.mem[wire.OffProgress], 1<<30)
	}
}

// Wait sleeps until a producer rings the doorbell or timeout passes. The
// producer that rings clears the sleeping flag, so that the others do
// not ring again before the collector runs: the doorbell is read before
// the flag is set, and the rings looked at after. A producer rings once
// its ring is over half full (or for news that is not in the rings): Wait
// sleeps while the rings hold less. Drained as soon as a record came, a
// ring was read right behind the thread writing it, and each read moved
// cache lines the thread was writing (its ring's, its head) away from
// its core: the program ran slower for it.
//
// keep has the calling goroutine keep its processor (P) while it sleeps,
// for a caller that knows no other goroutine needs it: asleep in a
// system call it gave it up, the runtime's monitor took it back after
// 20 us when the other processors were busy, and then polled every 20 us
// for a millisecond, two context switches each. The runtime's preemption
// signal ends such a sleep early (a collection need not wait for it), as
// any signal may: Wait can return before timeout with nothing rung.
func (r *Region) Wait(timeout time.Duration, keep bool) {
	bell := r.u32(wire.OffDoorbell).Load()
	r.u32(wire.OffCollectorSleeping).Store(1)
	if !r.halfFull() {
		futexWait(&r.mem[wire.OffDoorbell], bell, timeout, keep)
	}
	r.u32(wire.OffCollectorSleeping).Store(0)
}

// SetNow sets the clock the agent dates the allocations it keeps pending
// by (ticks of the session's clock.Source): one load for the agent, where
// the kernel's cheapest clock is a call.
func (r *Region) SetNow(ticks uint64) { r.put64(wire.OffNowTS, ticks) }

// Ring wakes the collector's Wait at once, as a producer's record does:
// for news that is not in the rings (the process ended).
func (r *Region) Ring() {
	r.u32(wire.OffDoorbell).Add(1)
	futexWake(&r.mem[wire.OffDoorbell], 1)
}

// halfFull reports whether any ring holds unread records over half its
// size: its thread rings the doorbell past that (agent/ring.c
// lp_put_nudge), and may have looked at the sleeping flag before it was
// set.
func (r *Region) halfFull() bool {
	used := int(r.u32(wire.OffSlotsUsed).Load())
	for i := 0; i < used && i < r.opts.Slots; i++ {
		if r.u64(r.slotOff(i)+wire.OffSlotHead).Load()-r.tails[i] > uint64(r.ringSize(i)/2) {
			return true
		}
	}
	return false
}

// takePending takes a gone thread's pending entry (at offset off of the
// region) of address addr, as the agent's threads do: a live thread may be
// claiming the same entry (freeing the block). It reports whether the
// entry was still pending.
func (r *Region) takePending(off int, addr uint64) bool {
	return r.u64(off+wire.OffPendAddr).CompareAndSwap(addr, 0)
}

// fold returns ring i's fold area.
func (r *Region) fold(i int) []byte {
	return r.mem[r.foldOff+i*wire.FoldSize : r.foldOff+(i+1)*wire.FoldSize]
}

// pendingEntries returns the offsets in a fold area of the entries of its
// pending FIFO, oldest first, each wire.PendingSize bytes.
func pendingEntries(f []byte) []int {
	le := binary.LittleEndian
	head, count := le.Uint32(f[wire.OffFoldHead:]), le.Uint32(f[wire.OffFoldCount:])
	count = min(count, wire.Pend) // a dead thread's torn write
	out := make([]int, count)
	for k := range out {
		out[k] = wire.OffFoldPend + int((head+uint32(k))%wire.Pend)*wire.PendingSize
	}
	return out
}

// Leftovers appends what a gone thread left in ring i's fold area, as
// events stamped now: its pending allocations (late, with their own
// times), then its aggregates of folded pairs. It empties the area.
// Call it only when the thread, or the process, is gone.
func (r *Region) Leftovers(i int, now uint64, out []event.Event) []event.Event {
	if i < 0 || i >= r.opts.Slots || r.Corrupt() != nil {
		return out
	}
	le := binary.LittleEndian
	f := r.fold(i)
	tid := r.ring(i).Thread
	for _, o := range pendingEntries(f) {
		e, off := f[o:o+wire.PendingSize], r.foldOff+i*wire.FoldSize+o
		addr, fn := r.u64(off+wire.OffPendAddr).Load(), event.Fn(e[wire.OffPendFn])
		if addr == 0 || fn == 0 || fn >= event.NumFn || !r.takePending(off, addr) {
			continue
		}
		ev := event.Event{Kind: event.Alloc, Fn: fn, Proc: r.proc, Thread: tid, Time: now,
			Stack: le.Uint32(e[wire.OffPendStack:]), Addr: addr, Size: le.Uint64(e[wire.OffPendSize:])}
		ev.SetLate(le.Uint64(e[wire.OffPendTS:]))
		out = append(out, ev)
	}
	for k := 0; k < wire.Agg; k++ {
		a := f[wire.OffFoldAgg+k*wire.AggSize:]
		a = a[:wire.AggSize]
		afn, ffn := event.Fn(a[wire.OffAggAFn]), event.Fn(a[wire.OffAggFFn])
		if a[wire.OffAggUsed] == 0 || afn == 0 || afn >= event.NumFn || ffn == 0 || ffn >= event.NumFn {
			continue
		}
		ev := event.Event{Kind: event.Agg, Fn: afn, Proc: r.proc, Thread: tid, Time: now, Stack: le.Uint32(a[wire.OffAggAStack:])}
		ev.SetAgg(le.Uint64(a[wire.OffAggPairs:]), le.Uint64(a[wire.OffAggBytes:]), le.Uint64(a[wire.OffAggTemp:]),
			le.Uint32(a[wire.OffAggFStack:]), ffn)
		out = append(out, ev)
		a[wire.OffAggUsed] = 0
	}
	le.PutUint32(f[wire.OffFoldCount:], 0)
	// Nothing is pending here any more: the agent's threads, which sum
	// the pending bytes of every thread, count none here (at most the
	// claims of other threads, which they subtract) until the slot's next
	// thread sets its own count.
	r.u64(r.foldOff + i*wire.FoldSize + wire.OffFoldPendBytes).Store(0)
	return out
}

// Reclaim frees the slots of threads that are gone and whose rings are
// drained, so that new threads can have them, passing what each left in
// its fold area to left. alive reports whether a thread id still exists
// in the process.
func (r *Region) Reclaim(alive func(tid int32) bool, left func(ring int)) (freed int) {
	if r.Corrupt() != nil {
		return 0
	}
	used := r.SlotsUsed()
	for i := 0; i < used; i++ {
		so := r.slotOff(i)
		st := r.u32(so + wire.OffSlotState)
		s := st.Load()
		if s == wire.SlotFree {
			continue
		}
		if r.u64(so+wire.OffSlotHead).Load() != r.tails[i] {
			continue
		}
		tid := int32(r.u32(so + wire.OffSlotTID).Load())
		if tid <= 0 || alive(tid) {
			continue
		}
		// Dead and drained: nobody writes here any more. Take what it
		// left pending (the agent's threads count it in their pending
		// bytes until they see this state; left dates what it takes
		// after it), and return the ring's pages to the system before
		// handing the slot out again.
		st.Store(wire.SlotTaking)
		left(i)
		_ = unix.Fallocate(r.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(r.ringOff(i)), int64(r.ringSize(i)))
		*r.ring(i) = wire.Ring{}
		st.Store(wire.SlotFree)
		freed++
	}
	if freed > 0 {
		r.wakeProducers(false)
	}
	return freed
}

// ThreadAlive reports whether thread tid of process pid exists.
func ThreadAlive(pid, tid int32) bool {
	err := unix.Tgkill(int(pid), int(tid), 0)
	return err == nil || !errors.Is(err, unix.ESRCH)
}

func futexWake(addr *byte, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(n), 0, 0, 0)
}

// futexWait sleeps while *addr is val, at most timeout; keep: without
// telling the runtime (Wait).
func futexWait(addr *byte, val uint32, timeout time.Duration, keep bool) {
	ts := unix.NsecToTimespec(int64(timeout))
	// (Two direct calls: the pointers' conversions keep ts alive and in
	// place only in the call expression of a syscall function itself.)
	if keep {
		unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
		return
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Shared (not private) futex operations: the agent waits in another process.
const (
	futexWaitOp = 0
	futexWakeOp = 1
)
