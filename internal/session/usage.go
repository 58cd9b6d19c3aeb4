package session

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	heapuse "github.com/leakpath/leakpath/internal/analysis/usage"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/usagetable"
)

// UsageOptions are those of heap use per unit: `report --by` and `run
// --by` (see internal/analysis/usage, internal/render/usagetable).
type UsageOptions struct {
	By          string
	Attribution string
	Interval    time.Duration
	PerCall     bool
	JSON        string // Run's only: the leakpath.usage/v1 JSON
}

// options checks the flags and turns them into the engine's options
// (without the stack resolver).
func (o *UsageOptions) options() (heapuse.Options, error) {
	by, err := heapuse.ParseBy(o.By)
	if err != nil {
		return heapuse.Options{}, fmt.Errorf("--by: %w", err)
	}
	var attr heapuse.Attribution // the engine's default
	if o.Attribution != "" {
		if attr, err = heapuse.ParseAttribution(o.Attribution); err != nil {
			return heapuse.Options{}, fmt.Errorf("--attribution: %w", err)
		}
	}
	if o.Interval < 0 {
		return heapuse.Options{}, fmt.Errorf("--interval %v: want a positive duration", o.Interval)
	}
	return heapuse.Options{By: by, Attribution: attr, Interval: o.Interval, PerCall: o.PerCall}, nil
}

// Check rejects usage options given without --by.
func (o *UsageOptions) Check() error {
	if o.By == "" && (o.Interval != 0 || o.JSON != "" || o.PerCall) {
		return fmt.Errorf("--interval, --per-call and --usage-json need --by")
	}
	return nil
}

// Usage is the heap use accounting of one recording or report.
type Usage struct {
	opts    *UsageOptions
	by      heapuse.By
	engine  *heapuse.Engine
	stacks  *report.Report // resolves the sites' stacks as the engine meets them
	jsonPat pathPattern
	json    *os.File
}

// StartUsage prepares the accounting o asks for (nil: none), symbolizing
// stacks with sym as it goes.
func StartUsage(o *UsageOptions, sym *Symbolizer) (*Usage, error) {
	if err := o.Check(); err != nil || o.By == "" {
		return nil, err
	}
	opts, err := o.options()
	if err != nil {
		return nil, err
	}
	u := &Usage{opts: o, by: opts.By}
	if opts.By == heapuse.ByLibrary {
		ts := &topStacks{lookup: sym.Lookup, top: map[topFrame]bool{}}
		u.stacks = report.New(nil, -1, report.Options{Symbolize: ts.symbolize})
		ts.rep = u.stacks
		opts.Stack = ts.stack
	} else {
		u.stacks = report.New(nil, -1, report.Options{Symbolize: sym.Lookup})
		opts.Stack = u.stacks.Stack
	}
	if u.engine, err = heapuse.New(opts); err != nil {
		return nil, err
	}
	if o.JSON != "" {
		if u.jsonPat, err = parsePattern("--usage-json", o.JSON); err != nil {
			return nil, err
		}
		if u.jsonPat.hasPercent {
			// Named by the pid: created at the end, its directory checked now.
			if _, err := os.Stat(filepath.Dir(o.JSON)); err != nil {
				return nil, fmt.Errorf("usage JSON file: %w", err)
			}
		} else if u.json, err = CreateOutput(o.JSON); err != nil {
			return nil, fmt.Errorf("usage JSON file: %w", err)
		}
	}
	return u, nil
}

// Report builds the tables, rep giving the images and times.
func (u *Usage) Report(rep *report.Report, warnings []string) *usagetable.Report {
	r := usagetable.New(u.engine, rep)
	r.Warnings = append(warnings, r.Warnings...)
	// The note on modules without debug information, from the report
	// that symbolized the units' frames.
	note := ""
	switch u.by {
	case heapuse.ByFunction:
		note = u.stacks.LinesNote()
	case heapuse.BySite, heapuse.ByScope:
		note = rep.LinesNote()
	}
	if note != "" {
		r.Warnings = append(r.Warnings, note)
	}
	return r
}

// topStacks resolves stacks for units by library, which need the
// frames' modules and, to drop the allocator's own frames at the top as
// report.Stack does, the names of those that may be: the top frames in the
// agent, the C runtime or the C++ runtime. Only those are symbolized: this
// spares symbolizing every frame of every stack while the program runs.
// (An operator new a program defines itself is then not seen as the
// allocator's: its module is the caller.)
type topStacks struct {
	rep    *report.Report
	lookup report.Symbolizer
	top    map[topFrame]bool // the frames of the stack being resolved that may need names
}

type topFrame struct {
	m    *heap.Module
	addr uint64
}

func (ts *topStacks) stack(p *heap.Process, id heap.StackID) []report.Frame {
	clear(ts.top)
	frames, mods := p.Stacks.Frames(id), p.Stacks.Modules(id)
	for i, a := range frames {
		if mods[i] < 0 || int(mods[i]) >= len(p.Modules) {
			break
		}
		m := p.Modules[mods[i]]
		base := filepath.Base(m.Path)
		if !heapuse.IsRuntime(m.Path) && !strings.HasPrefix(base, "libstdc++") && !strings.HasPrefix(base, "libleakpath") {
			break
		}
		ts.top[topFrame{m, a - m.Bias - 1}] = true
	}
	return ts.rep.Stack(p, id)
}

func (ts *topStacks) symbolize(m *heap.Module, addr uint64) []report.SourceFrame {
	if ts.top[topFrame{m, addr}] {
		return ts.lookup(m, addr)
	}
	return nil
}

// finish writes the recording's usage: the table to text, the JSON to its file.
func (u *Usage) finish(rep *report.Report, text io.Writer, pid int, rank *int) error {
	r := u.Report(rep, nil)
	if u.json == nil && u.opts.JSON != "" {
		f, err := CreateOutput(u.jsonPat.expand(pid, rank))
		if err != nil {
			return fmt.Errorf("usage JSON file: %w", err)
		}
		u.json = f
	}
	if u.json != nil {
		if err := r.Generate(u.json, "json"); err != nil {
			return fmt.Errorf("usage JSON: %w", err)
		}
	}
	if u.by == heapuse.ByScope {
		return nil // the leak report has the scopes already
	}
	fmt.Fprintln(text)
	return r.Generate(text, "text")
}

// Close closes the JSON file.
func (u *Usage) Close() {
	if u != nil && u.json != nil {
		u.json.Close()
	}
}

// Observer is the engine when it follows the model as events are applied
// (nil: it reads the finished model only).
func (u *Usage) Observer() heap.Observer {
	if u.engine.Observes() {
		return u.engine
	}
	return nil
}
