package ptrace

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Range is one piece of a vectored read (ReadRanges): Buf is filled from
// the remote address Addr, and N is set to the number of bytes read.
type Range struct {
	Addr uint64
	Buf  []byte
	N    int
}

// maxIov is the most iovecs process_vm_readv takes in one call (IOV_MAX).
const maxIov = 1024

// ReadProcess reads len(b) bytes of process pid's memory at addr into b
// with one process_vm_readv, without a Tracer: pid need not be traced (the
// kernel's ptrace access check applies) nor stopped, and the bytes may be
// torn. It returns how many bytes it read; unreadable pages end the read.
func ReadProcess(pid int, addr uint64, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	return vmRead(pid, []unix.Iovec{iovec(b)}, []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}})
}

// ReadMemory reads len(b) bytes of the process's memory at addr into b and
// returns how many it read. It reads with process_vm_readv (one call for
// the whole buffer, on the caller's goroutine; the process need not be
// stopped, but then the bytes may be torn), and reads what that refuses
// (PROT_NONE pages, for one) through /proc/PID/mem. A partial read returns
// the bytes read from addr on and an *Error whose Addr is the first byte
// that could not be read.
func (t *Tracer) ReadMemory(addr uint64, b []byte) (int, error) {
	if t.gone.Load() {
		return 0, t.goneErr("read memory", 0)
	}
	n := 0
	for n < len(b) {
		a := addr + uint64(n)
		k, err := vmRead(int(t.memTid.Load()),
			[]unix.Iovec{iovec(b[n:])},
			[]unix.RemoteIovec{{Base: uintptr(a), Len: len(b) - n}})
		if k > 0 {
			n += k
			continue
		}
		if err == unix.ESRCH {
			if t.refreshMemTid() {
				continue
			}
			return n, t.memGoneErr("read memory", a)
		}
		k, perr := t.procMem(false, a, b[n:])
		if k > 0 {
			n += k
			continue
		}
		if t.gone.Load() {
			return n, t.goneErr("read memory", 0)
		}
		if perr != nil && !errors.Is(perr, unix.EIO) {
			err = perr
		}
		if err == nil {
			err = unix.EIO
		}
		return n, &Error{Op: "read memory", Pid: t.pid, Addr: a, Err: fmt.Errorf("unreadable: %w", err)}
	}
	return n, nil
}

// ReadRanges reads many ranges at once, for scanning a heap: with
// process_vm_readv, ranges close to each other (in increasing address
// order) through one remote iovec, what lies between them into a scratch
// buffer. The kernel's cost is per remote iovec (it pins the pages of
// each), and a heap's blocks lie a few words apart. It sets every range's
// N and goes on past ranges it cannot read fully. It returns the number of
// bytes read in all, and the error of the first range not read fully (nil
// if every range was), or the error that the process has exited.
func (t *Tracer) ReadRanges(rs []Range) (int, error) {
	if t.gone.Load() {
		return 0, t.goneErr("read memory", 0)
	}
	total := 0
	var firstErr error
	local := make([]unix.Iovec, 0, min(2*len(rs), maxIov))
	remote := make([]unix.RemoteIovec, 0, min(len(rs), maxIov))
	owner := make([]int, 0, cap(local)) // of each local iovec: its range, or -1 for a gap
	var scratch []byte
	for i := 0; i < len(rs); {
		local, remote, owner = local[:0], remote[:0], owner[:0]
		var end uint64
		j := i
		for ; j < len(rs) && len(local) <= maxIov-2 && len(remote) < maxIov; j++ {
			r := &rs[j]
			r.N = 0
			if len(r.Buf) == 0 {
				continue
			}
			if gap := r.Addr - end; len(remote) > 0 && r.Addr >= end && gap < maxGap {
				if gap > 0 {
					if scratch == nil {
						scratch = make([]byte, maxGap)
					}
					local = append(local, iovec(scratch[:gap]))
					owner = append(owner, -1)
				}
				remote[len(remote)-1].Len += int(gap) + len(r.Buf)
			} else {
				remote = append(remote, unix.RemoteIovec{Base: uintptr(r.Addr), Len: len(r.Buf)})
			}
			local = append(local, iovec(r.Buf))
			owner = append(owner, j)
			end = r.Addr + uint64(len(r.Buf))
		}
		if len(local) == 0 {
			i = j
			continue
		}
		n, err := vmRead(int(t.memTid.Load()), local, remote)
		if err == unix.ESRCH {
			if t.refreshMemTid() {
				continue
			}
			return total, t.memGoneErr("read memory", rs[i].Addr)
		}
		n = max(n, 0)
		// The kernel fills the local iovecs in order: the count says
		// where it stopped.
		stop := -1
		for x, o := range owner {
			l := int(local[x].Len)
			if n < l {
				stop = x
				break
			}
			n -= l
			if o >= 0 {
				rs[o].N = l
				total += l
			}
		}
		if stop < 0 {
			i = j
			continue
		}
		if owner[stop] < 0 {
			// Stopped between two ranges: go on with the next one.
			i = owner[stop+1]
			continue
		}
		// A range stopped the call: finish it the slow way, go on after it.
		k := owner[stop]
		r := &rs[k]
		r.N = n
		m, err := t.ReadMemory(r.Addr+uint64(n), r.Buf[n:])
		r.N += m
		total += r.N
		if err != nil {
			if errors.Is(err, ErrExited) {
				return total, err
			}
			if firstErr == nil {
				firstErr = err
			}
		}
		i = k + 1
	}
	return total, firstErr
}

