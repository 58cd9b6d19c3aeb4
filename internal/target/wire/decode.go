package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/leakpath/leakpath/internal/model/event"
)

// DecodeError says where and why a ring's bytes are not valid records.
type DecodeError struct {
	Offset int // byte offset in the decoded buffer
	Reason string
	// Short: the record at Offset is sound as far as it goes, but runs
	// past the buffer's end (the rest of it may be elsewhere: a ring's
	// start).
	Short bool
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("wire: bad record at offset %d: %s", e.Offset, e.Reason)
}

// Ring is what the decoder remembers about one ring between calls: the
// thread that currently owns it, and the name of its latest scope.
type Ring struct {
	Thread int32
	// Modules counts the module loads and unloads decoded: a reader that
	// follows them need look through the events only when it moved.
	Modules uint64
	// scopeName and scopeX: the latest scope begin's name bytes and
	// Extra, shared by the begins of the same name that follow (a scope
	// in a loop), so that they cost no allocation.
	scopeName []byte
	scopeX    *event.Extra
}

// MaxTID is the largest thread id Linux gives (PID_MAX_LIMIT on 64-bit
// machines, less one).
const MaxTID = 1<<22 - 1

// minWords is the least length of each record type.
var minWords = [RecMax + 1]int{
	RecPad: 1, RecAlloc: 4, RecFree: 3, RecReallocBegin: 3, RecRealloc: 5,
	RecStack: 2, RecModule: 4, RecModuleUnload: 2, RecThreadStart: 3,
	RecThreadExit: 2, RecFork: 3, RecForkDone: 4, RecExec: 2,
	RecExecFailed: 2, RecExit: 3, RecClock: 4, RecThreadName: 2, RecAgg: 7, RecAllocLate: 6,
	RecScopeBegin: 3, RecScopeEnd: 2, RecPending: 3, RecRefree: 6, RecIgnore: 3, RecRootRegion: 4,
	RecPool: 4, RecPoolAlloc: 5, RecPoolFree: 4, RecFamily: 5,
}

