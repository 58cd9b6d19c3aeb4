package collect

import (
	"os"
	"testing"

	"github.com/leakpath/leakpath/internal/target/region"
)

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestSpareRegion checks the spare's life: made on the first take, handed
// over by the next, made again, and released by close (its memfd closed),
// after which none is made.
func TestSpareRegion(t *testing.T) {
	before := openFDs(t)
	s := spareRegion{opts: region.Options{Slots: 2, RingSize: 4096}}
	if r := s.take(); r != nil {
		t.Fatal("a spare before any was made")
	}
	s.fills.Wait()
	r := s.take()
	if r == nil {
		t.Fatal("no spare after it was made")
	}
	r.Assign(int32(os.Getpid()), 7)
	r.Close()
	s.fills.Wait() // the next one
	if n := openFDs(t); n != before+1 {
		t.Errorf("%d descriptors open with a spare ready, want %d", n, before+1)
	}
	s.close()
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors open after close, want %d: the spare was not released", n, before)
	}
	if r := s.take(); r != nil {
		t.Error("a spare after close")
	}
	s.fills.Wait()
	if s.r != nil || s.making {
		t.Error("a spare made after close")
	}

	bad := spareRegion{opts: region.Options{Slots: -1}}
	bad.take()
	bad.fills.Wait()
	if r := bad.take(); r != nil {
		t.Error("a spare of options that make none")
	}
	bad.close()
}
