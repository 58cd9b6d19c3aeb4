package region

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// producer plays the agent's part for one slot: it appends records to the
// ring the way lp_put does (whole records, possibly across the ring's end)
// and publishes head.
type producer struct {
	r    *Region
	slot int
	head uint64
}

func (p *producer) claim(tid int32) {
	so := p.r.slotOff(p.slot)
	p.r.u32(so + wire.OffSlotState).Store(wire.SlotActive)
	p.r.u32(so + wire.OffSlotTID).Store(uint32(tid))
	if used := p.r.u32(wire.OffSlotsUsed); used.Load() < uint32(p.slot+1) {
		used.Store(uint32(p.slot + 1))
	}
}

func (p *producer) put(words ...uint64) bool {
	size := uint64(p.r.ringSize(p.slot))
	so := p.r.slotOff(p.slot)
	tail := p.r.u64(so + wire.OffSlotTail).Load()
	if p.head+uint64(8*len(words))-tail > size {
		return false // full
	}
	base := p.r.ringOff(p.slot)
	for _, w := range words {
		binary.LittleEndian.PutUint64(p.r.mem[base+int(p.head%size):], w)
		p.head += 8
	}
	p.r.u64(so + wire.OffSlotHead).Store(p.head)
	return true
}

func hdr(typ, fn, words int, aux uint32) uint64 {
	return uint64(typ) | uint64(fn)<<8 | uint64(words)<<16 | uint64(aux)<<32
}

// drain drains into one slice per ring.
func drain(t *testing.T, r *Region) map[int][]event.Event {
	t.Helper()
	got := map[int][]event.Event{}
	tg := &sliceTarget{m: got}
	if _, err := r.Drain(tg); err != nil {
		t.Fatal(err)
	}
	return got
}

type sliceTarget struct {
	m   map[int][]event.Event
	cur []event.Event
}

func (s *sliceTarget) Buffer(ring int) *[]event.Event {
	s.cur = s.m[ring]
	return &s.cur
}

func (s *sliceTarget) Filled(ring int, _ int) { s.m[ring] = s.cur }

func TestDrainAcrossTheRingsEnd(t *testing.T) {
	// A small ring, alone and after big ones, and a big one.
	for _, tc := range []struct {
		name string
		opts Options
		slot int
	}{
		{"small", Options{Slots: 4, RingSize: 4096}, 2},
		{"small after big", Options{Slots: 4, RingSize: 4096, BigRings: 2}, 2},
		{"big", Options{Slots: 4, RingSize: 4096, BigRings: 2, BigRingSize: 8192}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { drainAcrossTheRingsEnd(t, tc.opts, tc.slot) })
	}
}

func drainAcrossTheRingsEnd(t *testing.T, opts Options, slot int) {
	r := newRegion(t, 3, opts)
	p := &producer{r: r, slot: slot}
	p.claim(77)
	if !p.put(hdr(wire.RecThreadStart, 0, 3, 77), 1, 0) {
		t.Fatal("ring full at start")
	}
	got := drain(t, r)
	if len(got[slot]) != 1 || got[slot][0].Kind != event.ThreadStart || got[slot][0].Thread != 77 || got[slot][0].Proc != 3 {
		t.Fatalf("first drain: %+v", got)
	}
	// Many rounds of allocations: the ring wraps many times and records
	// straddle its end (32-byte records in a 4096-byte ring after a
	// 24-byte one).
	var next uint64 = 0x1000
	for round := 0; round < 50; round++ {
		n := 0
		for p.put(hdr(wire.RecAlloc, int(event.Malloc), 4, 0), uint64(round), next+uint64(n)*16, 16) {
			n++
		}
		if n == 0 {
			t.Fatalf("round %d: ring never drained", round)
		}
		got := drain(t, r)
		if len(got[slot]) != n {
			t.Fatalf("round %d: put %d, drained %d", round, n, len(got[slot]))
		}
		for i, ev := range got[slot] {
			if ev.Kind != event.Alloc || ev.Addr != next+uint64(i)*16 || ev.Thread != 77 || ev.Time != uint64(round) {
				t.Fatalf("round %d event %d: %+v", round, i, ev)
			}
		}
		next += uint64(n) * 16
	}
}

