package tracefile

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/leakpath/leakpath/internal/model/event"
)

// stream is a cursor in one stream of a chunk payload.
type stream struct {
	b []byte
	i int
}

// decoder decodes the events of one chunk payload, a batch at a time. It
// never panics on bad input; its first error sticks.
type decoder struct {
	model
	// classes are the class lists of blocks freed (classPush), the
	// encoder's its own (encClass).
	classes *[classTab]classEntry
	version int // of the file's format
	s       [numStreams]stream
	bad     int    // stream of the first read error, or -1
	reason  string // the first error, if not a read error
	n       int    // events decoded in the chunk
	alloc   []ringEntry
	free    []uint64
	// Allocations and frees decoded in the chunk.
	allocN, freeN uint64
	arena         []uint64   // frames of the current batch
	defs          [][]uint64 // the frames of the chunk's stack definitions
}

func newDecoder() *decoder {
	return &decoder{free: make([]uint64, freeWindow), version: Version, classes: new([classTab]classEntry)}
}

// reset starts decoding payload p. It fails if the stream lengths do not
// add up to the payload.
func (d *decoder) reset(p []byte) error {
	if d.model.reset() {
		clear(d.classes[:])
	}
	d.perThread = d.version >= 11
	d.bad, d.reason, d.n = -1, "", 0
	d.allocN, d.freeN = 0, 0
	d.alloc = d.alloc[:0]
	clear(d.defs)
	d.defs = d.defs[:0]
	if len(p) == 0 {
		return fmt.Errorf("empty payload")
	}
	if p[0]&^flagsKnown != 0 {
		return fmt.Errorf("unknown payload flags %#x", p[0])
	}
	d.timeMode = p[0] & timeEMA
	var lens [numStreams]uint64
	off := 1
	for i := 0; i < numStreams-1; i++ {
		v, k := binary.Uvarint(p[off:])
		if k <= 0 {
			return fmt.Errorf("bad length of stream %s", streamNames[i])
		}
		off += k
		lens[i] = v
	}
	rest := uint64(len(p) - off)
	for i := 0; i < numStreams-1; i++ {
		if lens[i] > rest {
			return fmt.Errorf("stream %s of %d bytes, %d left in the chunk", streamNames[i], lens[i], rest)
		}
		d.s[i] = stream{b: p[off : off+int(lens[i])]}
		off += int(lens[i])
		rest -= lens[i]
	}
	d.s[numStreams-1] = stream{b: p[off:]}
	return nil
}

// done reports whether all ops were decoded.
func (d *decoder) done() bool { return d.s[sOps].i >= len(d.s[sOps].b) }

// finish checks, after the last op, that every stream was used up.
func (d *decoder) finish() error {
	for i := range d.s {
		if left := len(d.s[i].b) - d.s[i].i; left != 0 {
			return fmt.Errorf("%d bytes left in stream %s after the last event", left, streamNames[i])
		}
	}
	return nil
}

func (d *decoder) fail(s int) {
	if d.bad < 0 {
		d.bad = s
	}
}

func (d *decoder) failf(format string, args ...any) {
	if d.reason == "" {
		d.reason = fmt.Sprintf(format, args...)
	}
	d.fail(numStreams)
}

func (d *decoder) err() error {
	if d.bad < 0 {
		return nil
	}
	if d.reason != "" {
		return fmt.Errorf("event %d: %s", d.n, d.reason)
	}
	return fmt.Errorf("event %d: stream %s ends early or holds a bad number", d.n, streamNames[d.bad])
}

func (d *decoder) uv(s int) uint64 {
	st := &d.s[s]
	b, i := st.b, st.i
	if i+1 < len(b) {
		c := b[i]
		if c < 0x80 {
			st.i = i + 1
			return uint64(c)
		}
		if c1 := b[i+1]; c1 < 0x80 {
			st.i = i + 2
			return uint64(c&0x7f) | uint64(c1)<<7
		}
	} else if i < len(b) && b[i] < 0x80 {
		st.i = i + 1
		return uint64(b[i])
	}
	return d.uvSlow(s)
}

func (d *decoder) uvSlow(s int) uint64 {
	st := &d.s[s]
	v, k := binary.Uvarint(st.b[st.i:])
	if k <= 0 {
		d.fail(s)
		st.i = len(st.b)
		return 0
	}
	st.i += k
	return v
}

