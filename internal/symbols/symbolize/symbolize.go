// Package symbolize turns module-relative addresses of native Linux code into
// source-level frames: function (demangled), file, line and column, with one
// frame per level of inlining, the way `addr2line -i -f -C` prints them.
//
// It reads ELF symbol tables (.symtab, else .dynsym) and DWARF 4/5 debug
// information (line tables, DW_TAG_subprogram and DW_TAG_inlined_subroutine
// trees), including compressed debug sections (SHF_COMPRESSED zlib/zstd and
// .zdebug) and separate debug files found through the build id
// (DEBUGDIR/.build-id/xx/yyyy.debug) or .gnu_debuglink.
//
// Everything read from disk is untrusted: malformed files produce errors or
// warnings, never panics. Each module (path + build id) is opened once; the
// per-compilation-unit indexes are built lazily on first use and kept in a
// bounded cache.
//
// Debug hands a module's DWARF and vtables to the readers of its data
// types (internal/symbols/dwarftypes), which share its loading and its
// cache directory (internal/symbols/symcache). Beside symcache, the
// package imports no other leakpath package.
package symbolize

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"sync"

	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// Frame is one source-level frame at an address. Inlined frames come first
// (innermost), the function that contains the code physically comes last with
// Inlined=false.
type Frame struct {
	// Function is the demangled function name, e.g. "shop::Cart::add(int)";
	// "" if unknown. It comes from DW_AT_linkage_name (demangled like
	// c++filt) or DW_AT_name, following DW_AT_abstract_origin and
	// DW_AT_specification; without DWARF, from the ELF symbol. The
	// outermost (physical) function of a C++ frame whose DWARF has no
	// linkage name (main, functions in anonymous namespaces, lambdas'
	// clones) is named by the nearest ELF symbol, e.g. "main.cold" in a cold
	// part, as addr2line does for the innermost frame.
	Function string
	// File is the source file path as recorded in DWARF (joined with the
	// compilation directory when relative). Without DWARF line information it
	// is the name of the STT_FILE symbol the function symbol belongs to,
	// usually a base name, as addr2line prints it. "" if unknown.
	File string
	// Line is the source line; 0 if unknown.
	Line int
	// Column is the source column; 0 if unknown.
	Column int
	// Inlined reports that this frame was inlined into the next one.
	Inlined bool
}

// DefaultDebugDir is the root of separate debug files used when
// Options.DebugDirs is empty. A caller adding its own directories (the
// --debug-dir flag) should keep it: append([]string{dir}, DefaultDebugDir).
const DefaultDebugDir = "/usr/lib/debug"

// Options configures a Symbolizer. The zero value is usable.
type Options struct {
	// QuietMissing: do not warn about a module that simply has no debug
	// information (no DWARF, no debug file found); corrupt or mismatched
	// debug files are still warned about.
	QuietMissing bool
	// DebugDirs are the roots of separate debug files, searched in order for
	// DIR/.build-id/xx/yyyy.debug and DIR/<binary dir>/<debuglink name>.
	// Nil or empty means {DefaultDebugDir}.
	DebugDirs []string
	// Warn, if non-nil, is called at most once per module that has a problem
	// (missing or corrupt debug information, build-id mismatch, unreadable
	// file). It is called with the Symbolizer's lock held and must not call
	// back into the Symbolizer.
	Warn func(msg string)
	// CacheBytes bounds the approximate memory used by the lazily built
	// per-compilation-unit indexes (line tables and function trees) across
	// all modules; least recently used units are dropped and rebuilt on
	// demand. Zero means 512 MiB. Not counted: the symbol tables and the
	// (decompressed) DWARF sections each loaded module keeps in memory.
	CacheBytes int64
	// DWARFCache, if not empty, is a directory where the inflated DWARF
	// sections of debug files with compressed ones (dwarfcache.go) and the
	// frames looked up (framecache.go) are kept for the next process;
	// created if missing.
	DWARFCache string
}

// ErrBuildIDMismatch is wrapped by the error Lookup returns when the file on
// disk has a different build id than the one the process had loaded and no
// debug file with the wanted build id was found: symbolizing with the wrong
// file would print wrong names, so nothing is returned.
var ErrBuildIDMismatch = errors.New("build id mismatch")

// Symbolizer resolves addresses to frames, caching parsed modules. It is safe
// for concurrent use; lookups are serialized.
type Symbolizer struct {
	opts Options

	mu      sync.Mutex
	modules map[moduleKey]*module
	last    *module // fast path for runs of lookups in the same module
	lastKey moduleKey

	lru      *list.List // of *cuInfo, most recently used at the front
	lruBytes int64

	frameFiles map[moduleKey]*frameFile // with a DWARF cache: see framecache.go
}

type moduleKey struct {
	path    string
	buildID string
}

// New returns a Symbolizer configured by opts.
func New(opts Options) *Symbolizer {
	if len(opts.DebugDirs) == 0 {
		opts.DebugDirs = []string{DefaultDebugDir}
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 512 << 20
	}
	if opts.DWARFCache != "" {
		if err := symcache.PrivateDir(opts.DWARFCache); err != nil {
			if opts.Warn != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
				opts.Warn(fmt.Sprintf("not using the symbol cache: %v", err))
			}
			opts.DWARFCache = ""
		}
	}
	return &Symbolizer{
		opts:       opts,
		modules:    make(map[moduleKey]*module),
		lru:        list.New(),
		frameFiles: make(map[moduleKey]*frameFile),
	}
}