// TestCorruptRegionStopsReading: each value of the agent's side out of
// bounds makes the region corrupt, says which, and nothing more is read:
// not even the good records a later drain would find.
func TestCorruptRegionStopsReading(t *testing.T) {
	cases := []struct {
		name  string
		spoil func(r *Region, p *producer)
		want  string
	}{
		{"slots in use", func(r *Region, p *producer) { r.u32(wire.OffSlotsUsed).Store(1 << 31) }, "rings in use"},
		{"head a megabyte on", func(r *Region, p *producer) { r.u64(r.slotOff(0) + wire.OffSlotHead).Store(1 << 20) }, "beyond its size"},
		{"head behind", func(r *Region, p *producer) {
			p.put(hdr(wire.RecPad, 0, 1, 0))
			drain(t, r)
			r.u64(r.slotOff(0) + wire.OffSlotHead).Store(0)
		}, "behind its tail"},
		{"head mid-record", func(r *Region, p *producer) { r.u64(r.slotOff(0) + wire.OffSlotHead).Store(12) }, "record boundary"},
		{"tail written", func(r *Region, p *producer) { r.u64(r.slotOff(0) + wire.OffSlotTail).Store(8) }, "the collector left"},
		{"garbage record", func(r *Region, p *producer) { p.put(0xffff, 0xffff) }, "unknown record type"},
		{"stack of 200 frames", func(r *Region, p *producer) {
			w := make([]uint64, 201)
			w[0] = hdr(wire.RecStack, 0, 201, 1)
			p.put(w...)
		}, "frames"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRegion(t, 0, Options{Slots: 2, RingSize: 4096})
			p := &producer{r: r, slot: 0}
			p.claim(1)
			tc.spoil(r, p)
			got := &sliceTarget{m: map[int][]event.Event{}}
			_, err := r.Drain(got)
			var bad *CorruptError
			if !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.want) || r.Corrupt() == nil {
				t.Fatalf("drain: %v, want a corrupt region (%s)", err, tc.want)
			}
			if len(got.m[0]) != 0 {
				t.Errorf("events of a corrupt ring kept: %+v", got.m[0])
			}
			// A sound record after: not read any more.
			p2 := &producer{r: r, slot: 1}
			p2.claim(2)
			p2.put(hdr(wire.RecThreadStart, 0, 3, 2), 1, 0)
			if n, err := r.Drain(got); n != 0 || err == nil || len(got.m[1]) != 0 {
				t.Errorf("a corrupt region drained %d bytes (%v), events %+v", n, err, got.m[1])
			}
		})
	}
}

func TestReclaimFreesOnlyDrainedSlotsOfDeadThreads(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: 3, RingSize: 4096})
	dead, alive, undrained := &producer{r: r, slot: 0}, &producer{r: r, slot: 1}, &producer{r: r, slot: 2}
	dead.claim(100)
	alive.claim(200)
	undrained.claim(300)
	undrained.put(hdr(wire.RecThreadExit, 0, 2, 300), 5)
	isAlive := func(tid int32) bool { return tid == 200 }
	state := func(i int) uint32 { return r.u32(r.slotOff(i) + wire.OffSlotState).Load() }
	pendBytes := r.u64(r.foldOff + wire.OffFoldPendBytes)
	pendBytes.Store(4096) // the dead thread's count of its pending bytes
	var stateAtTake uint32
	left := func(i int) {
		stateAtTake = state(i)
		r.Leftovers(i, 1, nil)
	}
	if n := r.Reclaim(isAlive, left); n != 1 {
		t.Errorf("reclaimed %d slots, want 1 (the drained dead one)", n)
	}
	// The agent's threads stop counting its pending bytes before the
	// collector dates what it takes, and none are left counted after.
	if stateAtTake != wire.SlotTaking || pendBytes.Load() != 0 {
		t.Errorf("slot state %d while its leftovers were taken, pending bytes %d after; want %d, 0",
			stateAtTake, pendBytes.Load(), wire.SlotTaking)
	}
	if state(0) != wire.SlotFree || state(1) != wire.SlotActive || state(2) != wire.SlotActive {
		t.Errorf("slot states %d %d %d", state(0), state(1), state(2))
	}
	drain(t, r)
	if n := r.Reclaim(isAlive, func(int) {}); n != 1 || state(2) != wire.SlotFree {
		t.Errorf("after draining, reclaimed %d, slot 2 state %d", n, state(2))
	}
}