// size decodes a size coded by encoder.putSize.
func (d *decoder) size() uint64 {
	lo := d.byte(sSize)
	hi := d.uv(sSizeHi)
	if hi >= 1<<56 {
		d.failf("size %#x*256 out of range", hi)
		return 0
	}
	return hi<<8 | uint64(lo)
}

func (d *decoder) u32(s int) uint32 {
	v := d.uv(s)
	if v > math.MaxUint32 {
		d.failf("%d does not fit 32 bits", v)
		return 0
	}
	return uint32(v)
}

// stackRef reads the stack id of a heap event (see encoder.putStack).
func (d *decoder) stackRef() uint32 {
	if d.version < 8 {
		return d.u32(sStack)
	}
	id := int64(d.lastStack) + unzigzag(d.uv(sStack))
	if id < 0 || id > math.MaxUint32 {
		d.failf("stack id %d", id)
		return 0
	}
	return uint32(id)
}

func (d *decoder) i32(s int) int32 {
	v := unzigzag(d.uv(s))
	if v != int64(int32(v)) {
		d.failf("%d does not fit 32 bits", v)
		return 0
	}
	return int32(v)
}

func (d *decoder) byte(s int) byte {
	st := &d.s[s]
	if st.i >= len(st.b) {
		d.fail(s)
		return 0
	}
	c := st.b[st.i]
	st.i++
	return c
}

// bytes returns the next n bytes of stream s (aliasing the payload), at
// most max of them.
func (d *decoder) bytes(s int, max int) []byte {
	n := d.uv(s)
	st := &d.s[s]
	if n > uint64(max) {
		d.failf("%d bytes of text (limit %d)", n, max)
		return nil
	}
	if n > uint64(len(st.b)-st.i) {
		d.fail(s)
		st.i = len(st.b)
		return nil
	}
	b := st.b[st.i : st.i+int(n)]
	st.i += int(n)
	return b
}

func (d *decoder) str(s int) string { return string(d.bytes(s, MaxString)) }

// count reads a count of items of at least one byte each in stream s.
func (d *decoder) count(s int, max int) int {
	n := d.uv(s)
	if n > uint64(max) {
		d.failf("%d items (limit %d)", n, max)
		return 0
	}
	if n > uint64(len(d.s[s].b)-d.s[s].i) {
		d.fail(s)
		return 0
	}
	return int(n)
}

// pushAlloc records an allocation. The ring grows to allocWindow entries
// as a chunk needs them; until then allocN == len(d.alloc).
func (d *decoder) pushAlloc(addr uint64, cls uint16, fn event.Fn) {
	if len(d.alloc) < allocWindow {
		d.alloc = append(d.alloc, ringEntry{addr, cls, fn})
	} else {
		d.alloc[d.allocN&(allocWindow-1)] = ringEntry{addr, cls, fn}
	}
	d.allocN++
}

func (d *decoder) pushFree(addr uint64) {
	d.free[d.freeN&(freeWindow-1)] = addr
	d.freeN++
}

// next appends the events of the chunk to out until it has max of them
// or the chunk ends. Check d.err() afterwards.
func (d *decoder) next(out []event.Event, max int) []event.Event {
	d.arena = nil
	ops := &d.s[sOps]
	for len(out) < max && d.bad < 0 && ops.i < len(ops.b) {
		op := ops.b[ops.i]
		ops.i++
		code := op & codeMask
		switch code {
		case opSetProc:
			if op&^codeMask != 0 {
				d.failf("bad op %#x", op)
				return out
			}
			d.proc = d.u32(sMisc)
			if d.proc >= event.MaxImages {
				d.failf("process image %d (at most %d)", d.proc, event.MaxImages)
				return out
			}
			continue
		case opSetThread:
			i := int(op >> 5)
			if i == 0 {
				t := int64(d.threads[0]) + unzigzag(d.uv(sMisc))
				if t != int64(int32(t)) {
					d.failf("thread %d", t)
					return out
				}
				d.toFront(numThreads, int32(t))
			} else {
				d.toFront(i, d.threads[i])
			}
			continue
		}
		if len(out) == cap(out) {
			out = append(out, event.Event{})
		} else {
			out = out[:len(out)+1]
		}
		ev := &out[len(out)-1]
		resetEvent(ev, d.proc, d.threads[0])
		switch code {
		case byte(event.Alloc):
			d.decAlloc(ev, op)
		case opLateAlloc:
			d.decAlloc(ev, op)
			late := d.uv(sTime)
			if d.version >= 6 {
				late <<= d.shift // coarse like Time (see chunk.go)
			}
			if late < ev.Time {
				ev.SetLate(ev.Time - late)
			} else {
				d.failf("late allocation %d ticks before time %d", late, ev.Time)
			}
		case byte(event.Free), byte(event.ReallocBegin):
			d.decFree(ev, op)
		case opAllocHot, opAllocHot + 1, opAllocHot + 2, opAllocHot + 3, opAllocHot + 4, opAllocHot + 5, opAllocHot + 6, opAllocHot + 7,
			opAllocHot + 8, opAllocHot + 9, opAllocHot + 10, opAllocHot + 11, opAllocHot + 12, opAllocHot + 13, opAllocHot + 14, opAllocHot + 15:
			d.decAllocHot(ev, op)
		case opFreeHot, opFreeHot + 1, opFreeHot + 2, opFreeHot + 3:
			d.decFreeHot(ev, op)
		case byte(event.Realloc):
			d.decRealloc(ev, op)
		case byte(event.StackDef):
			d.decStackDef(ev, op)
		case opScope:
			d.decScope(ev, op)
		case opAgg:
			d.decAgg(ev, op)
		case opGeneric:
			if op != opGeneric {
				d.failf("bad op %#x", op)
				break
			}
			d.decGeneric(ev)
		default:
			d.failf("bad op %#x", op)
		}
		if d.bad >= 0 {
			return out[:len(out)-1]
		}
		d.n++
	}
	return out
}

