// Package procmaps parses /proc/PID/maps: the memory mappings of a
// process, as the scan and the attach read them.
package procmaps

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Lo, Hi uint64 // [Lo, Hi)
	Perms  string // "r-xp"...
	Offset uint64 // in the file
	Inode  uint64
	Path   string // "" for anonymous memory; "[stack]", "[heap]"... as the kernel names them
}

// MaxSize bounds what Read reads: a process may have vm.max_map_count
// mappings (65,530 by default), each line a few hundred bytes at most.
const MaxSize = 256 << 20

// Read returns the text of /proc/PID/maps. It reads with one big buffer:
// the kernel makes each read() of the file anew, and os.ReadFile's first
// reads are of 512 bytes (a scan's read of a small process's maps: 127 us
// that way, 27 us so, on a virtual machine where system calls are dear).
func Read(pid int) ([]byte, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, 64<<10)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF || (err == nil && n == 0) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
		if len(b) >= MaxSize {
			return nil, fmt.Errorf("/proc/%d/maps: more than %d MiB (as many mappings as a process may have is far less)", pid, MaxSize>>20)
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // room for more
		}
	}
}

// Parse parses the text of /proc/PID/maps; lines it cannot read (and
// empty ranges) are skipped.
func Parse(b []byte) []Mapping {
	var ms []Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		m := Mapping{Perms: f[1]}
		var e1, e2, e3 error
		m.Lo, e1 = strconv.ParseUint(lo, 16, 64)
		m.Hi, e2 = strconv.ParseUint(hi, 16, 64)
		m.Offset, e3 = strconv.ParseUint(f[2], 16, 64)
		if e1 != nil || e2 != nil || e3 != nil || m.Hi <= m.Lo {
			continue
		}
		m.Inode, _ = strconv.ParseUint(f[4], 10, 64)
		if len(f) > 5 {
			m.Path = strings.Join(f[5:], " ")
		}
		ms = append(ms, m)
	}
	return ms
}
