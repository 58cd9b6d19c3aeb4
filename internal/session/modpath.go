package session

import (
	"strings"

	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/procmaps"
)

// resolveModulePaths names the modules the dynamic loader knows by a
// relative path (dlopen("./lib.so"), relative to the working directory at
// the time) by the absolute path /proc/PID/maps shows for their first
// segment, in the images of s still running (an attach's after the
// detach), so that they symbolize. The agent does so itself when
// preloaded; after an attach it opens no /proc file (a seccomp filter may
// kill for it). Only a path the maps show for the module's own mapping
// (same address and file offset) is taken: the maps are the kernel's, the
// module record the program's.
func resolveModulePaths(s *heap.Session) {
	for _, p := range s.Procs {
		if p == nil || (p.End != nil && !p.End.Detached) || p.Info.PID <= 0 {
			continue
		}
		var maps []procmaps.Mapping
		read := false
		for _, m := range p.Modules {
			if m.Path == "" || strings.HasPrefix(m.Path, "/") || m.Unloaded != 0 || len(m.Segments) == 0 {
				continue
			}
			if !read {
				read = true
				b, err := procmaps.Read(int(p.Info.PID))
				if err != nil {
					break
				}
				maps = procmaps.Parse(b)
			}
			if path, ok := mappedPath(maps, m); ok {
				m.Path = path
			}
		}
	}
}

// mappedPath returns the absolute path of the file mapped at m's first
// segment, at that segment's file offset.
func mappedPath(maps []procmaps.Mapping, m *heap.Module) (string, bool) {
	seg := m.Segments[0]
	addr := m.Bias + seg.Vaddr
	for _, mp := range maps {
		if addr < mp.Lo || addr >= mp.Hi {
			continue
		}
		if mp.Offset+(addr-mp.Lo) != seg.Offset || !strings.HasPrefix(mp.Path, "/") ||
			strings.HasSuffix(mp.Path, " (deleted)") {
			return "", false
		}
		return mp.Path, true
	}
	return "", false
}