// resetEvent clears ev field by field: assigning a whole Event costs a
// typedmemmove call per event.
func resetEvent(ev *event.Event, proc uint32, thread int32) {
	ev.Kind, ev.Fn, ev.Proc, ev.Thread, ev.Stack = 0, 0, proc, thread, 0
	ev.Time, ev.Addr, ev.Addr2, ev.Size, ev.Aux = 0, 0, 0, 0, 0
	ev.X = nil // never reused: the caller may keep what an event pointed to
}

func (d *decoder) decAlloc(ev *event.Event, op byte) {
	ev.Kind = event.Alloc
	ev.Time = d.timeFrom(d.uv(sTime))
	ev.Stack = d.stackRef()
	se := d.allocSize(ev, op)
	if se == nil {
		return
	}
	if d.version >= 10 {
		d.chainAlloc(se, ev.Stack, false)
	}
	d.allocAddr(ev, op)
}

// decAllocHot decodes what encoder.addAllocHot codes.
func (d *decoder) decAllocHot(ev *event.Event, op byte) {
	code, ok := d.hotHead(ev, op, opAllocHot, event.Alloc)
	if !ok {
		return
	}
	hit := code&hotStack != 0
	if hit {
		ev.Stack = d.allocNext
	} else {
		ev.Stack = d.stackRef()
	}
	se := &d.stacks[ev.Stack&(stackTab-1)]
	switch {
	case se.epoch != d.epoch || se.id != ev.Stack:
		if op&f0 != 0 {
			d.failf("predicted size for stack %d, not seen in the chunk", ev.Stack)
			return
		}
		ev.Fn = event.Fn(d.byte(sFn))
		ev.Size = d.size()
		d.setStack(se, ev.Stack, ev.Size, ev.Fn)
	case op&f0 != 0:
		ev.Fn, ev.Size = se.fn, se.size
	default:
		ev.Fn = se.fn
		ev.Size = d.size()
		se.size = ev.Size
	}
	d.chainAlloc(se, ev.Stack, hit)
	var before uint64
	switch code >> lateShift {
	case lateNone:
		d.allocAddr(ev, op)
		return
	case latePrev:
		before = 1
	case lateCoded:
		before = d.uv(sTime)
	}
	if before >= ev.Time>>d.shift {
		d.failf("late allocation %d ticks before time %d", before<<d.shift, ev.Time)
		return
	}
	ev.SetLate(ev.Time - before<<d.shift)
	d.allocAddr(ev, op)
}

// hotHead decodes the kind and time of an event of a hot code op, the
// first of whose codes is first, and returns its bits (op's code less
// first); false if the trace's version has no such code.
func (d *decoder) hotHead(ev *event.Event, op, first byte, kind event.Kind) (byte, bool) {
	if d.version < 10 {
		d.failf("bad op %#x in a version %d trace", op, d.version)
		return 0, false
	}
	code := op&codeMask - first
	ev.Kind = kind
	if code&hotTime != 0 {
		ev.Time = d.prevTime << d.shift
	} else {
		ev.Time = d.timeFrom(d.uv(sTime))
	}
	return code, true
}

