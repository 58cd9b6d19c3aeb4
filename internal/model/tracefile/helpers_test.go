package tracefile

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
)

var testMeta = Meta{
	Command: []string{"./prog", "arg"},
	Created: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
	Tool:    "leakpath test",
	Host:    "host",
}

// gen makes random events of every kind, some shaped like real ones and
// some with every field random.
type gen struct {
	r     *rand.Rand
	t     uint64
	addrs []uint64 // recent addresses, for frees and reuse
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// num returns a random value of a random magnitude.
func (g *gen) num() uint64 {
	switch g.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return uint64(g.r.IntN(200))
	case 2:
		return math.MaxUint64 - uint64(g.r.IntN(3))
	case 3:
		return uint64(1) << g.r.IntN(64)
	}
	return g.r.Uint64() >> g.r.IntN(64)
}

func (g *gen) i32() int32 {
	switch g.r.IntN(4) {
	case 0:
		return 0
	case 1:
		return int32(g.r.IntN(100)) - 50
	case 2:
		return math.MinInt32 + int32(g.r.IntN(2))*int32(-1)
	}
	return int32(g.r.Uint32())
}

func (g *gen) str() string {
	if g.r.IntN(3) == 0 {
		return ""
	}
	b := make([]byte, g.r.IntN(40))
	for i := range b {
		b[i] = byte(g.r.UintN(256))
	}
	return string(b)
}

func (g *gen) addr() uint64 {
	if len(g.addrs) > 0 && g.r.IntN(3) != 0 {
		return g.addrs[len(g.addrs)-1-g.r.IntN(min(len(g.addrs), 20))]
	}
	if g.r.IntN(10) == 0 {
		return g.num()
	}
	a := 0x555555550000 + uint64(g.r.IntN(1<<20))*16
	g.addrs = append(g.addrs, a)
	if len(g.addrs) > 1000 {
		g.addrs = g.addrs[500:]
	}
	return a
}

func (g *gen) frames(n int) []uint64 {
	if n == 0 {
		if g.r.IntN(2) == 0 {
			return []uint64{}
		}
		return nil
	}
	f := make([]uint64, n)
	for i := range f {
		if g.r.IntN(4) == 0 {
			f[i] = g.num()
		} else {
			f[i] = 0x400000 + uint64(g.r.IntN(1<<16))
		}
	}
	return f
}

func (g *gen) module() *event.Module {
	m := &event.Module{ID: g.r.Uint32N(100), Path: g.str(), Bias: g.num()}
	switch g.r.IntN(3) {
	case 0:
		m.BuildID = []byte{}
	case 1:
		m.BuildID = []byte(g.str() + "x")
	}
	if n := g.r.IntN(5); n > 0 || g.r.IntN(2) == 0 {
		m.Segments = make([]event.Segment, n)
		for i := range m.Segments {
			m.Segments[i] = event.Segment{Vaddr: g.num(), Memsz: g.num(), Flags: g.r.Uint32(), Offset: g.num()}
		}
	}
	return m
}

func (g *gen) process() *event.ProcessInfo {
	p := &event.ProcessInfo{Index: g.r.Uint32(), PID: g.i32(), PPID: g.i32(), ParentProc: g.i32(),
		ForkID: g.num(), ExecOf: g.i32(), Exe: g.str(), Exited: g.r.IntN(2) == 0, Code: g.i32(),
		Signal: g.i32(), ExecdOut: g.r.IntN(2) == 0}
	if n := g.r.IntN(4); n > 0 || g.r.IntN(2) == 0 {
		p.Argv = make([]string, n)
		for i := range p.Argv {
			p.Argv[i] = g.str()
		}
	}
	return p
}

func (g *gen) clock() *event.ClockInfo {
	c := &event.ClockInfo{Ticks: g.num(), Mono: g.num(), Real: g.num()}
	switch g.r.IntN(3) {
	case 0:
		c.TicksPerSec = 1e9
	case 1:
		c.TicksPerSec = g.r.Float64() * 1e10
	default:
		c.TicksPerSec = math.Float64frombits(g.r.Uint64() &^ (0x7ff << 52)) // no NaN
	}
	return c
}

