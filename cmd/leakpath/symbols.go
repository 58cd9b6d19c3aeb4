package main

import (
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/report"
	"github.com/leakpath/leakpath/internal/symbolize"
)

// symbolizer adapts internal/symbolize to the report's Symbolizer.
type symbolizer struct {
	s *symbolize.Symbolizer
}

func newSymbolizer(dirs []string, warn func(string)) *symbolizer {
	opts := symbolize.Options{Warn: warn}
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

func (y *symbolizer) close() { y.s.Close() }
