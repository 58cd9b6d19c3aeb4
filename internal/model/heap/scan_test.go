package heap

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

func scanOf(t uint64, live bool, blocks ...event.ScannedBlock) event.Event {
	return event.Event{Kind: event.Scan, Time: t, X: &event.Extra{Scan: &event.ScanInfo{Blocks: blocks, Live: live}}}
}

func end(t uint64) event.Event {
	return event.Event{Kind: event.ProcessEnd, Time: t, X: &event.Extra{Process: &event.ProcessInfo{Exited: true}}}
}

// kindsOf sums the live blocks of p by kind.
func kindsOf(p *Process) map[event.LeakKind]uint64 {
	out := map[event.LeakKind]uint64{}
	for _, g := range p.Leaks() {
		out[g.Kind] += g.Blocks
	}
	return out
}

// TestScanKinds: a scan classifies the blocks it saw; a block that came
// or changed size after it is unclassified; a snapshot's kinds are
// dropped at the end, an exit scan's kept.
func TestScanKinds(t *testing.T) {
	for _, live := range []bool{false, true} {
		s := NewSession()
		s.Apply([]event.Event{start(),
			alloc(1, 0x1000, 8, 1), alloc(2, 0x2000, 16, 1), alloc(3, 0x3000, 24, 1),
			scanOf(4, live,
				event.ScannedBlock{Addr: 0x1000, Size: 8, Kind: event.Definite},
				event.ScannedBlock{Addr: 0x2000, Size: 16, Kind: event.Reachable},
				event.ScannedBlock{Addr: 0x3000, Size: 24, Kind: event.Indirect, Owner: 0x1000}),
			free(5, 0x2000, 1), alloc(6, 0x2000, 32, 1), // changed since
			alloc(7, 0x4000, 8, 1), // new since
		})
		p := s.Procs[0]
		got := kindsOf(p)
		want := map[event.LeakKind]uint64{event.Definite: 1, event.Indirect: 1, event.Unclassified: 2}
		if len(got) != len(want) || got[event.Definite] != 1 || got[event.Indirect] != 1 || got[event.Unclassified] != 2 {
			t.Errorf("live=%v: kinds %v, want %v", live, got, want)
		}
		for _, g := range p.Leaks() {
			if g.Kind == event.Definite && (g.IndirectBlocks != 1 || g.IndirectBytes != 24) {
				t.Errorf("live=%v: the definite group holds %d blocks (%d B) indirectly, want 1 (24 B)", live, g.IndirectBlocks, g.IndirectBytes)
			}
		}
		s.Apply([]event.Event{end(8)})
		s.Finish()
		got = kindsOf(p)
		if live && (p.Scan != nil || got[event.Unclassified] != 4) {
			t.Errorf("snapshot scan after the end: Scan %v, kinds %v; want no scan, 4 unclassified", p.Scan, got)
		}
		if !live && (p.Scan == nil || got[event.Definite] != 1) {
			t.Errorf("exit scan after the end: Scan %v, kinds %v; want it kept", p.Scan, got)
		}
	}
}

// TestScanKindsBigTable: a scan of a table large enough to read ahead
// from classifies every block it names, the last ones too (past the end
// of the read ahead), and leaves a block it does not name unclassified.
func TestScanKindsBigTable(t *testing.T) {
	const n = prefetchSlots/2 + 100
	evs := []event.Event{start()}
	var blocks []event.ScannedBlock
	for i := uint64(0); i < n; i++ {
		a := 0x55a000000000 + i*48
		evs = append(evs, alloc(10+i, a, 40, 1))
		k := event.Reachable
		if i%3 == 0 {
			k = event.Definite
		}
		if i != n/2 {
			blocks = append(blocks, event.ScannedBlock{Addr: a, Size: 40, Kind: k})
		}
	}
	s := NewSession()
	s.Apply(append(evs, scanOf(2*n, false, blocks...)))
	p := s.Procs[0]
	if len(p.blocks.words) < prefetchSlots {
		t.Fatalf("%d blocks in %d words: too few to read ahead", n, len(p.blocks.words))
	}
	got := kindsOf(p)
	wantDef := uint64((n + 2) / 3)
	if got[event.Definite] != wantDef || got[event.Reachable] != n-1-wantDef || got[event.Unclassified] != 1 {
		t.Errorf("kinds %v, want %d definite, %d reachable, 1 unclassified", got, wantDef, n-1-wantDef)
	}
}
