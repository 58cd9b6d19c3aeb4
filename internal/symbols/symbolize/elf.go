package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// module is one ELF file (plus its debug file) as loaded for a build id.
type module struct {
	path    string
	err     error      // permanent: every lookup returns it
	syms    *symtab    // never nil once loaded
	dw      *dwarfInfo // nil without usable DWARF
	warning string     // what it warned about, once ("": nothing)
}

// ntGNUBuildID is the note type of a GNU build id (NT_GNU_BUILD_ID).
const ntGNUBuildID = 3

// maxNoteBytes bounds the size of a note section read to find the build id.
const maxNoteBytes = 1 << 20

// loadModule opens path and its debug information. Problems that leave the
// module usable are reported through Warn; fatal ones are stored in m.err.
func (s *Symbolizer) loadModule(path string, want []byte) *module {
	m := &module{path: path}
	var problems []string
	err := func() (err error) {
		defer guard(&err, "symbolize: load "+path)
		return s.load(m, want, &problems)
	}()
	if err != nil {
		m.err = err
		m.dw = nil
		problems = append(problems[:0], err.Error())
	}
	if m.syms == nil {
		m.syms = &symtab{}
	}
	if len(problems) > 0 {
		s.warn(m, fmt.Sprintf("symbolize: %s: %s", path, strings.Join(problems, "; ")))
	}
	return m
}

// load fills m; *problems collects non-fatal problems for the warning.
func (s *Symbolizer) load(m *module, want []byte, problems *[]string) error {
	f, err := openELF(m.path)
	if err != nil {
		return err
	}
	defer f.Close()

	id := buildID(f.File)
	if len(want) > 0 && !bytes.Equal(id, want) {
		// The file on disk is not what the process loaded. Only a debug
		// file with the wanted build id gives right names.
		df, tried := s.openBuildIDFile(want)
		if df == nil {
			return fmt.Errorf("symbolize: %s has build id %x but the process loaded %x, and no debug file for it was found (tried %s): %w",
				m.path, id, want, strings.Join(tried, ", "), ErrBuildIDMismatch)
		}
		defer df.Close()
		m.syms = readSymtab(df.File)
		dw, err := newDWARFInfo(df, s.opts.DWARFCache)
		if err != nil {
			*problems = append(*problems, fmt.Sprintf("debug file %s: %v", df.path, err))
		}
		m.dw = dw
		return nil
	}

	m.syms = readSymtab(f.File)
	if hasDWARF(f.File) {
		dw, err := newDWARFInfo(f, s.opts.DWARFCache)
		if err == nil {
			m.dw = dw
			return nil
		}
		*problems = append(*problems, fmt.Sprintf("corrupt debug info: %v", err))
		m.dw = dw // may hold the units read before the error
		if dw != nil {
			return nil
		}
	}

	// Separate debug file: by build id, then by .gnu_debuglink.
	var tried, bad []string
	try := func(df *elfFile) bool {
		if !hasDWARF(df.File) {
			bad = append(bad, df.path+": no DWARF")
			return false
		}
		// The debug file's symbol table is read meanwhile (libc's: ~20 ms
		// of the ~70 its debug file takes with a warm DWARF cache).
		type read struct {
			st  *symtab
			err error // a panic of the reader, as guard gives it
		}
		var symtabs chan read
		if !m.syms.full {
			symtabs = make(chan read, 1)
			go func() {
				var r read
				defer func() { symtabs <- r }()
				defer guard(&r.err, "symbols")
				r.st = readSymtab(df.File)
			}()
		}
		dw, err := newDWARFInfo(df, s.opts.DWARFCache)
		var st *symtab
		if symtabs != nil {
			r := <-symtabs
			if st = r.st; r.err != nil {
				bad = append(bad, fmt.Sprintf("%s: %v", df.path, r.err))
			}
		}
		if dw == nil {
			bad = append(bad, fmt.Sprintf("%s: %v", df.path, err))
			return false
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", df.path, err))
		}
		m.dw = dw
		if st != nil && st.full && len(st.syms) > 0 {
			m.syms = st
		}
		return true
	}
	if len(id) > 0 {
		df, t := s.openBuildIDFile(id)
		tried = append(tried, t...)
		if df != nil {
			ok := try(df)
			df.Close()
			if ok {
				if len(bad) > 0 {
					*problems = append(*problems, strings.Join(bad, "; "))
				}
				return nil
			}
		}
	}
	if name, crc, ok := debugLink(f.File); ok {
		for _, cand := range s.debugLinkCandidates(m.path, name) {
			tried = append(tried, cand)
			df, err := openDebugLink(cand, crc, id, f.osFile)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					bad = append(bad, err.Error())
				}
				continue
			}
			ok := try(df)
			df.Close()
			if ok {
				if len(bad) > 0 {
					*problems = append(*problems, strings.Join(bad, "; "))
				}
				return nil
			}
		}
	}
	*problems = append(*problems, bad...)
	if s.opts.QuietMissing && len(bad) == 0 {
		return nil // simply none: the caller says so its own way
	}
	msg := "no debug info"
	if len(tried) > 0 {
		msg += " (tried " + strings.Join(tried, ", ") + ")"
	}
	if len(m.syms.syms) > 0 {
		msg += "; using symbol-table names only"
	} else {
		msg += " and no symbols"
	}
	*problems = append(*problems, msg)
	return nil
}