// recoverPanics turns panics inside the parsers (ours or the standard
// library's debug/elf and debug/dwarf, which read untrusted bytes) into
// errors. The fuzz test turns it off so that such bugs are found, not masked.
var recoverPanics = true

// guard converts a panic into *err when recoverPanics is set. Use as
// `defer guard(&err, ctx)`.
func guard(err *error, ctx string) {
	if !recoverPanics {
		return
	}
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: malformed input: internal panic: %v\n%s", ctx, r, debug.Stack())
	}
}

// Lookup symbolizes addr (a module-relative ELF virtual address: runtime
// address minus load bias) in the ELF file at path and returns its frames,
// innermost first. It looks up exactly addr; callers pass return addresses
// minus one.
//
// wantBuildID, if not empty, is the build id the process had loaded. If the file
// on disk has a different one, Lookup uses a debug file with the wanted build
// id from DebugDirs if there is one, else it warns and returns an error
// wrapping ErrBuildIDMismatch with no frames.
//
// An address with no symbol and no debug information yields (nil, nil). Errors
// are per module (unreadable or non-ELF file, build-id mismatch) and cached;
// missing or corrupt debug information is not an error: Lookup falls back to
// symbol-table names and reports the problem once through Options.Warn.
func (s *Symbolizer) Lookup(path string, wantBuildID []byte, addr uint64) ([]Frame, error) {
	return s.lookupPlain(path, wantBuildID, addr, nil)
}

// lookupPlain is Lookup that also reports, through plain if non-nil, which
// frames' DWARF functions have no linkage name (for the tests).
func (s *Symbolizer) lookupPlain(path string, wantBuildID []byte, addr uint64, plain *[]bool) ([]Frame, error) {
	s.mu.Lock()
	defer s.mu.Unlock()

	key := moduleKey{path, string(wantBuildID)}
	cached := plain == nil && s.opts.DWARFCache != ""
	if cached {
		if fr, ok := s.cachedFrames(key, addr); ok {
			return fr, nil
		}
	}
	m := s.last
	if m == nil || s.lastKey != key {
		m = s.modules[key]
		if m == nil {
			m = s.loadModule(path, wantBuildID)
			s.modules[key] = m
		}
		s.last, s.lastKey = m, key
	}
	if m.err != nil {
		return nil, m.err
	}
	fr, err := s.lookup(m, addr, plain)
	if cached && err == nil {
		s.keepFrames(key, addr, fr, m.warning)
	}
	return fr, err
}

// Symbol returns the symbol-table name, not demangled, of the function
// whose code holds addr in the module at path ("_ZN4shop4Cart3addEi"),
// the name valgrind's suppressions match. Of several names of the
// function (libc's strdup, __strdup and __GI___strdup; Open MPI's
// MPI_Init and PMPI_Init) it is the one valgrind prefers: PMPI_F over
// MPI_F, then the shortest, then the first alphabetically. It is ""
// when no symbol of the module covers addr (a symbol without a size
// covers only its address).
func (s *Symbolizer) Symbol(path string, wantBuildID []byte, addr uint64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.module(path, wantBuildID)
	if m.err != nil {
		return "", m.err
	}
	return m.syms.valgrindName(addr), nil
}

// SaveFrames writes the frame cache (with a DWARF cache, see
// Options.DWARFCache) unless a lookup is under way; Close writes it too.
func (s *Symbolizer) SaveFrames() {
	if s.mu.TryLock() {
		s.saveFrames()
		s.mu.Unlock()
	}
}

// Close releases the cached modules. Files are closed as soon as a module has
// been read, so Close only drops memory; the Symbolizer remains usable.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saveFrames()
	s.frameFiles = make(map[moduleKey]*frameFile)
	s.modules = make(map[moduleKey]*module)
	s.last = nil
	s.lastKey = moduleKey{}
	s.lru.Init()
	s.lruBytes = 0
	return nil
}

// warn reports msg for m once.
func (s *Symbolizer) warn(m *module, msg string) {
	if m.warning != "" {
		return
	}
	m.warning = msg
	if s.opts.Warn != nil {
		s.opts.Warn(msg)
	}
}

// lookup resolves addr in the loaded module m.
func (s *Symbolizer) lookup(m *module, addr uint64, plain *[]bool) (frames []Frame, err error) {
	defer func() {
		if !recoverPanics {
			return
		}
		if r := recover(); r != nil {
			frames = nil
			err = fmt.Errorf("symbolize %s at %#x: malformed input: internal panic: %v\n%s", m.path, addr, r, debug.Stack())
		}
	}()

	if m.dw != nil {
		fr, ok := s.lookupDWARF(m, addr, plain)
		if ok {
			return fr, nil
		}
	}
	if plain != nil {
		*plain = append((*plain)[:0], false)
	}
	if sym := m.syms.find(addr); sym != nil {
		return []Frame{{Function: sym.demangled(), File: sym.file}}, nil
	}
	return nil, nil
}

// touch marks cu as most recently used, accounting its cost, and evicts the
// least recently used units beyond the cache bound.
func (s *Symbolizer) touch(cu *cuInfo) {
	if cu.elem != nil {
		s.lru.MoveToFront(cu.elem)
		return
	}
	cu.elem = s.lru.PushFront(cu)
	s.lruBytes += cu.data.cost
	for s.lruBytes > s.opts.CacheBytes && s.lru.Len() > 1 {
		back := s.lru.Back()
		old := back.Value.(*cuInfo)
		s.lru.Remove(back)
		s.lruBytes -= old.data.cost
		old.elem = nil
		old.data = nil
	}
}