// allocSize decodes the Fn and Size of an Alloc of stack ev.Stack and
// returns the stack's table entry, or nil on an error.
func (d *decoder) allocSize(ev *event.Event, op byte) *stackEntry {
	se := &d.stacks[ev.Stack&(stackTab-1)]
	if op&f0 != 0 {
		if se.epoch != d.epoch || se.id != ev.Stack {
			d.failf("predicted size for stack %d, not seen in the chunk", ev.Stack)
			return nil
		}
		ev.Fn, ev.Size = se.fn, se.size
	} else {
		ev.Fn = event.Fn(d.byte(sFn))
		ev.Size = d.size()
		d.setStack(se, ev.Stack, ev.Size, ev.Fn)
	}
	return se
}

// allocAddr decodes the address of an Alloc (see encoder.allocAddr).
func (d *decoder) allocAddr(ev *event.Event, op byte) {
	var addr uint64
	switch op >> 6 {
	case 0:
		base := d.prevAddr
		if d.version >= 6 {
			base = d.allocBase()
		}
		addr = base + uint64(unzigzag(d.uv(sAddr)))
	case 1:
		c := d.classTop(classOf(ev.Size), d.threads[0])
		if c == nil {
			d.failf("reuse from an empty size class")
			return
		}
		addr = c.pop()
	case 2:
		addr = d.uv(sAddr)
	case 3:
		k := d.uv(sAddr)
		if k >= freeWindow {
			d.failf("reuse of free -%d", k+1)
			return
		}
		addr = d.freed(k + 1)
	}
	ev.Addr = addr
	d.prevAddr = addr
	d.bump = addr + chunkSize(ev.Size)
	d.pushAlloc(addr, classOf(ev.Size), ev.Fn)
}

// freed returns the address freed k frees ago.
func (d *decoder) freed(k uint64) uint64 {
	if k > d.freeN || k > freeWindow {
		d.failf("reuse of the address of free -%d of %d", k, d.freeN)
		return 0
	}
	return d.free[(d.freeN-k)&(freeWindow-1)]
}

// freedAddr decodes the address of a Free, ReallocBegin or Realloc and
// returns its allocation if it was found in the chunk.
func (d *decoder) freedAddr(op byte) (uint64, *ringEntry) {
	v := d.uv(sAddr)
	if op&f2 == 0 {
		return d.prevAddr + uint64(unzigzag(v)), nil
	}
	if v == 0 {
		return 0, nil
	}
	if d.version >= 7 {
		// See encoder.freedCode: v codes the distance back, or the
		// allocation after the previous free's.
		var idx uint64 // 1 + the allocation's index
		if v&1 == 1 {
			dist := (v + 1) / 2
			idx = d.allocN - dist + 1
			if dist > d.allocN {
				idx = 0
			}
		} else if d.lastFreed != 0 {
			idx = d.lastFreed + 1 + uint64(unzigzag(v/2-1))
		}
		if idx == 0 || idx > d.allocN {
			d.failf("free of allocation code %d of %d", v, d.allocN)
			return 0, nil
		}
		d.lastFreed = idx
		v = d.allocN - idx + 1
	}
	if v > d.allocN || v > allocWindow {
		d.failf("free of allocation -%d of %d", v, d.allocN)
		return 0, nil
	}
	a := &d.alloc[(d.allocN-v)&(allocWindow-1)]
	return a.addr, a
}

func (d *decoder) decFree(ev *event.Event, op byte) {
	ev.Kind = event.Kind(op & codeMask)
	ev.Time = d.timeFrom(d.uv(sTime))
	if op&f0 != 0 {
		ev.Stack = d.stackRef()
		if ev.Stack == 0 {
			d.failf("explicit stack 0")
		}
	}
	d.freeAddr(ev, op)
}

// decFreeHot decodes what encoder.addFree codes with opFreeHot.
func (d *decoder) decFreeHot(ev *event.Event, op byte) {
	code, ok := d.hotHead(ev, op, opFreeHot, event.Free)
	if !ok {
		return
	}
	if code&hotStack != 0 {
		if op&f0 != 0 {
			d.failf("bad op %#x", op)
			return
		}
		ev.Stack = d.freeNext
	} else if op&f0 != 0 {
		ev.Stack = d.stackRef()
		if ev.Stack == 0 {
			d.failf("explicit stack 0")
			return
		}
	}
	d.chainFree(ev.Stack, code&hotStack != 0)
	d.freeAddr(ev, op)
}

