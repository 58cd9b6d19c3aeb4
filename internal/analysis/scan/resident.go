package scan

import (
	"encoding/binary"
	"fmt"
	"os"
)

// residentMin is the smallest zero-fill root worth a look at its pages.
const residentMin = 64 << 10

// Bits of a /proc/PID/pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagePresent = 1 << 63
	pageSwapped = 1 << 62
)

// resident narrows the zero-fill roots to the runs of their pages that
// are in memory or in swap. A page of private anonymous memory that is
// neither was never written: it reads as zeros, which point nowhere. Not
// reading it spares a fault in the target per page: glibc keeps the 8 MiB
// stacks of exited threads for new ones, and one such stack, a few pages
// of it used, made 40 ms of an exit scan's pause. Roots whose pagemap
// cannot be read are kept whole.
func resident(pid int, roots []span) []span {
	var f *os.File
	var buf []byte
	out := roots[:0:0]
	for _, r := range roots {
		if !r.zeroFill || r.hi-r.lo < residentMin {
			out = append(out, r)
			continue
		}
		if f == nil {
			var err error
			if f, err = os.Open(fmt.Sprintf("/proc/%d/pagemap", pid)); err != nil {
				return roots
			}
			defer f.Close()
			buf = make([]byte, 8<<10)
		}
		runs, ok := residentRuns(f, buf, r)
		if !ok {
			out = append(out, r)
			continue
		}
		out = append(out, runs...)
	}
	return out
}

// residentRuns returns the parts of r on pages that pagemap f says are in
// memory or swap, or false if f could not be read.
func residentRuns(f *os.File, buf []byte, r span) ([]span, bool) {
	ps := uint64(os.Getpagesize())
	var out []span
	start, open := uint64(0), false // the run under way
	for page := r.lo &^ (ps - 1); page < r.hi; {
		n := min(uint64(len(buf))/8, (r.hi-page+ps-1)/ps)
		k, _ := f.ReadAt(buf[:n*8], int64(page/ps*8))
		if k < 8 {
			return nil, false // a short read ends early; none at all: unreadable
		}
		for i := 0; i+8 <= k; i, page = i+8, page+ps {
			used := binary.LittleEndian.Uint64(buf[i:])&(pagePresent|pageSwapped) != 0
			switch {
			case used && !open:
				start, open = max(page, r.lo), true
			case !used && open:
				out = append(out, r.sub(start, page))
				open = false
			}
		}
	}
	if open {
		out = append(out, r.sub(start, r.hi))
	}
	return out, true
}
