package event

import "testing"

// TestAccessors: what a setter stores, its accessor reads back, in the
// fields the kind's documentation names (the trace and the wire decoder
// depend on those), and the sentinels hold.
func TestAccessors(t *testing.T) {
	var a Event
	a.Kind, a.Time = Alloc, 100
	if at, late := a.AllocTime(); at != 100 || late {
		t.Errorf("ordinary alloc: time %d late %v, want 100 false", at, late)
	}
	a.SetLate(0)
	if at, late := a.AllocTime(); at != 1 || !late {
		t.Errorf("late alloc at 0: time %d late %v, want 1 true", at, late)
	}
	a.SetLate(40)
	if at, late := a.AllocTime(); at != 40 || !late || a.Addr2 != 40 {
		t.Errorf("late alloc at 40: time %d late %v Addr2 %d", at, late, a.Addr2)
	}

	g := Event{Kind: Agg}
	g.SetAgg(7, 700, 3, 0xdeadbeef, Delete)
	if st, fn := g.AggFree(); st != 0xdeadbeef || fn != Delete {
		t.Errorf("AggFree = %#x %v, want 0xdeadbeef delete", st, fn)
	}
	if g.AggPairs() != 7 || g.Size != 700 || g.AggTemporary() != 3 {
		t.Errorf("agg pairs %d bytes %d temporary %d, want 7 700 3", g.AggPairs(), g.Size, g.AggTemporary())
	}
	if g.Aux != 0xdeadbeef|uint64(Delete)<<32 || g.Addr != 7 || g.Addr2 != 3 {
		t.Errorf("agg fields Aux %#x Addr %d Addr2 %d", g.Aux, g.Addr, g.Addr2)
	}

	var f Event
	f.Kind = Free
	if f.Temporary() {
		t.Error("a plain free reads as temporary")
	}
	f.SetTemporary()
	if !f.Temporary() {
		t.Error("SetTemporary did not take")
	}

	var k Event
	k.SetForkDone(9, uint64(^uint64(0)-10)) // -11: EAGAIN
	if k.Kind != ForkDone || k.ForkID() != 9 || k.ForkResult() != -11 {
		t.Errorf("fork done: %v id %d result %d", k.Kind, k.ForkID(), k.ForkResult())
	}
	k.SetFork(4)
	if k.Kind != Fork || k.ForkID() != 4 {
		t.Errorf("fork: %v id %d", k.Kind, k.ForkID())
	}

	var x Event
	x.SetExit(0xffffffff, ExitByUExit)
	if x.Kind != Exit || x.ExitStatus() != -1 || x.ExitCall() != ExitByUExit {
		t.Errorf("exit: %v status %d call %d", x.Kind, x.ExitStatus(), x.ExitCall())
	}

	var r Event
	r.SetRefreeOf(DeleteArray, 0x401234)
	if fn, ret := r.RefreeOf(); fn != DeleteArray || ret != 0x401234 {
		t.Errorf("refree of %v at %#x", fn, ret)
	}

	var s Event
	s.SetScope(ScopeEnd, 3)
	if s.Kind != ScopeEnd || s.ScopeDepth() != 3 {
		t.Errorf("scope: %v depth %d", s.Kind, s.ScopeDepth())
	}

	var rr Event
	rr.SetRootRegion(0x1000, 64, 1)
	if rr.Kind != RootRegion || !rr.Registered() || rr.Addr != 0x1000 || rr.Size != 64 {
		t.Errorf("root region: %+v", rr)
	}
	rr.SetRootRegion(0x1000, 64, 0)
	if rr.Registered() {
		t.Error("an unregistered root region reads as registered")
	}

	// The pool is Addr of a pool's own events, Aux of its objects'.
	for _, c := range []struct {
		ev   Event
		want uint64
	}{
		{Event{Kind: PoolCreate, Addr: 5, Aux: 6}, 5},
		{Event{Kind: PoolDestroy, Addr: 5, Aux: 6}, 5},
		{Event{Kind: PoolAlloc, Addr: 5, Aux: 6}, 6},
		{Event{Kind: PoolFree, Addr: 5, Aux: 6}, 6},
		{Event{Kind: Free, Addr: 5, Aux: 6}, 0},
	} {
		if got := c.ev.Pool(); got != c.want {
			t.Errorf("%v: pool %d, want %d", c.ev.Kind, got, c.want)
		}
	}

	var st Event
	st.Kind = StaleEpoch
	if st.BetweenEpochs() {
		t.Error("an epoch reads as a reading between epochs")
	}
	st.SetBetweenEpochs()
	if !st.BetweenEpochs() {
		t.Error("SetBetweenEpochs did not take")
	}
}
