package leak

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/leakpath/leakpath/internal/sys/ptrace"
)

// arena is an in-memory Memory: size bytes from base, minus holes that
// cannot be read. A range is read up to the first byte it cannot read.
type arena struct {
	base  uint64
	data  []byte
	holes [][2]uint64  // [start, end), sorted, disjoint
	calls atomic.Int64 // (leakGraph reads in two halves at once)
	fail  error        // returned by every ReadRanges call if set
}

var errUnreadable = errors.New("unreadable")

func newArena(base uint64, size int) *arena {
	return &arena{base: base, data: make([]byte, size)}
}

func (a *arena) end() uint64 { return a.base + uint64(len(a.data)) }

// put stores little-endian words from addr (aligned or not).
func (a *arena) put(addr uint64, ws ...uint64) {
	for i, w := range ws {
		binary.LittleEndian.PutUint64(a.data[addr-a.base+uint64(8*i):], w)
	}
}

func (a *arena) word(addr uint64) uint64 {
	return binary.LittleEndian.Uint64(a.data[addr-a.base:])
}

// readable tells whether [addr, addr+n) can be read.
func (a *arena) readable(addr, n uint64) bool {
	if addr < a.base || addr+n > a.end() || addr+n < addr {
		return false
	}
	for _, h := range a.holes {
		if addr < h[1] && addr+n > h[0] {
			return false
		}
	}
	return true
}

func (a *arena) ReadRanges(rs []ptrace.Range) (int, error) {
	a.calls.Add(1)
	if a.fail != nil {
		return 0, a.fail
	}
	total := 0
	var first error
	for i := range rs {
		r := &rs[i]
		r.N = 0
		lim := uint64(0)
		if r.Addr >= a.base && r.Addr < a.end() {
			lim = min(uint64(len(r.Buf)), a.end()-r.Addr)
			for _, h := range a.holes {
				if h[1] > r.Addr && h[0] < r.Addr+lim {
					lim = max(h[0], r.Addr) - r.Addr
				}
			}
		}
		if lim > 0 {
			r.N = copy(r.Buf[:lim], a.data[r.Addr-a.base:])
		}
		total += r.N
		if r.N < len(r.Buf) && first == nil {
			first = fmt.Errorf("read %#x: %w", r.Addr+uint64(r.N), errUnreadable)
		}
	}
	return total, first
}