// freeAddr decodes the address and Fn of a Free or ReallocBegin (see
// encoder.addFree).
func (d *decoder) freeAddr(ev *event.Event, op byte) {
	addr, a := d.freedAddr(op)
	want := event.ReallocFn
	if ev.Kind == event.Free {
		want = d.freeFn
		if a != nil {
			want = freeFnFor(a.fn)
			if a.cls != 0 {
				d.classPush(addr, a.cls, d.threads[0])
			}
		}
	}
	if op&f1 != 0 {
		ev.Fn = want
	} else {
		ev.Fn = event.Fn(d.byte(sFn))
	}
	if ev.Kind == event.Free {
		d.freeFn = ev.Fn
		d.pushFree(addr)
	}
	ev.Addr = addr
	d.prevAddr = addr
}

func (d *decoder) decRealloc(ev *event.Event, op byte) {
	ev.Kind = event.Realloc
	if op&f1 != 0 {
		d.failf("bad op %#x", op)
		return
	}
	ev.Time = d.timeFrom(d.uv(sTime))
	if op&f0 != 0 {
		ev.Stack = d.stackRef()
		if ev.Stack == 0 {
			d.failf("explicit stack 0")
		}
	}
	addr, a := d.freedAddr(op)
	var oldCls uint16
	if a != nil {
		oldCls = a.cls
	}
	fb := d.byte(sFn)
	ev.Fn = event.Fn(fb & 0x1f)
	addr2 := addr
	switch fb >> 5 {
	case 0:
	case 1:
		addr2 = 0
	case 2:
		addr2 = addr + uint64(unzigzag(d.uv(sAddr)))
	default:
		d.failf("bad realloc byte %#x", fb)
		return
	}
	ev.Addr, ev.Addr2 = addr, addr2
	ev.Size = d.size()
	if addr2 != 0 {
		d.pushAlloc(addr2, classOf(ev.Size), event.Malloc)
		d.prevAddr = addr2
	} else {
		d.prevAddr = addr
	}
	if addr != 0 && addr2 != addr && (addr2 != 0 || ev.Size == 0) {
		d.pushFree(addr)
		if a != nil && oldCls != 0 {
			d.classPush(addr, oldCls, d.threads[0])
		}
	}
}

func (d *decoder) decStackDef(ev *event.Event, op byte) {
	ev.Kind = event.StackDef
	if op&f2 != 0 && d.version < 6 {
		d.failf("bad op %#x", op)
		return
	}
	if op&f0 != 0 {
		ev.Time = d.timeFrom(d.uv(sTime))
		if ev.Time == 0 {
			d.failf("explicit time 0")
		}
	}
	if op&f1 != 0 {
		ev.Stack = d.lastStack + 1
	} else {
		ev.Stack = d.u32(sStack)
	}
	d.lastStack = ev.Stack
	if ev.Stack >= event.MaxStackID {
		d.failf("stack id %d (at most %d)", ev.Stack, event.MaxStackID)
		return
	}
	var fr []uint64
	if op&f2 != 0 {
		fr = d.sharedFrames()
	} else {
		fr = d.frames()
	}
	d.defs = append(d.defs, fr)
	ev.Ext().Frames = fr
	if fr == nil && d.bad < 0 {
		d.failf("stack without frames")
	}
}

// sharedFrames decodes what encoder.putInner coded after a reference to an
// earlier stack of the chunk and the number of its outermost frames shared.
func (d *decoder) sharedFrames() []uint64 {
	ref := d.uv(sFrames)
	if ref == 0 || ref > uint64(len(d.defs)) {
		d.failf("stack %d back of %d", ref, len(d.defs))
		return nil
	}
	from := d.defs[uint64(len(d.defs))-ref]
	k := d.uv(sFrames)
	if k == 0 || k > uint64(len(from)) {
		d.failf("%d shared frames of a stack of %d", k, len(from))
		return nil
	}
	n := d.count(sFrames, MaxFrames-int(k))
	if d.bad >= 0 {
		return nil
	}
	fr := d.alloc64(n + int(k))
	copy(fr[n:], from[uint64(len(from))-k:])
	if n > 0 {
		f := innerAnchor(fr, n, from) + uint64(unzigzag(d.uv(sFrames)))
		fr[n-1] = f
		for i := n - 2; i >= 0; i-- {
			f += uint64(unzigzag(d.uv(sFrames)))
			fr[i] = f
		}
	}
	d.prevFrame = fr[0]
	return fr
}

