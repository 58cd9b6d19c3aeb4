package main

import (
	"flag"
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

// usageOptions are the flags of heap use per unit: `report --by` and
// `run --by` (see internal/analysis/usage, internal/render/usagetable).
type usageOptions struct {
	by          string
	attribution string
	interval    time.Duration
	perCall     bool
	jsonOut     string // run only: the leakpath.usage/v1 JSON
}

// addUsageFlags defines the usage flags on fs; run adds --usage-json.
func addUsageFlags(fs *flag.FlagSet, o *usageOptions, run bool) {
	what := "instead of the leak report, print"
	if run {
		what = "after the leak report, print"
	}
	fs.StringVar(&o.by, "by", "", what+" heap use by `UNIT`: library, function, thread, site or scope (the program's LEAKPATH_SCOPE blocks); or, of a typed scan (run --types), type, module, file or namespace")
	fs.StringVar(&o.attribution, "attribution", "", "with --by library or function, which units of a stack a block counts for, `MODE`: entry (the first called from main or a thread's start routine), caller (the one that called the allocator; the default) or inclusive (each on the stack)")
	fold := ""
	if run {
		fold = " (and sets --fold=false unless given)"
	}
	fs.BoolVar(&o.perCall, "per-call", false, "with --by library or function: a row per invocation of an entry unit, to see what one call costs (entry attribution)"+fold)
	fs.DurationVar(&o.interval, "interval", 0, "with --by, also per time slice of `DURATION` (100ms, 1s...)")
	if run {
		fs.StringVar(&o.jsonOut, "usage-json", "", "with --by, also write heap use as JSON (leakpath.usage/v1) to `FILE` (%p, %r as for -o)")
	}
}

// options checks the flags and turns them into the engine's options
// (without the stack resolver).
func (o *usageOptions) options() (heapuse.Options, error) {
	by, err := heapuse.ParseBy(o.by)
	if err != nil {
		return heapuse.Options{}, fmt.Errorf("--by: %w", err)
	}
	var attr heapuse.Attribution // the engine's default
	if o.attribution != "" {
		if attr, err = heapuse.ParseAttribution(o.attribution); err != nil {
			return heapuse.Options{}, fmt.Errorf("--attribution: %w", err)
		}
	}
	if o.interval < 0 {
		return heapuse.Options{}, fmt.Errorf("--interval %v: want a positive duration", o.interval)
	}
	return heapuse.Options{By: by, Attribution: attr, Interval: o.interval, PerCall: o.perCall}, nil
}

// check rejects usage flags given without --by.
func (o *usageOptions) check() error {
	if o.by == "" && (o.interval != 0 || o.jsonOut != "" || o.perCall) {
		return fmt.Errorf("--interval, --per-call and --usage-json need --by")
	}
	return nil
}

// usageRun is the heap use accounting of one run or report.
type usageRun struct {
	opts    *usageOptions
	by      heapuse.By
	engine  *heapuse.Engine
	stacks  *report.Report // resolves the sites' stacks as the engine meets them
	jsonPat pathPattern
	json    *os.File
}

// startUsage prepares the accounting the flags ask for (nil: none),
// symbolizing stacks with sym as it goes.
func startUsage(o *usageOptions, sym *symbolizer) (*usageRun, error) {
	if err := o.check(); err != nil || o.by == "" {
		return nil, err
	}
	opts, err := o.options()
	if err != nil {
		return nil, err
	}
	u := &usageRun{opts: o, by: opts.By}
	if opts.By == heapuse.ByLibrary {
		ts := &topStacks{lookup: sym.lookup, top: map[topFrame]bool{}}
		u.stacks = report.New(nil, -1, report.Options{Symbolize: ts.symbolize})
		ts.rep = u.stacks
		opts.Stack = ts.stack
	} else {
		u.stacks = report.New(nil, -1, report.Options{Symbolize: sym.lookup})
		opts.Stack = u.stacks.Stack
	}
	if u.engine, err = heapuse.New(opts); err != nil {
		return nil, err
	}
	if o.jsonOut != "" {
		if u.jsonPat, err = parsePattern("--usage-json", o.jsonOut); err != nil {
			return nil, err
		}
		if u.jsonPat.hasPercent {
			// Named by the pid: created at the end, its directory checked now.
			if _, err := os.Stat(filepath.Dir(o.jsonOut)); err != nil {
				return nil, fmt.Errorf("usage JSON file: %w", err)
			}
		} else if u.json, err = createOutput(o.jsonOut); err != nil {
			return nil, fmt.Errorf("usage JSON file: %w", err)
		}
	}
	return u, nil
}

// report builds the tables, rep giving the images and times.
func (u *usageRun) report(rep *report.Report, warnings []string) *usagetable.Report {
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

// finish writes the run's usage: the table to text, the JSON to its file.
func (u *usageRun) finish(rep *report.Report, text io.Writer, pid int, rank *int) error {
	r := u.report(rep, nil)
	if u.json == nil && u.opts.jsonOut != "" {
		f, err := createOutput(u.jsonPat.expand(pid, rank))
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

func (u *usageRun) close() {
	if u != nil && u.json != nil {
		u.json.Close()
	}
}

// reportUsage replays the trace at path into the model with the
// accounting o asks for and prints it (instead of the leak report).
func reportUsage(paths []string, o *reportOptions, stdout io.Writer) error {
	if len(paths) != 1 {
		return fmt.Errorf("--by reports one trace at a time")
	}
	path := paths[0]
	if o.format != "text" && o.format != "json" {
		return fmt.Errorf("--format %q: want text or json", o.format)
	}
	var warnings []string
	sym := newSymbolizer(o.debugDirs, func(msg string) { warnings = append(warnings, msg) })
	defer sym.close()
	u, err := startUsage(&o.usage, sym)
	if err != nil {
		return err
	}
	var obs heap.Observer
	if u.engine.Observes() {
		obs = u.engine
	}
	t, err := loadTraceWith(path, obs)
	if err != nil {
		return err
	}
	if o.usage.perCall && t.timeShift > 0 {
		warnings = append(warnings, fmt.Sprintf("the trace keeps times to 2^%d clock ticks (leakpath run --time-resolution): calls closer together than that may share a row (record with --per-call or --time-resolution=0 for exact times)", t.timeShift))
	}
	rep := report.New(t.model, t.main, report.Options{Symbolize: sym.lookup, TicksPerSec: t.tps, TracePath: path})
	r := u.report(rep, append(t.warnings, warnings...))
	return writeOutput(o.output, stdout, func(w io.Writer) error { return r.Generate(w, o.format) })
}
