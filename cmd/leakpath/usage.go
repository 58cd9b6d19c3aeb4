package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/session"
)

// addUsageFlags defines the usage flags on fs; run adds --usage-json.
func addUsageFlags(fs *flag.FlagSet, o *session.UsageOptions, run bool) {
	what := "instead of the leak report, print"
	if run {
		what = "after the leak report, print"
	}
	fs.StringVar(&o.By, "by", "", what+" heap use by `UNIT`: library, function, thread, site or scope (the program's LEAKPATH_SCOPE blocks); or, of a typed scan (run --types), type, module, file or namespace")
	fs.StringVar(&o.Attribution, "attribution", "", "with --by library or function, which units of a stack a block counts for, `MODE`: entry (the first called from main or a thread's start routine), caller (the one that called the allocator; the default) or inclusive (each on the stack)")
	fold := ""
	if run {
		fold = " (and sets --fold=false unless given)"
	}
	fs.BoolVar(&o.PerCall, "per-call", false, "with --by library or function: a row per invocation of an entry unit, to see what one call costs (entry attribution)"+fold)
	fs.DurationVar(&o.Interval, "interval", 0, "with --by, also per time slice of `DURATION` (100ms, 1s...)")
	if run {
		fs.StringVar(&o.JSON, "usage-json", "", "with --by, also write heap use as JSON (leakpath.usage/v1) to `FILE` (%p, %r as for -o)")
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
	sym := session.NewSymbolizer(o.debugDirs, func(msg string) { warnings = append(warnings, msg) })
	defer sym.Close()
	u, err := session.StartUsage(&o.usage, sym)
	if err != nil {
		return err
	}
	t, err := loadTraceWith(path, u.Observer())
	if err != nil {
		return err
	}
	if o.usage.PerCall && t.timeShift > 0 {
		warnings = append(warnings, fmt.Sprintf("the trace keeps times to 2^%d clock ticks (leakpath run --time-resolution): calls closer together than that may share a row (record with --per-call or --time-resolution=0 for exact times)", t.timeShift))
	}
	rep := report.New(t.model, t.main, report.Options{Symbolize: sym.Lookup, TicksPerSec: t.tps, TracePath: path})
	r := u.Report(rep, append(t.warnings, warnings...))
	return session.WriteOutput(o.output, stdout, func(w io.Writer) error { return r.Generate(w, o.format) })
}