// alloc64 returns n fresh frames from the arena.
func (d *decoder) alloc64(n int) []uint64 {
	if cap(d.arena)-len(d.arena) < n {
		d.arena = make([]uint64, 0, max(n, 1024))
	}
	fr := d.arena[len(d.arena) : len(d.arena)+n : len(d.arena)+n]
	d.arena = d.arena[:len(d.arena)+n]
	return fr
}

// decAgg decodes what encoder.addAgg codes.
func (d *decoder) decAgg(ev *event.Event, op byte) {
	if d.version < 7 {
		d.failf("a compact aggregate in a version %d trace", d.version)
		return
	}
	ev.Kind = event.Agg
	ev.Time = d.timeFrom(d.uv(sTime))
	ev.Fn = event.Fn(d.byte(sFn))
	ffn := freeFnFor(ev.Fn)
	if op&f1 == 0 {
		ffn = event.Fn(d.byte(sFn))
	}
	if ev.Fn == 0 || ffn == 0 {
		d.failf("aggregate of functions %d and %d", ev.Fn, ffn)
		return
	}
	ev.Stack = d.stackRef()
	var fstack uint32
	if op&f0 != 0 {
		if fstack = d.stackRef(); fstack == 0 {
			d.failf("explicit free stack 0")
			return
		}
	}
	pairs := d.uv(sMisc)
	bytes := d.size()
	var temp uint64
	if op&f2 != 0 {
		if temp = d.uv(sMisc); temp == 0 {
			d.failf("explicit 0 temporaries")
		}
	}
	ev.SetAgg(pairs, bytes, temp, fstack, ffn)
}

// decScope decodes what encoder.addScope coded.
func (d *decoder) decScope(ev *event.Event, op byte) {
	if d.version < 5 {
		d.failf("a scope marker in a version %d trace", d.version)
		return
	}
	if op&f2 != 0 || (op&f0 != 0 && op&f1 != 0) {
		d.failf("bad op %#x", op)
		return
	}
	ev.Time = d.timeFrom(d.uv(sTime))
	if d.shift != 0 && d.version >= 6 {
		low := d.uv(sMisc)
		if low>>d.shift != 0 {
			d.failf("scope marker time bits %#x beyond the shift %d", low, d.shift)
			return
		}
		ev.Time |= low
	}
	depth := d.uv(sMisc)
	if op&f0 != 0 {
		ev.SetScope(event.ScopeEnd, depth)
		return
	}
	ev.SetScope(event.ScopeBegin, depth)
	var name string
	if op&f1 != 0 {
		k := d.uv(sMisc)
		if k >= uint64(len(d.names)) {
			d.failf("scope name %d of %d", k, len(d.names))
			return
		}
		name = d.names[k]
	} else {
		name = d.str(sMisc)
		if name == "" {
			d.failf("scope without a name")
			return
		}
		if len(d.names) < maxChunkNames {
			d.names = append(d.names, name)
		}
	}
	ev.Ext().Text = name
}

// frames decodes a stack; nil for none.
func (d *decoder) frames() []uint64 {
	n := d.count(sFrames, MaxFrames)
	if n == 0 {
		return nil
	}
	fr := d.alloc64(n)
	f := d.prevFrame + uint64(unzigzag(d.uv(sFrames)))
	fr[0] = f
	d.prevFrame = f
	for i := 1; i < n; i++ {
		f += uint64(unzigzag(d.uv(sFrames)))
		fr[i] = f
	}
	return fr
}