func TestCreateChecksOptions(t *testing.T) {
	for _, o := range []Options{{RingSize: 3000}, {Slots: -1}, {MaxDepth: 500}, {RingSize: 1 << 31},
		{Slots: 4, BigRings: 5}, {BigRings: 1, BigRingSize: 3 * 4096}, {RingSize: 8192, BigRings: 1, BigRingSize: 4096}} {
		if r, err := Create(1, 0, o); err == nil {
			r.Close()
			t.Errorf("%+v accepted", o)
		}
	}
}

// TestAsk plays the agent's part of a program's request: a taken request
// reads back as written, and the answer wakes the asker with its result.
func TestAsk(t *testing.T) {
	r := newRegion(t, 0, Options{})
	if r.AskRequested() {
		t.Fatal("a request before any")
	}
	if _, ok := r.TakeAsk(); ok {
		t.Fatal("took a request nobody made")
	}
	r.u32(wire.OffAskKind).Store(wire.AskLeakCheck)
	r.u32(wire.OffAskTID).Store(4242)
	copy(r.mem[wire.OffAskLabel:], "after load\x00junk")
	r.u32(wire.OffAskState).Store(wire.AskRequested)
	if !r.AskRequested() {
		t.Fatal("request not seen")
	}
	a, ok := r.TakeAsk()
	if !ok || a != (Ask{Kind: wire.AskLeakCheck, TID: 4242, Label: "after load"}) {
		t.Fatalf("took %+v %v", a, ok)
	}
	if _, ok := r.TakeAsk(); ok || r.AskRequested() {
		t.Fatal("a request taken twice")
	}
	r.Answer(7)
	if st, res := r.u32(wire.OffAskState).Load(), int64(r.u64(wire.OffAskResult).Load()); st != wire.AskDone || res != 7 {
		t.Errorf("state %d result %d, want done and 7", st, res)
	}
}

// TestRingWakesWait: Ring ends a Wait long before its timeout, and a Ring
// before the Wait is not lost (the doorbell moved), whether the waiter
// keeps its processor or not (keeping it needs another for the ringer).
// The timeout is long enough that a loaded machine never reaches it: only
// a lost ring does. (A waiter that keeps its processor is also woken by
// the runtime's preemption signal, ring or not: those rounds show only
// that such a Wait returns and comes back to the ringer.)
func TestRingWakesWait(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: 2, RingSize: 4096})
	const long = 10 * time.Minute
	if runtime.GOMAXPROCS(0) == 1 {
		t.Log("one processor: every round's Wait gives it up (a waiter that kept it would leave the ringer none)")
	}
	for round := 0; round < 4; round++ {
		keep := round%2 == 1 && runtime.GOMAXPROCS(0) > 1
		done := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			r.Wait(long, keep)
			done <- time.Since(start)
		}()
		// Ring until the waiter is gone: the first ring may come before
		// it sleeps, which must not lose it either.
		deadline := time.After(long / 2)
	wait:
		for {
			r.Ring()
			select {
			case d := <-done:
				if d >= long/2 {
					t.Fatalf("round %d: Wait returned after %v", round, d)
				}
				break wait
			case <-deadline:
				t.Fatalf("round %d: Wait still sleeping %v after Ring", round, long/2)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// TestTooManyModules: more modules loaded at once than a process can map
// make the region corrupt; unloads make room, unloads of modules never
// loaded do not.
func TestTooManyModules(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: 1, RingSize: 4096})
	mod := func(kind event.Kind, id uint32) event.Event {
		return event.Event{Kind: kind, X: &event.Extra{Module: &event.Module{ID: id}}}
	}
	var evs []event.Event
	for id := range uint32(maxModules) {
		evs = append(evs, mod(event.ModuleLoad, id), mod(event.ModuleUnload, id+1<<20))
	}
	if bad := r.countModules(evs); bad != nil {
		t.Fatalf("%d modules: %v", maxModules, bad)
	}
	if bad := r.countModules([]event.Event{mod(event.ModuleUnload, 7), mod(event.ModuleLoad, 1<<21)}); bad != nil {
		t.Fatalf("a load after an unload: %v", bad)
	}
	if bad := r.countModules([]event.Event{mod(event.ModuleLoad, 1<<22)}); bad == nil || !strings.Contains(bad.Error(), "modules loaded at once") {
		t.Fatalf("one module more: %v", bad)
	}
}

