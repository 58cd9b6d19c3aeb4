package usage

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/frame"
)

// The kinds of library units.
const (
	KindExecutable = "executable"
	KindRuntime    = "runtime"
	KindLibrary    = "library"
	KindUnknown    = "unknown"
)

const (
	noStack       = "(no stack)"
	unknownModule = "(unknown)"
)

// attribute returns the units of site (see the package documentation).
func (e *Engine) attribute(im *image, site heap.StackID) []int32 {
	if e.opts.By == BySite {
		// Named at the end (by the tables): nothing to resolve meanwhile.
		return []int32{im.add(&unit{key: fmt.Sprint(site), site: site, name: noStack})}
	}
	var frames []frame.Frame
	if site != 0 {
		frames = e.opts.Stack(im.p, site)
	}
	if len(frames) == 0 {
		return []int32{im.add(&unit{key: noStack, name: noStack, kind: KindUnknown})}
	}
	root := rootOf(frames, im.exe)
	switch e.opts.Attribution {
	case Entry:
		return []int32{e.unitOf(im, &frames[e.entryFrame(frames, root, im.exe)])}
	case Inclusive:
		var us []int32
		for j := 0; j <= root; j++ {
			u := e.unitOf(im, &frames[j])
			dup := false
			for _, v := range us {
				dup = dup || v == u
			}
			if !dup {
				us = append(us, u)
			}
		}
		return us
	}
	return []int32{e.unitOf(im, &frames[0])}
}

// entryFrame returns the index of the frame whose unit is a stack's entry
// unit, given its root.
func (e *Engine) entryFrame(frames []frame.Frame, root int, exe string) int {
	if e.opts.By == ByFunction {
		return max(root-1, 0)
	}
	for j := root; j >= 0; j-- {
		if frames[j].Module != exe {
			return j
		}
	}
	return 0 // all in the executable
}

// rootOf returns the index of a stack's root: the outermost frame that
// is not a startup frame, or the outermost frame when all are. exe is the
// executable's path: its outermost frame is _start, even stripped of its
// name, when a frame of the C runtime follows it.
func rootOf(frames []frame.Frame, exe string) int {
	i := len(frames) - 1
	if i > 0 && frames[i].Module == exe && IsRuntime(frames[i-1].Module) {
		i--
	}
	for ; i >= 0; i-- {
		if !isStartup(&frames[i]) {
			return i
		}
	}
	return len(frames) - 1
}

// isStartup reports whether f is a frame of the C runtime's start of the
// program or of a thread (or any runtime frame: below the root, they are
// all startup frames).
func isStartup(f *frame.Frame) bool {
	return f.Function == "_start" || f.Function == "__libc_csu_init" || IsRuntime(f.Module)
}

// IsRuntime reports whether the module at path is the C runtime: glibc's
// libc, its dynamic loader, or the libpthread of glibc before 2.34.
func IsRuntime(path string) bool {
	if path == "" {
		return false
	}
	base := filepath.Base(path)
	for _, p := range [...]string{"libc.so", "libc-", "ld-linux", "ld.so", "ld64.so", "libpthread.so", "libpthread-"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

// unitOf returns the library or function unit of frame f.
func (e *Engine) unitOf(im *image, f *frame.Frame) int32 {
	if e.opts.By == ByLibrary {
		u := &unit{key: f.Module, name: f.Module, kind: KindLibrary}
		switch {
		case f.Module == "":
			u.name, u.kind = unknownModule, KindUnknown
		case f.Module == im.exe:
			u.kind = KindExecutable
		case IsRuntime(f.Module):
			u.kind = KindRuntime
		}
		return im.add(u)
	}
	name := f.Function
	if name == "" {
		if f.Module != "" {
			name = fmt.Sprintf("%s+0x%x", filepath.Base(f.Module), f.Offset)
		} else {
			name = fmt.Sprintf("0x%x", f.Address)
		}
	}
	return im.add(&unit{key: name + "\x00" + f.Module, name: name, module: f.Module})
}
