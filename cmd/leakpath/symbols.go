package main

import (
	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/report"
	"github.com/leakpath/leakpath/internal/symbolize"
)

// symbolizer adapts internal/symbolize to the report's Symbolizer.
type symbolizer struct {
	s    *symbolize.Symbolizer
	warm chan event.Module
	done chan struct{}
	// types: warm up the modules' types too (run --types), so that the
	// scan at exit does not wait for them.
	types bool
}

func newSymbolizer(dirs []string, warn func(string)) *symbolizer {
	// The report names the modules without debug information itself, in
	// one line; the symbolizer warns only about broken debug files.
	opts := symbolize.Options{Warn: warn, QuietMissing: true}
	if len(dirs) > 0 {
		opts.DebugDirs = append(append([]string(nil), dirs...), symbolize.DefaultDebugDir)
	}
	return &symbolizer{s: symbolize.New(opts)}
}

func (y *symbolizer) lookup(m *heap.Module, addr uint64) []report.SourceFrame {
	if m.Path == "" || m.Path[0] != '/' {
		return nil // the vdso, or a module with no file
	}
	fs, err := y.s.Lookup(m.Path, m.BuildID, addr)
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

// warmUp starts loading the symbols of modules while the program runs
// (the collector's core is mostly idle then): by its end, the report only
// looks addresses up. It never blocks the caller.
func (y *symbolizer) warmUp() func(*event.Module) {
	y.warm = make(chan event.Module, 1024)
	y.done = make(chan struct{})
	go func() {
		defer close(y.done)
		for m := range y.warm {
			if len(m.Segments) > 0 && m.Path != "" && m.Path[0] == '/' {
				y.s.Lookup(m.Path, m.BuildID, m.Segments[0].Vaddr)
				if y.types {
					y.s.Types(m.Path, m.BuildID)
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

// ready waits until the warm-up is done.
func (y *symbolizer) ready() {
	if y.warm != nil {
		close(y.warm)
		<-y.done
		y.warm = nil
	}
}

func (y *symbolizer) close() {
	y.ready()
	y.s.Close()
}
