package collect

import (
	"sync"

	"github.com/leakpath/leakpath/internal/target/region"
)

// spareRegion keeps a region made ahead of the next registration
// (region.Prepare): a registration that finds one hands it over at once,
// and the next is made meanwhile, off the program's way. Making one took
// 0.1-1 ms here, the more while another region was being unmapped (both
// take the collector's mmap lock), and each process waits for its own.
type spareRegion struct {
	opts   region.Options
	mu     sync.Mutex
	r      *region.Region
	making bool
	closed bool
	fills  sync.WaitGroup
}

// take returns the spare region (nil if none is ready) and has the next
// one made.
func (s *spareRegion) take() *region.Region {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.r
	s.r = nil
	if !s.making && !s.closed {
		s.making = true
		s.fills.Add(1)
		go s.fill()
	}
	return r
}

func (s *spareRegion) fill() {
	defer s.fills.Done()
	r, err := region.Prepare(s.opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.making = false
	if err != nil {
		return // the registration that makes its own reports it
	}
	if s.closed || s.r != nil {
		r.Close()
		return
	}
	s.r = r
}

// close ends the making of spares and releases the one left, if any.
func (s *spareRegion) close() {
	s.mu.Lock()
	s.closed = true
	r := s.r
	s.r = nil
	s.mu.Unlock()
	s.fills.Wait()
	if r != nil {
		r.Close()
	}
}
