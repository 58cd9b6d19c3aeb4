// Package stale reads which blocks of the agent's slot pool a program
// touched: the mechanism behind `leakpath run --stale` (the stale
// objects of the Fujitsu patent US8930661: reachable, but never used again).
//
// US8930661 watches old objects ("area B") with memory protection and a
// fault handler. Done to an unmodified native program that is not
// invisible: a protected page makes a read(2) or write(2) into it fail with
// EFAULT instead of faulting, a handler of SIGSEGV competes with the
// program's own, and every first touch costs a fault and two mprotect
// calls; userfaultfd has the same EFAULT problem for system calls that
// touch the page. Soft-dirty bits (clear_refs 4, pagemap bit 55) see only
// writes, and on the machine this was built on they did not work at all
// (PVM hypervisor, kernel 6.18); /sys/kernel/mm/page_idle is absent there.
//
// What works, and is invisible, is the page table's accessed bit, which
// the CPU sets on any read or write, by any thread, and the kernel's
// copy_to_user/copy_from_user on behalf of a system call likewise:
// writing 1 to /proc/PID/clear_refs clears it for every page of the
// process (and flushes the TLB), and /proc/PID/smaps says per mapping
// ("Referenced:") whether a page was touched since. No fault, no signal,
// no changed result. The accessed bit is per page and smaps per mapping,
// so a watched block needs a page and a mapping of its own: C objects
// cannot move, so the agent decides at allocation time, serving a sampled
// fraction of small allocations from a pool of pages (agent/slots.c), each
// page a mapping of its own because every other one is MADV_NOHUGEPAGE
// (neighbouring mappings with different flags never merge). No guard
// pages: a program that overruns a block writes into the rest of its page
// as it would have written into malloc's heap.
//
// The collector reads each epoch (Read), then clears the bits (ClearRefs).
// Anything of leakpath's that reads the program's memory (the scans of
// snapshots and of the exit) sets the bits too: it runs after an epoch's
// reading and is followed by a clear. Measured here (PVM, 6.18): a
// program's own reads and writes, those of its other threads (a busy one
// on another CPU included) and the kernel's copies into its pages on its
// behalf are all seen; but the TLB flush clear_refs asks for takes effect
// in a thread only at its next entry into the kernel or timer tick, so an
// access in the first moments after a clear can be missed (on some days
// of this machine, accesses 10-100 ms after a clear, a program's and the
// kernel's, were missed in about one try in five, and on a loaded machine
// in bursts of a few tenths of a second: TestAccessedBits tries again for
// up to 30 s): one epoch's access, not T2 epochs of them. Limits: the kernel clears accessed
// bits itself when it ages pages under memory pressure (reclaim, MGLRU
// walks), which may hide an access (a block reported stale that was
// touched); clear_refs takes the program's page-table lock for a moment,
// and the cleared bits make its pages look idle to reclaim.
package stale

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/leakpath/leakpath/internal/model/event"
)

// Pool is the agent's slot pool: Count pages of Page bytes from Base.
type Pool struct {
	Base        uint64
	Count, Page uint32
}

// maxLine bounds one line of smaps (a mapping's header with its path).
const maxLine = 64 << 10

// Parse reads an smaps text and returns the reading of pool: which of its
// pages were mappings of their own (watched) and which of those say
// "Referenced" above 0; a page that is not a mapping of its own counts as
// referenced (it cannot be told apart from its neighbours).
func Parse(r io.Reader, pool Pool) (*event.StaleInfo, error) {
	if pool.Page == 0 || pool.Count == 0 {
		return nil, errors.New("stale: empty pool")
	}
	words := (int(pool.Count) + 63) / 64
	st := &event.StaleInfo{Base: pool.Base, Page: pool.Page, Count: pool.Count, Referenced: make([]uint64, words)}
	watched := make([]uint64, words)
	end := pool.Base + uint64(pool.Count)*uint64(pool.Page)
	br := bufio.NewReaderSize(r, 64<<10)
	cur := -1 // the pool page whose mapping's fields follow
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("stale: smaps line longer than %d bytes", maxLine)
		}
		if len(line) > 0 {
			c := line[0]
			switch {
			case c >= '0' && c <= '9' || c >= 'a' && c <= 'f':
				cur = -1
				lo, hi, ok := parseRange(line)
				if !ok {
					return nil, fmt.Errorf("stale: bad smaps mapping %q", bytes.TrimSpace(line))
				}
				if lo >= pool.Base && hi <= end && hi-lo == uint64(pool.Page) && (lo-pool.Base)%uint64(pool.Page) == 0 {
					cur = int((lo - pool.Base) / uint64(pool.Page))
					if watched[cur/64]>>(cur%64)&1 == 0 { // (a text listing it twice)
						watched[cur/64] |= 1 << (cur % 64)
						st.Watched++
					}
				}
			case cur >= 0 && bytes.HasPrefix(line, []byte("Referenced:")):
				f := bytes.Fields(line[len("Referenced:"):])
				if len(f) == 0 {
					return nil, fmt.Errorf("stale: bad smaps line %q", bytes.TrimSpace(line))
				}
				kb, perr := strconv.ParseUint(string(f[0]), 10, 64)
				if perr != nil {
					return nil, fmt.Errorf("stale: bad smaps line %q", bytes.TrimSpace(line))
				}
				if kb > 0 {
					st.Referenced[cur/64] |= 1 << (cur % 64)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("stale: reading smaps: %w", err)
		}
	}
	for i := range st.Referenced {
		st.Referenced[i] |= ^watched[i]
	}
	if rest := int(pool.Count) % 64; rest != 0 {
		st.Referenced[words-1] &= 1<<rest - 1
	}
	return st, nil
}

// parseRange parses "lo-hi " at the start of an smaps mapping line.
func parseRange(line []byte) (lo, hi uint64, ok bool) {
	dash := bytes.IndexByte(line, '-')
	if dash <= 0 {
		return 0, 0, false
	}
	sp := bytes.IndexByte(line[dash:], ' ')
	if sp < 0 {
		sp = len(line) - dash
	}
	lo, err1 := strconv.ParseUint(string(line[:dash]), 16, 64)
	hi, err2 := strconv.ParseUint(string(line[dash+1:dash+sp]), 16, 64)
	return lo, hi, err1 == nil && err2 == nil && hi > lo
}

// Read reads pid's smaps for pool (see Parse).
func Read(pid int, pool Pool) (*event.StaleInfo, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		return nil, fmt.Errorf("stale: %w", err)
	}
	defer f.Close()
	st, err := Parse(f, pool)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return st, nil
}

// ClearRefs clears the accessed bits of every page of pid.
func ClearRefs(pid int) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("stale: %w", err)
	}
	_, err = f.Write([]byte("1"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("stale: clear_refs of pid %d: %w", pid, err)
	}
	return nil
}
