package main

import (
	"flag"

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