// DecodeSome appends to out the events of the whole records in b, tagged
// with process index proc, within out's capacity: it stops before the
// first record that would make an event past it, and returns the extended
// slice and how many bytes of b it decoded. On a malformed record it
// returns the events before it and a *DecodeError; a record that b cuts
// off (a drain that stops at a ring's end) is one whose error says Short,
// at its start. A collector decodes so straight into the batches it
// hands on, which then never grow.
func DecodeSome(b []byte, proc uint32, r *Ring, out []event.Event) ([]event.Event, int, error) {
	le := binary.LittleEndian
	off := 0
	for off < len(b) && len(out) < cap(out) {
		if len(b)-off < 8 {
			return out, off, &DecodeError{Offset: off, Reason: "trailing bytes shorter than a word"}
		}
		h := le.Uint64(b[off:])
		typ := int(h & 0xff)
		fn := event.Fn(h >> 8 & 0xff)
		words := int(h >> 16 & 0xffff)
		aux := uint32(h >> 32)
		if typ < 1 || typ > RecMax {
			return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("unknown record type %d", typ)}
		}
		if words < minWords[typ] {
			return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("record type %d of %d words, want at least %d", typ, words, minWords[typ])}
		}
		if words*8 > len(b)-off {
			return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("record of %d words runs past the end (%d bytes left)", words, len(b)-off), Short: true}
		}
		rec := b[off : off+words*8]
		w := func(i int) uint64 { return le.Uint64(rec[i*8:]) }
		var t uint64
		if words > 1 && typ != RecStack {
			t = w(1)
		}
		// Made in the slot past out's end, which becomes out's once the
		// record is known good.
		ev := reset(&out[:len(out)+1][len(out)], proc, r.Thread, t)
		switch typ {
		case RecPad:
			off += words * 8
			continue
		case RecAlloc:
			if fn == 0 || fn >= event.NumFn {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("alloc by unknown function %d", fn)}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr, ev.Size = event.Alloc, fn, aux, w(2), w(3)
		case RecAllocLate:
			if fn == 0 || fn >= event.NumFn || w(2) == 0 {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("late alloc by function %d of address %#x", fn, w(2))}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr, ev.Size = event.Alloc, fn, aux, w(2), w(3)
			ev.SetLate(w(4))
			if tid := w(5); tid != 0 {
				if tid > MaxTID {
					return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("late alloc of thread %d", tid)}
				}
				ev.Thread = int32(tid) // the thread that allocated it: this may be another's record
			}
		case RecAgg:
			ffn := event.Fn(w(2) >> 32)
			if fn == 0 || fn >= event.NumFn || ffn == 0 || ffn >= event.NumFn {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("aggregate of functions %d and %d", fn, ffn)}
			}
			ev.Kind, ev.Fn, ev.Stack = event.Agg, fn, aux
			ev.SetAgg(w(3), w(4), w(5), uint32(w(2)), ffn)
		case RecFree:
			temporary := fn&FnTemporary != 0
			fn &^= FnTemporary
			if fn == 0 || fn >= event.NumFn {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("free by unknown function %d", fn)}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr = event.Free, fn, aux, w(2)
			if temporary {
				ev.SetTemporary()
			}
		case RecReallocBegin:
			ev.Kind, ev.Fn, ev.Stack, ev.Addr = event.ReallocBegin, event.ReallocFn, aux, w(2)
		case RecRealloc:
			if fn != event.ReallocFn && fn != event.ReallocArray {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("realloc by function %d", fn)}
			}
			ev.Kind, ev.Fn, ev.Stack = event.Realloc, fn, aux
			ev.Addr, ev.Addr2, ev.Size = w(2), w(3), w(4)
		case RecStack:
			if words-1 > MaxDepth {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("stack of %d frames", words-1)}
			}
			if aux == 0 || aux >= event.MaxStackID {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("stack id %d", aux)}
			}
			ev.Kind, ev.Stack = event.StackDef, aux
			ev.Ext().Frames = make([]uint64, words-1)
			for i := range ev.Frames() {
				ev.Frames()[i] = w(1 + i)
			}
		case RecModule:
			m, err := decodeModule(rec, aux)
			if err != nil {
				return out, off, &DecodeError{Offset: off, Reason: err.Error()}
			}
			ev.Kind, ev.Ext().Module = event.ModuleLoad, m
			r.Modules++
		case RecModuleUnload:
			ev.Kind, ev.Ext().Module = event.ModuleUnload, &event.Module{ID: aux}
			r.Modules++
		case RecThreadStart:
			if aux == 0 || aux > MaxTID {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("thread %d", aux)}
			}
			r.Thread = int32(aux)
			ev.Kind, ev.Thread, ev.Addr = event.ThreadStart, int32(aux), w(2)
		case RecThreadExit:
			ev.Kind = event.ThreadExit
		case RecFork:
			ev.SetFork(w(2))
		case RecForkDone:
			ev.SetForkDone(w(2), w(3))
		case RecExec:
			s, err := text(rec[16:], int(aux))
			if err != nil {
				return out, off, &DecodeError{Offset: off, Reason: "exec: " + err.Error()}
			}
			ev.Kind, ev.Ext().Text = event.Exec, s
		case RecExecFailed:
			// The image goes on; nothing changes for the model.
			off += words * 8
			continue
		case RecExit:
			ev.SetExit(aux, w(2))
		case RecClock:
			ev.Kind = event.Clock
			ev.Ext().Clock = &event.ClockInfo{Ticks: w(1), Mono: w(2), Real: w(3)}
		case RecThreadName:
			if words < 3 {
				return out, off, &DecodeError{Offset: off, Reason: "thread name without its thread"}
			}
			s, err := text(rec[24:], len(rec)-24)
			if err != nil {
				return out, off, &DecodeError{Offset: off, Reason: "thread name: " + err.Error()}
			}
			if aux > MaxTID {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("name of thread %d", aux)}
			}
			ev.Kind, ev.Addr, ev.Ext().Text = event.ThreadName, w(2), s
			ev.Thread = int32(aux) // 0: the thread whose pthread_t is Addr
		case RecScopeBegin:
			if words-2 > (ScopeNameMax+8)/8 {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("scope name of %d words", words-2)}
			}
			name := rec[16:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			ev.SetScope(event.ScopeBegin, uint64(aux))
			if len(name) > 0 {
				if r.scopeX == nil || !bytes.Equal(name, r.scopeName) {
					r.scopeName = append(r.scopeName[:0], name...)
					r.scopeX = &event.Extra{Text: string(name)}
				}
				ev.X = r.scopeX
			}
		case RecScopeEnd:
			ev.SetScope(event.ScopeEnd, uint64(aux))
		case RecPending:
			ev.Kind, ev.Size = event.Pending, w(2)
		case RecRefree:
			ffn := event.Fn(w(5))
			if fn == 0 || fn >= event.NumFn || ffn == 0 || ffn >= event.NumFn || w(2) == 0 {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("refree of %#x by functions %d and %d", w(2), fn, w(5))}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr, ev.Size = event.Refree, fn, aux, w(2), w(3)
			ev.SetRefreeOf(ffn, w(4))
		case RecIgnore:
			ev.Kind, ev.Addr = event.Ignore, w(2)
		case RecRootRegion:
			if aux > 1 {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("root region record %d", aux)}
			}
			ev.SetRootRegion(w(2), w(3), aux)
		case RecPool:
			switch w(3) {
			case PoolCreate:
				ev.Kind = event.PoolCreate
			case PoolDestroy:
				ev.Kind = event.PoolDestroy
			default:
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("pool operation %d", w(3))}
			}
			ev.Stack, ev.Addr = aux, w(2)
		case RecPoolAlloc:
			if w(2) == 0 {
				return out, off, &DecodeError{Offset: off, Reason: "pool object at address 0"}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr, ev.Size = event.PoolAlloc, event.PoolAllocFn, aux, w(2), w(3)
			ev.SetPool(w(4))
		case RecPoolFree:
			if w(2) == 0 {
				return out, off, &DecodeError{Offset: off, Reason: "pool free of address 0"}
			}
			ev.Kind, ev.Fn, ev.Stack, ev.Addr = event.PoolFree, event.PoolFreeFn, aux, w(2)
			ev.SetPool(w(3))
		case RecFamily:
			if aux == 0 || aux >= uint32(event.PoolAllocFn) || w(3) < FamilyTraced || w(3) > FamilyNoSlot ||
				words-4 > (FamilyNameMax+8)/8 {
				return out, off, &DecodeError{Offset: off, Reason: fmt.Sprintf("allocator family record of function %d, outcome %d", aux, w(3))}
			}
			s, err := text(rec[32:], len(rec)-32)
			if err != nil {
				return out, off, &DecodeError{Offset: off, Reason: "allocator family: " + err.Error()}
			}
			ev.Kind, ev.Fn, ev.Addr, ev.Ext().Text = event.AllocFamilyFn, event.Fn(aux), w(2), s
			ev.SetFamilyOutcome(w(3))
		}
		out = out[:len(out)+1]
		off += words * 8
	}
	return out, off, nil
}