func (d *decoder) decGeneric(ev *event.Event) {
	ev.Kind = event.Kind(d.byte(sOps))
	mask := d.uv(sMisc)
	if mask&^gAll != 0 {
		d.failf("bad field mask %#x", mask)
		return
	}
	nonzero := func(v uint64) uint64 {
		if v == 0 {
			d.failf("explicit zero field")
		}
		return v
	}
	if mask&gFn != 0 {
		ev.Fn = event.Fn(nonzero(uint64(d.byte(sMisc))))
	}
	if mask&gStack != 0 {
		ev.Stack = uint32(nonzero(uint64(d.u32(sMisc))))
	}
	if mask&gTime != 0 {
		ev.Time = nonzero(d.timeFrom(d.uv(sTime)))
	}
	if mask&gAddr != 0 {
		ev.Addr = nonzero(d.uv(sMisc))
	}
	if mask&gAddr2 != 0 {
		ev.Addr2 = nonzero(d.uv(sMisc))
	}
	if mask&gSize != 0 {
		ev.Size = nonzero(d.uv(sMisc))
	}
	if mask&gAux != 0 {
		ev.Aux = nonzero(d.uv(sMisc))
	}
	if mask&gFrames != 0 {
		ev.Ext().Frames = d.frames()
		if ev.Frames() == nil {
			d.failf("explicit empty frames")
		}
	}
	if mask&gModule != 0 {
		m := &event.Module{ID: d.u32(sMisc), Path: d.str(sMisc)}
		if b := d.bytes(sMisc, MaxString); len(b) > 0 {
			m.BuildID = append([]byte(nil), b...)
		}
		m.Bias = d.uv(sMisc)
		// A segment takes at least 4 bytes.
		if n := d.count(sMisc, MaxSegments); n > 0 && n <= (len(d.s[sMisc].b)-d.s[sMisc].i)/4 {
			m.Segments = make([]event.Segment, n)
			for i := range m.Segments {
				s := &m.Segments[i]
				s.Vaddr, s.Memsz, s.Flags, s.Offset = d.uv(sMisc), d.uv(sMisc), d.u32(sMisc), d.uv(sMisc)
			}
		} else if n > 0 {
			d.fail(sMisc)
		}
		ev.Ext().Module = m
	}
	if mask&gText != 0 {
		ev.Ext().Text = d.str(sMisc)
		if ev.Text() == "" {
			d.failf("explicit empty text")
		}
	}
	if mask&gProcess != 0 {
		p := &event.ProcessInfo{Index: d.u32(sMisc), PID: d.i32(sMisc), PPID: d.i32(sMisc),
			ParentProc: d.i32(sMisc), ForkID: d.uv(sMisc), ExecOf: d.i32(sMisc)}
		if n := d.count(sMisc, MaxArgs); n > 0 {
			p.Argv = make([]string, n)
			total := 0
			for i := range p.Argv {
				p.Argv[i] = d.str(sMisc)
				total += len(p.Argv[i])
			}
			if total > 4*MaxString {
				d.failf("%d bytes of arguments (limit %d)", total, 4*MaxString)
			}
		}
		p.Exe = d.str(sMisc)
		fl := d.byte(sMisc)
		if fl&^15 != 0 {
			d.failf("bad process flags %#x", fl)
		}
		p.Exited, p.ExecdOut = fl&1 != 0, fl&2 != 0
		p.Attached, p.Detached = fl&4 != 0, fl&8 != 0
		p.Code, p.Signal = d.i32(sMisc), d.i32(sMisc)
		ev.Ext().Process = p
	}
	if mask&gClock != 0 {
		c := &event.ClockInfo{Ticks: d.uv(sMisc), Mono: d.uv(sMisc), Real: d.uv(sMisc)}
		st := &d.s[sMisc]
		if len(st.b)-st.i < 8 {
			d.fail(sMisc)
		} else {
			c.TicksPerSec = math.Float64frombits(binary.LittleEndian.Uint64(st.b[st.i:]))
			st.i += 8
		}
		ev.Ext().Clock = c
	}
	if mask&gScan != 0 {
		ev.Ext().Scan = d.scan()
	}
	if mask&gRootCause != 0 {
		if d.version < 4 {
			d.failf("a root cause in a version %d trace", d.version)
			return
		}
		ev.Ext().RootCause = d.rootCause()
	}
	if mask&gStale != 0 {
		if d.version < 6 {
			d.failf("a stale epoch in a version %d trace", d.version)
			return
		}
		ev.Ext().Stale = d.stale()
	}
}

// stale reads what putStale wrote.
func (d *decoder) stale() *event.StaleInfo {
	st := &event.StaleInfo{Base: d.uv(sMisc), Page: d.u32(sMisc), Count: d.u32(sMisc), Watched: d.u32(sMisc)}
	if n := d.count(sMisc, MaxStaleWords); n > 0 {
		st.Referenced = make([]uint64, n)
		for i := range st.Referenced {
			st.Referenced[i] = d.uv(sMisc)
		}
	}
	if st.Page == 0 || st.Count > MaxStaleWords*64 || st.Watched > st.Count {
		d.failf("bad stale epoch (page %d, %d pages, %d watched)", st.Page, st.Count, st.Watched)
	}
	return st
}

