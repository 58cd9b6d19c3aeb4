package steptrace

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
)

// Vdso is a process's vDSO: its functions' entries with the system call
// each stands for, and a syscall instruction in its code to make it.
type Vdso struct {
	lo, hi uint64
	calls  map[uint64]uint64 // entry → system call number
	gadget uint64
}

// vdsoCalls are the vDSO's functions (x86-64), by the system call each
// answers as.
var vdsoCalls = map[string]uint64{
	"clock_gettime": unix.SYS_CLOCK_GETTIME,
	"gettimeofday":  unix.SYS_GETTIMEOFDAY,
	"time":          unix.SYS_TIME,
	"getcpu":        unix.SYS_GETCPU,
	"clock_getres":  unix.SYS_CLOCK_GETRES,
}

// FindVdso reads process pid's vDSO (read reads its memory); nil when it
// has none.
func FindVdso(pid int, read func(addr uint64, b []byte) (int, error)) (*Vdso, error) {
	b, err := procmaps.Read(pid)
	if err != nil {
		return nil, err
	}
	var lo, hi uint64
	for _, m := range procmaps.Parse(b) {
		if m.Path == "[vdso]" {
			lo, hi = m.Lo, m.Hi
		}
	}
	if lo == 0 || hi-lo > 1<<20 {
		return nil, nil
	}
	img := make([]byte, hi-lo)
	if n, err := read(lo, img); n != len(img) {
		return nil, fmt.Errorf("steptrace: read the vDSO: %d of %d bytes: %v", n, len(img), err)
	}
	return parseVdso(lo, img)
}

// parseVdso finds the functions and the gadget in the vDSO image img
// mapped at lo.
func parseVdso(lo uint64, img []byte) (*Vdso, error) {
	e, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("steptrace: the vDSO: %w", err)
	}
	syms, err := e.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("steptrace: the vDSO's symbols: %w", err)
	}
	v := &Vdso{lo: lo, hi: lo + uint64(len(img)), calls: map[uint64]uint64{}}
	for _, s := range syms {
		if nr, ok := vdsoCalls[strings.TrimPrefix(s.Name, "__vdso_")]; ok && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value < uint64(len(img)) {
			v.calls[lo+s.Value] = nr
		}
	}
	text := e.Section(".text")
	if text == nil || text.Offset+text.Size > uint64(len(img)) {
		return nil, errors.New("steptrace: the vDSO has no code")
	}
	i := bytes.Index(img[text.Offset:text.Offset+text.Size], []byte{0x0f, 0x05})
	if i < 0 {
		return nil, errors.New("steptrace: no system call in the vDSO")
	}
	v.gadget = lo + text.Offset + uint64(i)
	return v, nil
}

// syscall makes the call of a thread standing on a vDSO function's entry
// as the function's system call (the arguments are in the same
// registers), and returns from it: one step. It updates regs.
func (r *recorder) syscall(regs *unix.PtraceRegs) error {
	v := r.opts.Vdso
	if v == nil || regs.Rip < v.lo || regs.Rip >= v.hi {
		return nil
	}
	nr, ok := v.calls[regs.Rip]
	if !ok {
		return nil
	}
	entry, rax := regs.Rip, regs.Rax
	regs.Rax, regs.Rip = nr, v.gadget
	if err := r.t.SetRegs(*regs); err != nil {
		return err
	}
	r.stops++
	st, err := r.t.Step()
	if err != nil {
		return err
	}
	*regs = st.Regs
	switch regs.Rip {
	case v.gadget + 2:
		// Made (a signal may be pending): return to the caller.
		var w [8]byte
		if n, err := r.opts.Read(regs.Rsp, w[:]); n != 8 {
			return fmt.Errorf("steptrace: read the return address: %v", err)
		}
		regs.Rip, regs.Rsp = binary.LittleEndian.Uint64(w[:]), regs.Rsp+8
	case v.gadget:
		// To be restarted, or a signal came first: back to the call,
		// as if the signal came before it.
		regs.Rip, regs.Rax = entry, rax
	default:
		return fmt.Errorf("steptrace: the vDSO's call went to %#x", regs.Rip)
	}
	return r.t.SetRegs(*regs)
}