// reset makes ev, the next event of a batch, a fresh one of process proc,
// thread and time t, field by field, and returns it: events are made in
// place, not built aside and copied in (Kind and Fn, stored a byte each,
// were read back as one word, which stalled each copy). Copied whole
// while the garbage collector marks, an event (it holds a pointer) took
// the runtime's bulk write barrier; a heap event's Extra is nil, as is the
// one it overwrites in a reused batch, and then needs no write at all.
func reset(ev *event.Event, proc uint32, thread int32, t uint64) *event.Event {
	ev.Kind, ev.Fn, ev.Proc, ev.Thread, ev.Stack = 0, 0, proc, thread, 0
	ev.Time, ev.Addr, ev.Addr2, ev.Size, ev.Aux = t, 0, 0, 0, 0
	if ev.X != nil {
		ev.X = nil
	}
	return ev
}

// text reads a NUL-padded string of at most n bytes from b.
func text(b []byte, n int) (string, error) {
	if n < 0 || n > len(b) {
		return "", fmt.Errorf("%d bytes of text in %d", n, len(b))
	}
	b = b[:n]
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), nil
		}
	}
	return string(b), nil
}

func decodeModule(rec []byte, id uint32) (*event.Module, error) {
	le := binary.LittleEndian
	words := len(rec) / 8
	w3 := le.Uint64(rec[24:])
	plen := int(w3 & 0xffffffff)
	blen := int(w3 >> 32 & 0xffff)
	nseg := int(w3 >> 48)
	bw, pw := (blen+7)/8, (plen+7)/8
	if 4+3*nseg+bw+pw != words {
		return nil, fmt.Errorf("module record of %d words for %d segments, %d-byte build id, %d-byte path", words, nseg, blen, plen)
	}
	m := &event.Module{ID: id, Bias: le.Uint64(rec[16:])}
	o := 32
	for i := 0; i < nseg; i++ {
		f := le.Uint64(rec[o+16:])
		m.Segments = append(m.Segments, event.Segment{
			Vaddr: le.Uint64(rec[o:]), Memsz: le.Uint64(rec[o+8:]),
			Flags: uint32(f), Offset: f >> 32,
		})
		o += 24
	}
	if blen > 0 {
		m.BuildID = append([]byte(nil), rec[o:o+blen]...)
	}
	o += bw * 8
	m.Path = string(rec[o : o+plen])
	return m, nil
}
