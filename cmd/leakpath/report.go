package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/leakpath/leakpath/internal/session"
)

func reportFlags(o *session.ReplayOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.Format, "format", "text", "output `format`: text, json, pprof (gzipped profile.proto for go tool pprof),\n"+
		"collapsed (folded stacks for flamegraph.pl and speedscope), flamegraph (one self-contained\n"+
		"interactive HTML page) or sarif (SARIF 2.1.0)")
	fs.StringVar(&o.Value, "value", "", "what --format collapsed or flamegraph counts per stack: `VALUE` leaked-bytes (default),\n"+
		"allocated-bytes, leaked-blocks or allocated-blocks")
	fs.StringVar(&o.Output, "output", "", "write to `FILE` instead of stdout")
	fs.Var((*commaList)(&o.DebugDirs), "debug-dir", "look for separate debug files under `DIR` too (repeatable)")
	addLeakFlags(fs, &o.Leaks)
	addGenSuppFlags(fs, &o.GenSupp)
	addStaleFlags(fs, &o.Stale, false)
	addUsageFlags(fs, &o.Usage, false)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath report [flags] TRACE.lpt...\n\n"+
			"Reads a trace kept with 'leakpath run -o TRACE.lpt' and prints the same report\n"+
			"as the run did. A trace cut short (the program or leakpath was killed) is\n"+
			"reported up to its last complete record, with a warning. Several traces (one\n"+
			"per rank of an MPI job: out.*.lpt) give a report of each, ordered by rank, then\n"+
			"a summary: totals summed, leak groups with equal stacks merged.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdReport(args []string, stdout, stderr io.Writer) int {
	var o session.ReplayOptions
	fs := reportFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "leakpath report: no trace file given (usage: leakpath report [flags] TRACE.lpt...)")
		return exitUsage
	}
	if err := o.CheckReport(fs.NArg()); err != nil {
		fail(stderr, err)
		return exitUsage
	}
	o.Tool = "leakpath " + version
	skipped := false
	err := session.Report(fs.Args(), &o, stdout, stderr, func(err error) {
		fail(stderr, err)
		skipped = true
	})
	if err != nil {
		fail(stderr, err)
		return 1
	}
	if skipped {
		return 1
	}
	return 0
}