// event returns a random event: shaped for its kind most of the time,
// else with random fields.
func (g *gen) event(proc uint32, thread int32) event.Event {
	g.t += uint64(g.r.IntN(300))
	if g.r.IntN(50) == 0 {
		g.t -= uint64(g.r.IntN(100)) // ticks may go back a little
	}
	ev := event.Event{Kind: event.Kind(1 + g.r.IntN(int(event.Clock))), Proc: proc, Thread: thread, Time: g.t}
	if g.r.IntN(8) == 0 {
		// Anything goes, including unknown kinds.
		ev.Kind = event.Kind(g.r.UintN(256))
		ev.Fn = event.Fn(g.r.UintN(256))
		ev.Stack = uint32(g.num())
		if ev.Kind == event.StackDef {
			ev.Stack %= event.MaxStackID // a definition's id is bounded
		}
		ev.Time = g.num()
		ev.Addr, ev.Addr2, ev.Size, ev.Aux = g.addr(), g.num(), g.num(), g.num()
		if g.r.IntN(2) == 0 {
			ev.Ext().Frames = g.frames(g.r.IntN(5))
		}
		if g.r.IntN(2) == 0 {
			ev.Ext().Module = g.module()
		}
		if g.r.IntN(2) == 0 {
			ev.Ext().Text = g.str()
		}
		if g.r.IntN(2) == 0 {
			ev.Ext().Process = g.process()
		}
		if g.r.IntN(2) == 0 {
			ev.Ext().Clock = g.clock()
		}
		return ev
	}
	if g.r.IntN(40) == 0 {
		// Stale epochs (format version 6).
		n := uint32(1 + g.r.IntN(200))
		st := &event.StaleInfo{Base: g.addr(), Page: 4096, Count: n, Watched: uint32(g.r.IntN(int(n) + 1))}
		if g.r.IntN(4) != 0 {
			st.Referenced = make([]uint64, (n+63)/64)
			for i := range st.Referenced {
				st.Referenced[i] = g.r.Uint64()
			}
		}
		ev.Kind = event.StaleEpoch
		ev.Ext().Stale = st
		return ev
	}
	if g.r.IntN(10) == 0 {
		// Scope markers, mostly as the collector makes them.
		ev.Kind, ev.Aux = event.ScopeBegin, uint64(g.r.IntN(5))
		if g.r.IntN(2) == 0 {
			ev.Kind = event.ScopeEnd
		} else if g.r.IntN(4) != 0 {
			ev.Ext().Text = []string{"parse", "load", "a", "request handler"}[g.r.IntN(4)]
		} else {
			ev.Ext().Text = g.str()
		}
		if g.r.IntN(20) == 0 {
			ev.Aux = g.num()
		}
		return ev
	}
	fn := event.Fn(1 + g.r.IntN(int(event.NumFn)-1))
	switch ev.Kind {
	case event.Alloc:
		ev.Fn, ev.Stack, ev.Addr, ev.Size = fn, uint32(g.r.IntN(50)), g.addr(), uint64(g.r.IntN(5))*16
	case event.Free, event.ReallocBegin:
		ev.Fn, ev.Addr = fn, g.addr()
		if g.r.IntN(3) == 0 {
			ev.Stack = uint32(g.r.IntN(50))
		}
	case event.Realloc:
		ev.Fn, ev.Stack, ev.Addr, ev.Size = fn, uint32(g.r.IntN(50)), g.addr(), g.num()
		switch g.r.IntN(3) {
		case 0:
			ev.Addr2 = ev.Addr
		case 1:
			ev.Addr2 = g.addr()
		}
	case event.StackDef:
		ev.Stack = uint32(g.r.IntN(100))
		ev.Ext().Frames = g.frames(g.r.IntN(30))
		if g.r.IntN(2) == 0 {
			ev.Time = 0
		}
	case event.ModuleLoad:
		ev.Ext().Module = g.module()
	case event.ModuleUnload:
		ev.Ext().Module = &event.Module{ID: g.r.Uint32N(100)}
	case event.ThreadStart:
		ev.Addr = g.num()
	case event.ThreadName, event.Exec:
		ev.Ext().Text = g.str()
	case event.Fork:
		ev.Aux = g.num()
	case event.ForkDone:
		ev.Aux, ev.Addr = g.num(), g.num()
	case event.Exit:
		ev.Aux, ev.Size = g.num(), uint64(1+g.r.IntN(2))
	case event.ProcessStart, event.ProcessEnd:
		ev.Ext().Process = g.process()
	case event.Clock:
		ev.Ext().Clock = g.clock()
	}
	return ev
}

// events returns n random events from a few processes and threads.
func (g *gen) events(n int) []event.Event {
	evs := make([]event.Event, n)
	proc, thread := uint32(0), int32(100)
	for i := range evs {
		if g.r.IntN(20) == 0 {
			proc = uint32(g.r.IntN(3))
		}
		if g.r.IntN(5) == 0 {
			if g.r.IntN(10) == 0 {
				thread = g.i32()
			} else {
				thread = 100 + int32(g.r.IntN(4))
			}
		}
		evs[i] = g.event(proc, thread)
	}
	return evs
}

// normalize returns a deep copy of evs as a reader returns them: empty
// slices become nil, and so does an Extra with nothing in it.
func normalize(evs []event.Event) []event.Event {
	out := make([]event.Event, len(evs))
	for i, ev := range evs {
		ev.X = normalizeExtra(ev.X)
		out[i] = ev
	}
	return out
}

func normalizeExtra(x *event.Extra) *event.Extra {
	if x == nil {
		return nil
	}
	c := event.Extra{Text: x.Text}
	if len(x.Frames) > 0 {
		c.Frames = append([]uint64(nil), x.Frames...)
	}
	if m := x.Module; m != nil {
		mc := *m
		mc.BuildID, mc.Segments = nil, nil
		if len(m.BuildID) > 0 {
			mc.BuildID = append([]byte(nil), m.BuildID...)
		}
		if len(m.Segments) > 0 {
			mc.Segments = append([]event.Segment(nil), m.Segments...)
		}
		c.Module = &mc
	}
	if p := x.Process; p != nil {
		pc := *p
		pc.Argv = nil
		if len(p.Argv) > 0 {
			pc.Argv = append([]string(nil), p.Argv...)
		}
		c.Process = &pc
	}
	if k := x.Clock; k != nil {
		kc := *k
		c.Clock = &kc
	}
	if st := x.Stale; st != nil {
		sc := *st
		sc.Referenced = nil
		if len(st.Referenced) > 0 {
			sc.Referenced = append([]uint64(nil), st.Referenced...)
		}
		c.Stale = &sc
	}
	if c.Frames == nil && c.Module == nil && c.Text == "" && c.Process == nil && c.Clock == nil && c.Stale == nil {
		return nil
	}
	return &c
}

// readAll reads every event of a trace and the error that ended it
// (nil for a complete trace).
func readAll(t testing.TB, data []byte) ([]event.Event, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var all []event.Event
	buf := make([]event.Event, 0, 100)
	for {
		buf, err = r.Next(buf)
		all = append(all, buf...)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return all, err
		}
		if len(buf) == 0 {
			t.Fatal("Next returned no events and no error")
		}
	}
}
