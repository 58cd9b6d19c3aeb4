package inject

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/sys/procmaps"
)

// module is a mapped ELF file: its path and load bias.
type module struct {
	path    string
	bias    uint64
	lo, hi  uint64 // lowest and highest mapped address
	textLo  uint64 // its executable mapping(s)
	textHi  uint64
	dynsyms []elf.Symbol
}

// findModule returns the module whose file name (base) satisfies match.
func findModule(pid int, ms []procmaps.Mapping, match func(base string) bool) (*module, error) {
	var m *module
	for _, mp := range ms {
		if mp.Path == "" || !strings.HasPrefix(mp.Path, "/") || !match(filepath.Base(mp.Path)) {
			continue
		}
		if m == nil {
			m = &module{path: mp.Path, lo: mp.Lo, hi: mp.Hi}
		}
		if mp.Path != m.path {
			continue
		}
		m.lo, m.hi = min(m.lo, mp.Lo), max(m.hi, mp.Hi)
		if strings.Contains(mp.Perms, "x") {
			if m.textLo == 0 || mp.Lo < m.textLo {
				m.textLo = mp.Lo
			}
			m.textHi = max(m.textHi, mp.Hi)
		}
		if mp.Offset == 0 && (m.bias == 0 || mp.Lo < m.bias) {
			m.bias = mp.Lo
		}
	}
	if m == nil {
		return nil, nil
	}
	if err := m.load(pid); err != nil {
		return nil, err
	}
	return m, nil
}

// load reads the module's dynamic symbols and turns the address of its
// first mapping into the load bias (the file's first PT_LOAD may not be
// at address 0).
func (m *module) load(pid int) error {
	osf, err := openRegular(m.file(pid))
	if err != nil {
		return fmt.Errorf("%s: %w", m.path, err)
	}
	defer osf.Close()
	f, err := elf.NewFile(osf)
	if err != nil {
		return fmt.Errorf("%s: %w", m.path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			m.bias -= p.Vaddr &^ 0xfff
			break
		}
	}
	m.dynsyms, err = f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("%s: dynamic symbols: %w", m.path, err)
	}
	return nil
}

// openRegular opens path for reading if it is a regular file. The path is
// the process's (its root may be a directory its user made): it is opened
// without blocking, so that a FIFO put there cannot hang the attach.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// file is the module's file as the process sees it (its root may differ).
func (m *module) file(pid int) string {
	p := fmt.Sprintf("/proc/%d/root%s", pid, m.path)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return m.path
}

// symbol returns the run-time address and size of the function name, or
// ok false. (glibc's versions of one function, dlopen@GLIBC_2.2.5 and
// dlopen@@GLIBC_2.34, are one address.)
func (m *module) symbol(name string) (addr, size uint64, ok bool) {
	for _, s := range m.dynsyms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			return m.bias + s.Value, s.Size, true
		}
	}
	return 0, 0, false
}

func isLibc(base string) bool {
	return base == "libc.so.6" || (strings.HasPrefix(base, "libc-2.") && strings.HasSuffix(base, ".so"))
}

func isLoader(base string) bool {
	return strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-2.")
}
