package session

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
)

// exitUnmeasured is the default code of --check when nothing or not all
// was measured (see unmeasured): neither leakpath's other codes nor a
// usual program's.
const exitUnmeasured = 24

// replacedAllocator are the functions a program that replaces the C
// library's allocator defines (glibc's manual, "Replacing malloc").
var replacedAllocator = []event.Fn{event.Malloc, event.FreeFn, event.Calloc, event.ReallocFn}

// maxSymtabBytes bounds the symbol table read to find them.
const maxSymtabBytes = 256 << 20

// ownAllocator returns which of replacedAllocator the executable at path
// defines itself, exported or not: its calls to them bind to its own
// (and, exported, so do the C library's), so the agent's interposed ones
// never see them. want is the build id the process loaded: a file with
// another one is not what ran, and is not judged.
func ownAllocator(path string, want []byte) ([]event.Fn, error) {
	f, err := symbolize.OpenRegular(path) // a FIFO named there must not hang us
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(want) > 0 {
		if id := elfBuildID(ef); id != nil && !bytes.Equal(id, want) {
			return nil, nil
		}
	}
	defined := map[string]bool{}
	add := func(syms []elf.Symbol) {
		for _, s := range syms {
			typ := elf.ST_TYPE(s.Info)
			if (typ == elf.STT_FUNC || typ == elf.STT_GNU_IFUNC) && s.Section != elf.SHN_UNDEF {
				// .dynsym names may carry a version (malloc@@V).
				name, _, _ := strings.Cut(s.Name, "@")
				defined[name] = true
			}
		}
	}
	if syms, err := ef.DynamicSymbols(); err == nil {
		add(syms)
	}
	if sec := ef.Section(".symtab"); sec != nil && sec.Size <= maxSymtabBytes {
		if syms, err := ef.Symbols(); err == nil {
			add(syms)
		}
	}
	var own []event.Fn
	for _, fn := range replacedAllocator {
		if defined[fn.String()] {
			own = append(own, fn)
		}
	}
	return own, nil
}

// elfBuildID returns f's GNU build id, or nil.
func elfBuildID(f *elf.File) []byte {
	sec := f.Section(".note.gnu.build-id")
	if sec == nil || sec.Size > 1024 {
		return nil
	}
	b, err := sec.Data()
	if err != nil || len(b) < 16 {
		return nil
	}
	namesz, descsz := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:])
	off := 12 + (uint64(namesz)+3)&^3
	if f.ByteOrder.Uint32(b[8:]) != 3 || off+uint64(descsz) > uint64(len(b)) {
		return nil
	}
	return b[off : off+uint64(descsz)]
}

// unmeasured returns a warning for each executable of the images of s
// that defines its own allocator (see ownAllocator) none of whose calls
// reached the agent: a wrapper that passes them on to the C library's
// (dlsym(RTLD_NEXT, "malloc")) is measured through it.
func unmeasured(s *heap.Session) (warns []string) {
	seen := map[string]bool{}
	owns := map[string][]event.Fn{} // ownAllocator's, by path and build id: read once
	for _, p := range s.Procs {
		if p == nil || len(p.Modules) == 0 {
			continue
		}
		// The dynamic loader lists the executable first.
		m := p.Modules[0]
		if !strings.HasPrefix(m.Path, "/") || seen[m.Path] || allCalled(p) {
			continue
		}
		key := m.Path + "\x00" + string(m.BuildID)
		own, ok := owns[key]
		if !ok {
			own, _ = ownAllocator(m.Path, m.BuildID) // (none on an error)
			owns[key] = own
		}
		if len(own) == 0 {
			continue
		}
		var calls uint64
		names := make([]string, len(own))
		for i, fn := range own {
			calls += p.Totals.Calls[fn]
			names[i] = fn.String()
		}
		if calls > 0 {
			continue
		}
		seen[m.Path] = true
		warns = append(warns, fmt.Sprintf("%s defines its own %s, and no call to them reached leakpath's agent: allocations through the program's own malloc are not traced",
			m.Path, strings.Join(names, ", ")))
	}
	return warns
}

// allCalled reports whether every function of replacedAllocator reached
// the agent in p: whichever the executable defines, some call reached it,
// and its symbol table need not be read.
func allCalled(p *heap.Process) bool {
	for _, fn := range replacedAllocator {
		if p.Totals.Calls[fn] == 0 {
			return false
		}
	}
	return true
}
