package session

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/leakpath/leakpath/internal/render/progress"
	"github.com/leakpath/leakpath/internal/render/report"
)

// ReplayOptions are those of the commands that replay traces: `leakpath
// report`, `ui` and `diff` fill them. As with Options, a field a command
// has no flag for keeps its zero value.
type ReplayOptions struct {
	// Tool names leakpath in the files it generates ("leakpath VERSION").
	Tool string
	// Format of the output (report, diff) and Value, what --format
	// collapsed and flamegraph count ("": leaked-bytes).
	Format, Value string
	// Output is the file written instead of stdout.
	Output    string
	DebugDirs []string

	Leaks   LeakOptions
	GenSupp GenSuppOptions
	Usage   UsageOptions // report --by: heap use instead of the leaks
	Stale   StaleOptions // the thresholds alone

	// Diff's: the leak kinds counted (comma-separated; "": every live
	// block) and how many sites the text shows.
	Kinds    string
	MaxSites int

	// UI's address to serve on (host:port).
	Listen string
}

// CheckReport rejects, before any trace is read, the options `leakpath
// report` cannot take for n traces: a usage error.
func (o *ReplayOptions) CheckReport(n int) error {
	if err := o.Usage.Check(); err != nil {
		return err
	}
	if o.Usage.By != "" {
		return nil // reportUsage checks its own
	}
	if err := o.checkFormat(); err != nil {
		return err
	}
	if n > 1 {
		if o.GenSupp.Path != "" {
			return fmt.Errorf("--gen-suppressions takes one trace (got %d)", n)
		}
		if o.Format != "text" && o.Format != "json" {
			return fmt.Errorf("--format %q: several traces are reported as text or json only", o.Format)
		}
		if err := o.Leaks.Own.Check(); err != nil {
			return err
		}
	}
	return nil
}

// checkFormat checks --format and --value.
func (o *ReplayOptions) checkFormat() error {
	if !slices.Contains(report.Formats, o.Format) {
		return fmt.Errorf("--format %q: want %s", o.Format, strings.Join(report.Formats, ", "))
	}
	if o.Value != "" {
		if o.Format != "collapsed" && o.Format != "flamegraph" {
			return fmt.Errorf("--value %q: only --format collapsed and flamegraph have a value to choose", o.Value)
		}
		if !slices.Contains(report.CollapsedValues, o.Value) {
			return fmt.Errorf("--value %q: want %s", o.Value, strings.Join(report.CollapsedValues, ", "))
		}
	}
	return nil
}

// Report replays the traces at paths and writes their report to o.Output
// (default: stdout): the leak report of one trace; with o.Usage.By, its
// heap use instead; of several (the ranks of an MPI job, say), each
// trace's report, ordered by rank then name, then a summary over all.
// Of several, one that cannot be read is handed to skipped and the others
// reported all the same.
func Report(paths []string, o *ReplayOptions, stdout, stderr io.Writer, skipped func(error)) error {
	switch {
	case o.Usage.By != "":
		return reportUsage(paths, o, stdout)
	case len(paths) > 1:
		return reportTraces(paths, o, stdout, skipped)
	}
	return reportTrace(paths[0], o, stdout, stderr)
}

// reportTrace replays a trace into the model and reports it.
func reportTrace(path string, o *ReplayOptions, stdout, stderr io.Writer) error {
	if err := o.checkFormat(); err != nil {
		return err
	}
	if err := o.Stale.Check(); err != nil {
		return err
	}
	supp, err := o.Leaks.SuppressionSet()
	if err != nil {
		return err
	}
	if err := o.Leaks.Own.Check(); err != nil {
		return err
	}
	checkKinds, err := o.Leaks.Kinds()
	if err != nil {
		return err
	}
	genFormat, err := o.GenSupp.Check(false)
	if err != nil {
		return err
	}
	bar := progress.OnTerminal(stderr, "reading "+filepath.Base(path))
	t, err := loadTrace(path, nil, bar.Set)
	bar.Done()
	if err != nil {
		return err
	}
	var rep *report.Report
	sym := NewSymbolizer(o.DebugDirs, func(msg string) { rep.Warn(msg) })
	defer sym.Close()
	rep = report.New(t.model, t.main, o.Leaks.Own.With(report.Options{
		Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: t.warnings, TracePath: path, Rank: t.meta.Rank,
		Suppressions: supp, ShowReachable: o.Leaks.ShowReachable, CollapsedValue: o.Value, PathToRoot: o.Leaks.PathToRoot,
		StaleT1: uint32(o.Stale.T1), StaleT2: uint32(o.Stale.T2),
	}))
	if err := WriteOutput(o.Output, stdout, func(w io.Writer) error { return rep.Generate(w, o.Format) }); err != nil {
		return err
	}
	if genFormat != "" {
		return o.GenSupp.Write(rep, o.GenSupp.Path, genFormat, checkKinds, t.meta.Command, o.Tool, stderr)
	}
	return nil
}

// reportTraces reports several traces; those that cannot be read go to
// skipped. When none could, nothing is written.
func reportTraces(paths []string, o *ReplayOptions, stdout io.Writer, skipped func(error)) error {
	multi, err := report.NewMulti(o.Format)
	if err != nil {
		return err
	}
	// One symbolizer for all: the ranks of a job share their modules.
	sym := NewSymbolizer(o.DebugDirs, multi.Warn)
	defer sym.Close()
	added := 0
	for _, path := range paths {
		t, err := loadTrace(path, nil, nil)
		if err != nil {
			skipped(err)
			multi.Warn(fmt.Sprintf("%s could not be read: %v", path, err))
			continue
		}
		if t.cut != nil {
			multi.Warn(fmt.Sprintf("%s ends early or is damaged: counted up to there", path))
		}
		rep := report.New(t.model, t.main, o.Leaks.Own.With(report.Options{
			Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: t.warnings, TracePath: path, Rank: t.meta.Rank,
		}))
		if err := multi.Add(rep); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		added++
	}
	if added == 0 {
		return nil
	}
	return WriteOutput(o.Output, stdout, multi.Generate)
}

// reportUsage replays the trace at paths[0] into the model with the
// accounting o.Usage asks for and writes it (instead of the leak report).
func reportUsage(paths []string, o *ReplayOptions, stdout io.Writer) error {
	if len(paths) != 1 {
		return fmt.Errorf("--by reports one trace at a time")
	}
	path := paths[0]
	if o.Format != "text" && o.Format != "json" {
		return fmt.Errorf("--format %q: want text or json", o.Format)
	}
	var warnings []string
	sym := NewSymbolizer(o.DebugDirs, func(msg string) { warnings = append(warnings, msg) })
	defer sym.Close()
	u, err := StartUsage(&o.Usage, sym)
	if err != nil {
		return err
	}
	t, err := loadTrace(path, u.Observer(), nil)
	if err != nil {
		return err
	}
	if o.Usage.PerCall && t.timeShift > 0 {
		warnings = append(warnings, fmt.Sprintf("the trace keeps times to 2^%d clock ticks (leakpath run --time-resolution): calls closer together than that may share a row (record with --per-call or --time-resolution=0 for exact times)", t.timeShift))
	}
	rep := report.New(t.model, t.main, report.Options{Symbolize: sym.Lookup, TicksPerSec: t.tps, TracePath: path})
	r := u.Report(rep, append(t.warnings, warnings...))
	return WriteOutput(o.Output, stdout, func(w io.Writer) error { return r.Generate(w, o.Format) })
}
