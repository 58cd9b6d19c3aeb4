package ptrace

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestReadRanges reads many small ranges, close together (read through
// one remote iovec), far apart, out of order, across a PROT_NONE page
// (read through /proc/PID/mem) and in an unmapped page (not read), and
// checks every range's count and bytes.
func TestReadRanges(t *testing.T) {
	p := start(t, "mem")
	f := parseFields(t, p.line(t))
	guard, hole := hexField(t, f, "guard"), hexField(t, f, "hole")
	pg := uint64(4096)
	tr := seize(t, p.pid())
	if err := tr.StopAll(ctxTimeout(t, hangGuard)); err != nil {
		t.Fatal(err)
	}
	// want returns what the fixture holds at addr, and whether it is
	// readable at all.
	want := func(addr uint64) (byte, bool) {
		switch {
		case addr >= guard && addr < guard+3*pg:
			return "ABC"[(addr-guard)/pg], true
		case addr >= hole && addr < hole+pg, addr >= hole+2*pg && addr < hole+3*pg:
			return 'X', true
		}
		return 0, false
	}
	r := rand.New(rand.NewPCG(1, 2))
	var rs []Range
	for _, base := range []uint64{guard, hole} {
		for a := base; a < base+3*pg; {
			n := 8 * (1 + r.IntN(12))
			rs = append(rs, Range{Addr: a, Buf: make([]byte, n)})
			a += uint64(n + 8*r.IntN(4)) // gaps of 0 to 24 bytes
			if r.IntN(50) == 0 {
				a += uint64(r.IntN(6000)) // now and then a wide one
			}
		}
	}
	rs = append(rs, Range{Addr: guard + pg - 8, Buf: make([]byte, 16)}) // A then B
	rs = append(rs, Range{Addr: hole + pg - 8, Buf: make([]byte, 16)})  // X then the hole
	rs = append(rs, Range{Addr: guard + 16, Buf: nil})
	// Some out of order, as a scan's roots may come.
	for i := 0; i < 20; i++ {
		j, k := r.IntN(len(rs)), r.IntN(len(rs))
		rs[j], rs[k] = rs[k], rs[j]
	}
	total, err := tr.ReadRanges(rs)
	if err == nil {
		t.Errorf("ReadRanges: no error for the ranges in the unmapped page")
	}
	sum := 0
	for i, g := range rs {
		var exp []byte
		for a := g.Addr; a < g.Addr+uint64(len(g.Buf)); a++ {
			b, ok := want(a)
			if !ok {
				break
			}
			exp = append(exp, b)
		}
		if g.N != len(exp) || !bytes.Equal(g.Buf[:g.N], exp) {
			t.Fatalf("range %d at %#x (+%d): read %d bytes %q, want %d bytes %q", i, g.Addr, len(g.Buf), g.N, g.Buf[:max(g.N, 0)], len(exp), exp)
		}
		sum += g.N
	}
	if total != sum {
		t.Errorf("ReadRanges returned %d bytes, the ranges say %d", total, sum)
	}
	t.Logf("%d ranges, %d bytes", len(rs), total)
}