// TestWaitSleepsUnderHalf: Wait does not sleep past a ring over half
// full, whose thread may have looked at the sleeping flag before it was
// set and will not ring; a ring half full or less lets it sleep (its
// thread rings once past half). The timeout is long enough that a loaded
// machine never reaches it: only a sleep there does.
func TestWaitSleepsUnderHalf(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: 2, RingSize: 4096})
	p := &producer{r: r, slot: 1}
	p.claim(7)
	for p.head < 2048 {
		if !p.put(hdr(wire.RecFree, int(event.FreeFn), 3, 0), 1, 0x1000) {
			t.Fatal("ring full")
		}
	}
	if p.head != 2064 {
		t.Fatalf("head %d", p.head)
	}
	if !r.halfFull() {
		t.Fatal("2,064 bytes of 4,096 not over half")
	}
	done := make(chan struct{})
	go func() { r.Wait(10*time.Minute, false); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("Wait slept with a ring over half full")
	}
	drain(t, r)
	p.put(hdr(wire.RecFree, int(event.FreeFn), 3, 0), 1, 0x1000)
	if r.halfFull() {
		t.Fatal("24 bytes of 4,096 over half")
	}
}

// newRegion creates a region of this process as image proc, closed when
// the test ends.
func newRegion(t testing.TB, proc uint32, o Options) *Region {
	t.Helper()
	r, err := Create(int32(os.Getpid()), proc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestBigRingsLayout: the header tells the agent where the big rings end,
// and the rings tile the data area, big ones first, up to the fold areas.
func TestBigRingsLayout(t *testing.T) {
	r := newRegion(t, 0, Options{Slots: 5, RingSize: 4096, BigRings: 2})
	if got := r.u32(wire.OffBigSlots).Load(); got != 2 {
		t.Errorf("header big slots %d, want 2", got)
	}
	if got := r.u32(wire.OffBigRingSize).Load(); got != 4*4096 {
		t.Errorf("header big ring size %d, want %d (4 * ring size)", got, 4*4096)
	}
	off := int(binary.LittleEndian.Uint64(r.mem[wire.OffDataOffset:]))
	for i := 0; i < 5; i++ {
		want := 4096
		if i < 2 {
			want = 4 * 4096
		}
		if r.ringOff(i) != off || r.ringSize(i) != want {
			t.Errorf("ring %d at %d, %d bytes; want %d, %d", i, r.ringOff(i), r.ringSize(i), off, want)
		}
		off += want
	}
	if off != r.foldOff || uint64(r.foldOff) != binary.LittleEndian.Uint64(r.mem[wire.OffFoldOffset:]) {
		t.Errorf("rings end at %d, fold areas start at %d", off, r.foldOff)
	}
	// Half of a big ring is more than a small ring holds: the collector
	// sleeps on until a big ring is half full.
	p := &producer{r: r, slot: 0}
	p.claim(1)
	for p.head <= 4096 {
		p.put(hdr(wire.RecPad, 0, 1, 0))
	}
	if r.halfFull() {
		t.Errorf("a big ring of %d bytes with %d waiting called half full", r.ringSize(0), p.head)
	}
	for p.head <= 2*4096 {
		p.put(hdr(wire.RecPad, 0, 1, 0))
	}
	if !r.halfFull() {
		t.Errorf("a big ring of %d bytes with %d waiting not called half full", r.ringSize(0), p.head)
	}
}
