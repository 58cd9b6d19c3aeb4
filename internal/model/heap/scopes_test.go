package heap

import (
	"reflect"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func scopeBegin(t uint64, name string, depth uint64, thread int32) event.Event {
	return event.Event{Kind: event.ScopeBegin, Time: t, Aux: depth, Thread: thread, X: &event.Extra{Text: name}}
}

func scopeEnd(t uint64, depth uint64, thread int32) event.Event {
	return event.Event{Kind: event.ScopeEnd, Time: t, Aux: depth, Thread: thread}
}

func at(ev event.Event, stack uint32) event.Event {
	ev.Stack = stack
	return ev
}

// scopeWant is what a test expects of one scope; held maps an allocation
// site to blocks held at closes and, of those, still live at the end.
type scopeWant struct {
	entered, closed, unclosed, recursive uint64
	total, maxT                          uint64
	allocBytes, allocBlocks              uint64
	freedBytes, freedBlocks              uint64
	liveBytes, heldBytes, heldBlocks     uint64
	held                                 map[StackID][2]uint64
}

func checkScopes(t *testing.T, p *Process, want map[string]scopeWant) {
	t.Helper()
	got := map[string]*Scope{}
	for _, sc := range p.Scopes() {
		got[sc.Name] = sc
	}
	if len(got) != len(want) {
		t.Errorf("%d scopes, want %d", len(got), len(want))
	}
	for name, w := range want {
		sc := got[name]
		if sc == nil {
			t.Errorf("no scope %q", name)
			continue
		}
		g := scopeWant{sc.Entered, sc.Closed, sc.Unclosed, sc.Recursive, sc.TotalTicks, sc.MaxTicks,
			sc.AllocBytes, sc.AllocBlocks, sc.FreedBytes, sc.FreedBlocks, sc.LiveBytes, sc.HeldBytes, sc.HeldBlocks,
			map[StackID][2]uint64{}}
		for _, ss := range sc.Held {
			g.held[ss.Site] = [2]uint64{ss.Blocks, ss.LiveBlocks}
		}
		if w.held == nil {
			w.held = map[StackID][2]uint64{}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("scope %q:\n got %+v\nwant %+v", name, g, w)
		}
	}
}

// applyAll applies evs to a new model and returns its first image.
func applyAll(evs []event.Event) *Process {
	s := NewSession()
	s.Apply(evs)
	s.Finish()
	return s.Procs[0]
}

// stackDefs defines agent stack ids 1 to n, each its own stack.
func stackDefs(n int) []event.Event {
	var out []event.Event
	for i := 1; i <= n; i++ {
		out = append(out, event.Event{Kind: event.StackDef, Stack: uint32(i), X: &event.Extra{Frames: []uint64{0x400000 + uint64(i)*16}}})
	}
	return out
}

// TestScopesNested: an inner scope's numbers count in its outer one; what
// each held when it closed is what was allocated inside and still live.
func TestScopesNested(t *testing.T) {
	evs := append([]event.Event{start()}, stackDefs(4)...)
	evs = append(evs,
		free(5, 0x9000, 1),               // no scope open
		at(alloc(8, 0x9000, 1000, 1), 4), // before: the free above waited for it
		scopeBegin(100, "outer", 1, 1),
		at(alloc(110, 0xa000, 100, 1), 1), // A
		scopeBegin(120, "inner", 2, 1),
		at(alloc(130, 0xb000, 10, 1), 2), // B
		at(alloc(140, 0xc000, 20, 1), 3), // C
		free(150, 0xb000, 1),
		scopeEnd(200, 2, 1),
		free(210, 0xa000, 1),
		at(alloc(220, 0xd000, 5, 1), 2), // D
		at(alloc(225, 0x9100, 7, 1), 4), // freed by another thread while the scope is open
		free(226, 0x9100, 2),
		scopeEnd(400, 1, 1),
		free(500, 0xc000, 1), // after both closed: C held by both, freed since
	)
	p := applyAll(evs)
	st := func(id uint32) StackID { return p.StackOf(id) }
	checkScopes(t, p, map[string]scopeWant{
		"inner": {entered: 1, closed: 1, total: 80, maxT: 80, allocBytes: 30, allocBlocks: 2, freedBytes: 10, freedBlocks: 1,
			liveBytes: 0, heldBytes: 20, heldBlocks: 1, held: map[StackID][2]uint64{st(3): {1, 0}}},
		"outer": {entered: 1, closed: 1, total: 300, maxT: 300, allocBytes: 142, allocBlocks: 5, freedBytes: 110, freedBlocks: 2,
			liveBytes: 5, heldBytes: 25, heldBlocks: 2, held: map[StackID][2]uint64{st(3): {1, 0}, st(2): {1, 1}}},
	})
	if p.ScopeAnomalies != 0 {
		t.Errorf("%d scope anomalies", p.ScopeAnomalies)
	}
	sc := p.Scopes()[0]
	if sc.First != 100 || sc.Last != 400 || sc.Calls[event.Malloc] != 5 || sc.Calls[event.FreeFn] != 2 || sc.MaxLiveBytes != 130 {
		t.Errorf("outer: first %d last %d, %d mallocs %d frees, max live %d; want 100, 400, 5, 2, 130",
			sc.First, sc.Last, sc.Calls[event.Malloc], sc.Calls[event.FreeFn], sc.MaxLiveBytes)
	}
	if a := p.Scopes()[0].Held[0].Addrs; len(a) != 1 || a[0] != 0xc000 {
		t.Errorf("outer held addresses %x, want c000 first", a)
	}
}

// TestScopesThreads: scopes of two threads that interleave are
// independent; a scope name shared by both sums them.
func TestScopesThreads(t *testing.T) {
	evs := append([]event.Event{start()}, stackDefs(2)...)
	evs = append(evs,
		scopeBegin(10, "t1", 1, 1),
		scopeBegin(11, "t2", 1, 2),
		at(alloc(12, 0x1000, 8, 1), 1),
		at(alloc(13, 0x2000, 16, 2), 2),
		scopeBegin(14, "both", 2, 2),
		scopeBegin(15, "both", 2, 1),
		at(alloc(16, 0x3000, 32, 2), 2),
		at(alloc(17, 0x4000, 64, 1), 1),
		free(18, 0x1000, 2), // thread 2 frees thread 1's block: in t2 and both, not t1
		scopeEnd(19, 2, 1),
		scopeEnd(20, 2, 2),
		scopeEnd(21, 1, 2),
		scopeEnd(22, 1, 1),
	)
	p := applyAll(evs)
	st := func(id uint32) StackID { return p.StackOf(id) }
	checkScopes(t, p, map[string]scopeWant{
		"t1": {entered: 1, closed: 1, total: 12, maxT: 12, allocBytes: 72, allocBlocks: 2, liveBytes: 64,
			heldBytes: 64, heldBlocks: 1, held: map[StackID][2]uint64{st(1): {1, 1}}},
		"t2": {entered: 1, closed: 1, total: 10, maxT: 10, allocBytes: 48, allocBlocks: 2, freedBytes: 8, freedBlocks: 1,
			liveBytes: 48, heldBytes: 48, heldBlocks: 2, held: map[StackID][2]uint64{st(2): {2, 2}}},
		"both": {entered: 2, closed: 2, total: 4 + 6, maxT: 6, allocBytes: 96, allocBlocks: 2, freedBytes: 8, freedBlocks: 1,
			liveBytes: 96, heldBytes: 96, heldBlocks: 2, held: map[StackID][2]uint64{st(1): {1, 1}, st(2): {1, 1}}},
	})
	if n := p.Scopes()[2].Threads(); len(n) != 2 || n[1] != 1 || n[2] != 1 {
		t.Errorf("both: entries by thread %v, want one in each", n)
	}
}

// TestScopesRecursion: a name open twice on a stack counts once.
func TestScopesRecursion(t *testing.T) {
	evs := []event.Event{start(),
		scopeBegin(10, "f", 1, 1),
		alloc(11, 0x1000, 8, 1),
		scopeBegin(12, "f", 2, 1),
		alloc(13, 0x2000, 16, 1),
		scopeEnd(14, 2, 1),
		free(15, 0x2000, 1),
		scopeEnd(20, 1, 1),
	}
	checkScopes(t, applyAll(evs), map[string]scopeWant{
		"f": {entered: 2, closed: 2, recursive: 1, total: 10, maxT: 10, allocBytes: 24, allocBlocks: 2, freedBytes: 16, freedBlocks: 1,
			liveBytes: 8, heldBytes: 8, heldBlocks: 1, held: map[StackID][2]uint64{0: {1, 1}}},
	})
}

// TestScopesOutsideAndLost: blocks the agent kept pending or folded were
// allocated outside any scope; a realloc inside counts its new block;
// ends that were lost close what they should have; what is open at the
// end closes there; an end with nothing open is an anomaly.
func TestScopesOutsideAndLost(t *testing.T) {
	late := alloc(12, 0x5000, 100, 1)
	late.Addr2 = 5 // pending since 5
	evs := []event.Event{start(),
		alloc(1, 0x1000, 10, 1),
		scopeBegin(10, "a", 1, 1),
		late,
		{Kind: event.Agg, Fn: event.Malloc, Time: 13, Thread: 1, Addr: 3, Size: 300, Aux: uint64(event.FreeFn) << 32},
		{Kind: event.ReallocBegin, Fn: event.ReallocFn, Time: 14, Thread: 1, Addr: 0x1000},
		{Kind: event.Realloc, Fn: event.ReallocFn, Time: 15, Thread: 1, Addr: 0x1000, Addr2: 0x6000, Size: 40},
		scopeBegin(16, "b", 2, 1),
		scopeBegin(17, "c", 3, 1),
		alloc(18, 0x7000, 1, 1),
		scopeEnd(19, 1, 1), // the ends of c and b were lost
		scopeEnd(20, 0, 1), // nothing open
		scopeBegin(30, "d", 1, 1),
		alloc(31, 0x8000, 2, 1),
		free(40, 0x6000, 1),
	}
	p := applyAll(evs)
	checkScopes(t, p, map[string]scopeWant{
		"a": {entered: 1, closed: 1, total: 9, maxT: 9, allocBytes: 41, allocBlocks: 2, freedBytes: 10, freedBlocks: 1,
			liveBytes: 1, heldBytes: 41, heldBlocks: 2, held: map[StackID][2]uint64{0: {2, 1}}},
		"b": {entered: 1, unclosed: 1, total: 3, maxT: 3, allocBytes: 1, allocBlocks: 1, liveBytes: 1, heldBytes: 1, heldBlocks: 1,
			held: map[StackID][2]uint64{0: {1, 1}}},
		"c": {entered: 1, unclosed: 1, total: 2, maxT: 2, allocBytes: 1, allocBlocks: 1, liveBytes: 1, heldBytes: 1, heldBlocks: 1,
			held: map[StackID][2]uint64{0: {1, 1}}},
		"d": {entered: 1, unclosed: 1, total: 10, maxT: 10, allocBytes: 2, allocBlocks: 1, freedBytes: 40, freedBlocks: 1,
			liveBytes: 2, heldBytes: 2, heldBlocks: 1, held: map[StackID][2]uint64{0: {1, 1}}},
	})
	if p.ScopeAnomalies != 3 {
		t.Errorf("%d scope anomalies, want 3 (two lost ends, one end of nothing)", p.ScopeAnomalies)
	}
	if c := p.Scopes()[0].Calls; c[event.ReallocFn] != 1 || c[event.Malloc] != 1 || c[event.FreeFn] != 0 {
		t.Errorf("a's calls %v, want one realloc and one malloc (in c), no free", c)
	}
}
