// Package procmaps parses /proc/PID/maps: the memory mappings of a
// process, as the scan and the attach read them.
package procmaps

import (
	"bufio"
	"bytes"
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