// elfFile is an open ELF file with its path.
type elfFile struct {
	*elf.File
	osFile *os.File
	path   string
}

// Close closes the underlying file.
func (f *elfFile) Close() error {
	return f.osFile.Close()
}

// openRegular opens path for reading if it is a regular file. The path
// comes from the target (a module's name, its debug link, its build id) or
// lies in a directory its author chose: it is opened without blocking, so
// that a FIFO there cannot hang the caller, and a device (/dev/zero, a
// tty) or a directory is refused before anything is read from it.
func openRegular(path string, flags int) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY|flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// OpenRegular opens path for reading under openRegular's rules: without
// blocking on a FIFO, and only if it is a regular file.
func OpenRegular(path string) (*os.File, error) { return openRegular(path, 0) }

// OpenCacheFile is OpenRegular for a file of the symbol cache: a symbolic
// link in its place is refused, not followed.
func OpenCacheFile(path string) (*os.File, error) { return openRegular(path, unix.O_NOFOLLOW) }

// openELF opens path as an ELF file.
func openELF(path string) (*elfFile, error) {
	osf, err := openRegular(path, 0)
	if err != nil {
		return nil, fmt.Errorf("symbolize: %w", err)
	}
	f, err := elf.NewFile(osf)
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("symbolize: %s: %w", path, err)
	}
	return &elfFile{File: f, osFile: osf, path: path}, nil
}

// hasDWARF reports whether f carries DWARF debug information in its own
// bytes (not just NOBITS placeholders).
func hasDWARF(f *elf.File) bool {
	for _, sec := range f.Sections {
		if (sec.Name == ".debug_info" || sec.Name == ".zdebug_info") && sec.Type != elf.SHT_NOBITS && sec.Size > 0 {
			return true
		}
	}
	return false
}

// buildID returns the NT_GNU_BUILD_ID of f, or nil.
func buildID(f *elf.File) []byte {
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_NOTE || sec.Size > maxNoteBytes {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			continue
		}
		if id := findBuildIDNote(data, f.ByteOrder); id != nil {
			return id
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteBytes {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := io.ReadFull(p.Open(), data); err != nil {
			continue
		}
		if id := findBuildIDNote(data, f.ByteOrder); id != nil {
			return id
		}
	}
	return nil
}

// findBuildIDNote scans ELF notes in data for a GNU build id.
func findBuildIDNote(data []byte, bo binary.ByteOrder) []byte {
	align4 := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		typ := bo.Uint32(data[8:])
		data = data[12:]
		nameEnd := align4(namesz)
		if nameEnd > uint64(len(data)) {
			return nil
		}
		name := data[:namesz]
		data = data[nameEnd:]
		descEnd := align4(descsz)
		if descsz > uint64(len(data)) {
			return nil
		}
		desc := data[:descsz]
		if descEnd > uint64(len(data)) {
			descEnd = uint64(len(data))
		}
		data = data[descEnd:]
		if typ == ntGNUBuildID && string(name) == "GNU\x00" && descsz > 0 {
			return bytes.Clone(desc)
		}
	}
	return nil
}

