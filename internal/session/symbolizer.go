package session

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
)

// Symbolizer adapts internal/symbols/symbolize to the report's
// Symbolizer, for the recordings here and the commands that read traces.
type Symbolizer struct {
	s    *symbolize.Symbolizer
	warm chan event.Module
	done chan struct{}
	// stopped is closed by ready: the warm-up starts or loads no further
	// module.
	stopped chan struct{}
	warn    func(string)
	// noted: the symbolizer's warnings not yet passed to warn; they are
	// passed on the goroutine that looks up (the warm-up's wait there).
	mu    sync.Mutex
	noted []string
	// types, when not nil, reads the modules' types (run --types): the
	// warm-up reads them too, so that the scan at exit does not wait for
	// them.
	types *dwarftypes.Reader
}

// NewSymbolizer looks for separate debug files under dirs too; warn
// takes its warnings (about broken debug files).
func NewSymbolizer(dirs []string, warn func(string)) *Symbolizer {
	y := &Symbolizer{warn: warn}
	// The report names the modules without debug information itself, in
	// one line; the symbolizer warns only about broken debug files.
	opts := symbolize.Options{Warn: y.note, QuietMissing: true, DWARFCache: dwarfCacheDir()}
	if len(dirs) > 0 {
		opts.DebugDirs = append(append([]string(nil), dirs...), symbolize.DefaultDebugDir)
	}
	y.s = symbolize.New(opts)
	return y
}

// dwarfCacheDir is where the symbolizer keeps the inflated DWARF of debug
// files with compressed sections and the frames it looked up
// (symbolize.Options.DWARFCache): $LEAKPATH_CACHE_DIR, or leakpath/ in the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache); none when
// LEAKPATH_CACHE_DIR is "off" or there is no such directory.
func dwarfCacheDir() string {
	switch dir := os.Getenv("LEAKPATH_CACHE_DIR"); dir {
	case "off":
		return ""
	case "":
	default:
		return dir
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "leakpath")
}

// note keeps a warning of the symbolizer, whichever goroutine loads.
func (y *Symbolizer) note(msg string) {
	y.mu.Lock()
	y.noted = append(y.noted, msg)
	y.mu.Unlock()
}

// flush passes the warnings noted so far to warn.
func (y *Symbolizer) flush() {
	y.mu.Lock()
	noted := y.noted
	y.noted = nil
	y.mu.Unlock()
	for _, msg := range noted {
		y.warn(msg)
	}
}

// Lookup is a report.Symbolizer.
func (y *Symbolizer) Lookup(m *heap.Module, addr uint64) []report.SourceFrame {
	if m.Path == "" || m.Path[0] != '/' {
		return nil // the vdso, or a module with no file
	}
	fs, err := y.s.Lookup(m.Path, m.BuildID, addr)
	y.flush()
	if err != nil {
		return nil
	}
	out := make([]report.SourceFrame, len(fs))
	for i, f := range fs {
		out[i] = report.SourceFrame{Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined,
			Allocator: symbolize.IsAllocatorFrame(f, m.Path)}
	}
	return out
}

// SymbolName returns the mangled name of the function at addr of m, for
// valgrind suppressions.
func (y *Symbolizer) SymbolName(m *heap.Module, addr uint64) string {
	if m.Path == "" || m.Path[0] != '/' {
		return ""
	}
	name, _ := y.s.Symbol(m.Path, m.BuildID, addr)
	y.flush()
	return name
}

// warmDelay is how long a program runs before the warm-up starts: a
// short run is symbolized at its end, and only if the report needs it
// (libc's separate debug file alone costs ~0.1-0.2 s of CPU, which a
// program with no leak never needs).
const warmDelay = time.Second

// warmUp starts loading the symbols of modules while a program runs for
// long (warmDelay): by its end, the report only looks addresses up. The
// loading thread runs at the lowest priority (nice 19), so it takes what
// the program and the collector leave of the machine. It never blocks the
// caller.
func (y *Symbolizer) warmUp() func(*event.Module) {
	y.warm = make(chan event.Module, 1024)
	y.done = make(chan struct{})
	stopped := make(chan struct{})
	y.stopped = stopped
	go func() {
		defer close(y.done)
		select {
		case <-time.After(warmDelay):
		case <-stopped:
			return
		}
		// The thread ends with the goroutine (it stays locked), so the
		// lower priority stays with it.
		runtime.LockOSThread()
		_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19)
		for m := range y.warm {
			select {
			case <-stopped:
				continue // drain what was queued
			default:
			}
			if len(m.Segments) > 0 && m.Path != "" && m.Path[0] == '/' {
				y.s.Lookup(m.Path, m.BuildID, m.Segments[0].Vaddr)
				if y.types != nil {
					y.types.Types(m.Path, m.BuildID)
				}
			}
		}
	}()
	return func(m *event.Module) {
		select {
		case y.warm <- *m:
		default: // a backlog: the report loads it when it needs it
		}
	}
}

// Ready ends the warm-up: the modules it has not loaded yet are loaded
// when a lookup needs them, not waited for (a module being loaded is:
// lookups wait for it). So a report that needs few symbols does not wait
// for those of every library (libc's separate debug file alone takes
// ~0.2 s of CPU).
func (y *Symbolizer) Ready() {
	if y.warm != nil {
		close(y.stopped)
		close(y.warm)
		y.warm = nil
	}
	y.flush()
}

// Close ends the warm-up and drops the symbols, unless a module is still
// being loaded for the warm-up: then leakpath is about to exit, and
// waiting for it would only delay that.
func (y *Symbolizer) Close() {
	y.Ready()
	y.s.SaveFrames()
	if y.done != nil {
		select {
		case <-y.done:
		default:
			return
		}
	}
	y.s.Close()
}
