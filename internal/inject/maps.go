package inject

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	lo, hi uint64
	perms  string
	off    uint64
	path   string // "" for anonymous
}

// parseMaps parses the text of /proc/PID/maps; lines it cannot read are
// skipped.
func parseMaps(b []byte) []mapping {
	var ms []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		m := mapping{perms: f[1]}
		var e1, e2, e3 error
		m.lo, e1 = strconv.ParseUint(lo, 16, 64)
		m.hi, e2 = strconv.ParseUint(hi, 16, 64)
		m.off, e3 = strconv.ParseUint(f[2], 16, 64)
		if e1 != nil || e2 != nil || e3 != nil || m.hi <= m.lo {
			continue
		}
		if len(f) > 5 {
			m.path = strings.Join(f[5:], " ")
		}
		ms = append(ms, m)
	}
	return ms
}

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
func findModule(pid int, ms []mapping, match func(base string) bool) (*module, error) {
	var m *module
	for _, mp := range ms {
		if mp.path == "" || !strings.HasPrefix(mp.path, "/") || !match(filepath.Base(mp.path)) {
			continue
		}
		if m == nil {
			m = &module{path: mp.path, lo: mp.lo, hi: mp.hi}
		}
		if mp.path != m.path {
			continue
		}
		m.lo, m.hi = min(m.lo, mp.lo), max(m.hi, mp.hi)
		if strings.Contains(mp.perms, "x") {
			if m.textLo == 0 || mp.lo < m.textLo {
				m.textLo = mp.lo
			}
			m.textHi = max(m.textHi, mp.hi)
		}
		if mp.off == 0 && (m.bias == 0 || mp.lo < m.bias) {
			m.bias = mp.lo
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
	f, err := elf.Open(m.file(pid))
	if err != nil {
		return fmt.Errorf("%s: %w", m.path, err)
	}
	defer f.Close()
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