// maxGap is the widest gap ReadRanges reads through between two ranges:
// less than a page, so that every page it touches holds a byte of either
// range (and is mapped).
const maxGap = 4096

// WriteMemory writes b into the process's memory at addr, read-only pages
// (code, for breakpoints) included: through /proc/PID/mem, or else with
// PTRACE_POKEDATA through a stopped thread.
func (t *Tracer) WriteMemory(addr uint64, b []byte) error {
	return t.do("write memory", func() error {
		if t.gone.Load() {
			return t.goneErr("write memory", 0)
		}
		n, err := t.procMemLocked(true, addr, b)
		if n == len(b) {
			return nil
		}
		for tid, th := range t.threads {
			if th.state != stopped {
				continue
			}
			k, perr := unix.PtracePokeData(tid, uintptr(addr)+uintptr(n), b[n:])
			n += k
			if n == len(b) {
				return nil
			}
			if perr != nil {
				err = perr
			}
			break
		}
		if err == nil {
			err = unix.EIO
		}
		return &Error{Op: "write memory", Pid: t.pid, Addr: addr + uint64(n), Err: err}
	})
}

// procMem reads or writes through /proc/PID/mem on the locked goroutine
// (where the kernel lets a tracer force access even when configured with
// proc_mem.force_override=ptrace), or directly once the Tracer is closed.
func (t *Tracer) procMem(write bool, addr uint64, b []byte) (int, error) {
	var n int
	var err error
	derr := t.do("read memory", func() error {
		n, err = t.procMemLocked(write, addr, b)
		return nil
	})
	if derr != nil {
		return t.procMemLocked(write, addr, b)
	}
	return n, err
}

func (t *Tracer) procMemLocked(write bool, addr uint64, b []byte) (int, error) {
	t.mu.Lock()
	tid := int(t.memTid.Load())
	if key := [2]int{t.execs, tid}; t.memFile == nil || t.memKey != key {
		if t.memFile != nil {
			t.memFile.Close()
			t.memFile = nil
		}
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/task/%d/mem", t.pid, tid), os.O_RDWR, 0)
		if err != nil {
			t.mu.Unlock()
			return 0, err
		}
		t.memFile, t.memKey = f, key
	}
	f := t.memFile
	t.mu.Unlock()
	// The *os.File keeps the descriptor open while in use, even if an
	// execve makes another goroutine close it.
	if int64(addr) < 0 {
		return 0, unix.EIO
	}
	var n int
	var err error
	if write {
		n, err = f.WriteAt(b, int64(addr))
	} else {
		n, err = f.ReadAt(b, int64(addr))
	}
	if err == io.EOF {
		err = unix.EIO // the address space is gone
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return n, err
}

// refreshMemTid asks the Tracer to notice exited threads, after a memory
// call found that the thread it named is gone, and reports whether another
// thread now stands for the address space.
func (t *Tracer) refreshMemTid() bool {
	old := t.memTid.Load()
	t.do("read memory", func() error {
		t.poll()
		return nil
	})
	return !t.gone.Load() && t.memTid.Load() != old
}

// memGoneErr is the error of a memory access the kernel refused with ESRCH:
// the process has no address space any more.
func (t *Tracer) memGoneErr(op string, addr uint64) error {
	if t.gone.Load() {
		return t.goneErr(op, 0)
	}
	return &Error{Op: op, Pid: t.pid, Addr: addr, Err: fmt.Errorf("%w (no address space left): %w", ErrExited, unix.ESRCH)}
}

func iovec(b []byte) unix.Iovec {
	v := unix.Iovec{Base: &b[0]}
	v.SetLen(len(b))
	return v
}