// debugLink returns the file name and CRC32 in f's .gnu_debuglink section.
func debugLink(f *elf.File) (name string, crc uint32, ok bool) {
	sec := f.Section(".gnu_debuglink")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > 4096 {
		return "", 0, false
	}
	data, err := sec.Data()
	if err != nil {
		return "", 0, false
	}
	n := bytes.IndexByte(data, 0)
	if n <= 0 {
		return "", 0, false
	}
	off := (n + 1 + 3) &^ 3
	if off+4 > len(data) {
		return "", 0, false
	}
	name = string(data[:n])
	if strings.Contains(name, "/") {
		// Only a base name is valid; anything else could escape the
		// search directories.
		return "", 0, false
	}
	return name, f.ByteOrder.Uint32(data[off:]), true
}

// buildIDPath returns DIR/.build-id/xx/yyyy.debug for id.
func buildIDPath(dir string, id []byte) string {
	h := hex.EncodeToString(id)
	return filepath.Join(dir, ".build-id", h[:2], h[2:]+".debug")
}

// openBuildIDFile finds and opens the debug file for build id id under the
// debug directories, checking that its own build id matches. It returns the
// paths it tried.
func (s *Symbolizer) openBuildIDFile(id []byte) (*elfFile, []string) {
	if len(id) < 2 {
		return nil, nil
	}
	var tried []string
	for _, dir := range s.opts.DebugDirs {
		p := buildIDPath(dir, id)
		tried = append(tried, p)
		df, err := openELF(p)
		if err != nil {
			continue
		}
		if !bytes.Equal(buildID(df.File), id) {
			df.Close()
			continue
		}
		return df, tried
	}
	return nil, tried
}

// debugLinkCandidates lists where a .gnu_debuglink name is searched, like
// gdb: the binary's directory, its .debug subdirectory, then each debug
// directory joined with the binary's absolute directory (both as given and
// with symlinks resolved).
func (s *Symbolizer) debugLinkCandidates(path, name string) []string {
	dirs := []string{filepath.Dir(path)}
	if abs, err := filepath.Abs(path); err == nil {
		dirs = append(dirs, filepath.Dir(abs))
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, d := range dirs {
		add(filepath.Join(d, name))
		add(filepath.Join(d, ".debug", name))
	}
	for _, dd := range s.opts.DebugDirs {
		for _, d := range dirs {
			if filepath.IsAbs(d) {
				add(filepath.Join(dd, d, name))
			}
		}
	}
	return out
}

// openDebugLink opens a .gnu_debuglink candidate, verifying its CRC32 and,
// when both have one, its build id. A candidate that is the binary itself
// is rejected with an os.ErrNotExist error.
func openDebugLink(path string, crc uint32, id []byte, binary *os.File) (*elfFile, error) {
	osf, err := openRegular(path, 0)
	if err != nil {
		return nil, err
	}
	if st1, err1 := osf.Stat(); err1 == nil {
		if st2, err2 := binary.Stat(); err2 == nil && os.SameFile(st1, st2) {
			osf.Close()
			return nil, fmt.Errorf("%s is the binary itself: %w", path, os.ErrNotExist)
		}
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, osf); err != nil {
		osf.Close()
		return nil, fmt.Errorf("debug file %s: %w", path, err)
	}
	if got := h.Sum32(); got != crc {
		osf.Close()
		return nil, fmt.Errorf("debug file %s: CRC32 %08x does not match .gnu_debuglink %08x", path, got, crc)
	}
	f, err := elf.NewFile(osf)
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("debug file %s: %w", path, err)
	}
	if did := buildID(f); id != nil && did != nil && !bytes.Equal(did, id) {
		osf.Close()
		return nil, fmt.Errorf("debug file %s: build id %x, want %x", path, did, id)
	}
	return &elfFile{File: f, osFile: osf, path: path}, nil
}