// rootCause reads what putRootCause wrote.
func (d *decoder) rootCause() *event.RootCauseInfo {
	rc := &event.RootCauseInfo{Status: event.RootCauseStatus(d.byte(sMisc))}
	if rc.Status == 0 || rc.Status >= event.NumRootCauseStatus {
		d.failf("bad root-cause status %d", rc.Status)
		return rc
	}
	rc.Traced, rc.Freed, rc.Leaked = uint32(d.uv(sMisc)), uint32(d.uv(sMisc)), uint32(d.uv(sMisc))
	if n := d.count(sMisc, MaxRootCauseItems); n > 0 {
		rc.Functions = make([]uint64, n)
		for i := range rc.Functions {
			rc.Functions[i] = d.uv(sMisc)
		}
	}
	if n := d.count(sMisc, MaxRootCauseItems); n > 0 {
		rc.Branches = make([]event.RootBranch, n)
		for i := range rc.Branches {
			br := &rc.Branches[i]
			br.Addr, br.To = d.uv(sMisc), d.uv(sMisc)
			switch d.byte(sMisc) {
			case 0:
			case 1:
				br.LeaksWhenTaken = true
			default:
				d.failf("bad branch direction")
				return rc
			}
		}
	}
	rc.Note = d.str(sMisc)
	rc.WindowNs, rc.Stops, rc.FoundAfterNs = d.uv(sMisc), d.uv(sMisc), d.uv(sMisc)
	return rc
}

// scan reads what putScan wrote.
func (d *decoder) scan() *event.ScanInfo {
	sc := &event.ScanInfo{Part: uint32(d.uv(sMisc))}
	sc.PauseNs, sc.RootBytes, sc.HeapBytes = d.uv(sMisc), d.uv(sMisc), d.uv(sMisc)
	if d.version >= 3 {
		flags := d.uv(sMisc)
		known := uint64(scanLive)
		if d.version >= 6 {
			known |= scanTyped
		}
		if flags&^known != 0 {
			d.failf("unknown scan flags %#x", flags)
			return sc
		}
		sc.Live = flags&scanLive != 0
		sc.Typed = flags&scanTyped != 0
	}
	sc.Suppressions, sc.Error = d.str(sMisc), d.str(sMisc)
	if sc.Typed {
		// A type takes at least 4 bytes, a name 1.
		n := d.count(sMisc, MaxScanBlocks)
		if n > (len(d.s[sMisc].b)-d.s[sMisc].i)/4 {
			d.fail(sMisc)
			return sc
		}
		if n > 0 {
			sc.Types = make([]event.TypeDef, n)
		}
		for i := range sc.Types {
			t := &sc.Types[i]
			t.Name, t.File = d.str(sMisc), d.str(sMisc)
			line := d.uv(sMisc)
			if line > 1<<32-1 {
				d.failf("bad type line %d", line)
				return sc
			}
			t.Line, t.Size = uint32(line), d.uv(sMisc)
		}
		n = d.count(sMisc, MaxScanBlocks)
		if n > len(d.s[sMisc].b)-d.s[sMisc].i {
			d.fail(sMisc)
			return sc
		}
		if n > 0 {
			sc.Names = make([]string, n)
		}
		for i := range sc.Names {
			sc.Names[i] = d.str(sMisc)
		}
		sc.TypeNs = d.uv(sMisc)
	}
	// A block takes at least 4 bytes.
	n := d.count(sMisc, MaxScanBlocks)
	if n > (len(d.s[sMisc].b)-d.s[sMisc].i)/4 {
		d.fail(sMisc)
		return sc
	}
	sc.Blocks = make([]event.ScannedBlock, n)
	var prev uint64
	for i := range sc.Blocks {
		blk := &sc.Blocks[i]
		blk.Addr = prev + uint64(unzigzag(d.uv(sMisc)))
		blk.Size = d.uv(sMisc)
		blk.Kind = event.LeakKind(d.byte(sMisc))
		if blk.Kind >= event.NumLeakKinds {
			d.failf("bad leak kind %d", blk.Kind)
			return sc
		}
		if o := d.uv(sMisc); o != 0 {
			blk.Owner = blk.Addr + uint64(unzigzag(o-1))
		}
		if sc.Typed {
			t := d.uv(sMisc)
			blk.Evidence = d.byte(sMisc)
			if t > 1<<32-1 || blk.Evidence >= event.NumEvidence {
				d.failf("bad block type %d (evidence %d)", t, blk.Evidence)
				return sc
			}
			blk.Type = uint32(t)
			if h := d.uv(sMisc); h != 0 {
				blk.Holder = blk.Addr + uint64(unzigzag(h-1))
			}
			v := d.uv(sMisc)
			if v > 1<<32-1 {
				d.failf("bad block holder name %d", v)
				return sc
			}
			blk.Via, blk.Retained = uint32(v), d.uv(sMisc)
		}
		prev = blk.Addr
	}
	return sc
}
