package symbolize

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/hex"
	"io"
	"path/filepath"
)

// Vtable is a C++ virtual table of a module (a _ZTV symbol): its ELF
// virtual addresses [Lo, Hi) and the class it belongs to, demangled.
type Vtable struct {
	Lo, Hi uint64
	Class  string
}

// Debug is what a module's symbol table and DWARF hold beyond frames, for
// the readers of its data types (internal/symbols/dwarftypes).
type Debug struct {
	// DWARF is the module's debug information (its own or its debug
	// file's), nil without usable DWARF. Lookups share it: read it only.
	DWARF *dwarf.Data
	// DebugAddr is its .debug_addr section (DWARF 5's table of the
	// addresses DW_OP_addrx and DW_FORM_addrx index), nil if none.
	DebugAddr []byte
	// Vtables are the C++ virtual tables of its symbol table, sorted by
	// Lo.
	Vtables []Vtable
}

// Debug returns the debug information of the module at path, loaded with
// wantBuildID as Lookup loads it (once for both, with the same debug file
// search and checks); its error is Lookup's for the module.
func (s *Symbolizer) Debug(path string, wantBuildID []byte) (Debug, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.module(path, wantBuildID)
	if m.err != nil {
		return Debug{}, m.err
	}
	d := Debug{Vtables: m.syms.vtables}
	if m.dw != nil {
		d.DWARF, d.DebugAddr = m.dw.d, m.dw.addr
	}
	return d, nil
}

// Warn reports msg, a problem with the debug information of the module at
// path (loaded with wantBuildID), through Options.Warn unless the module
// has warned already: once per module, like Lookup's own problems.
func (s *Symbolizer) Warn(path string, wantBuildID []byte, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warn(s.module(path, wantBuildID), msg)
}

// CacheFile returns the file of the symbol cache (Options.DWARFCache) that
// keeps what is derived from the module at path (loaded with wantBuildID),
// named with extension ext (one of symcache.Exts), and the key the file
// must hold to be used: the frame cache's, everything the module's debug
// information depends on. Both are "" without a cache or a build id.
func (s *Symbolizer) CacheFile(path string, wantBuildID []byte, ext string) (file, key string) {
	if s.opts.DWARFCache == "" {
		return "", ""
	}
	id, key := s.frameKey(path, wantBuildID)
	if key == "" {
		return "", ""
	}
	return filepath.Join(s.opts.DWARFCache, hex.EncodeToString(id)+ext), key
}

// module returns the module at path loaded with want, loading it on first
// use. The caller holds s.mu.
func (s *Symbolizer) module(path string, want []byte) *module {
	key := moduleKey{path, string(want)}
	m := s.modules[key]
	if m == nil {
		m = s.loadModule(path, want)
		s.modules[key] = m
	}
	return m
}

// debugAddr returns f's .debug_addr section, or nil.
func debugAddr(f *elf.File) []byte {
	sec := f.Section(".debug_addr")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil
	}
	r := sec.Open()
	b, err := io.ReadAll(io.LimitReader(r, maxDebugAddr))
	if err != nil {
		return nil
	}
	return b
}

// maxDebugAddr bounds the .debug_addr read.
const maxDebugAddr = 256 << 20
