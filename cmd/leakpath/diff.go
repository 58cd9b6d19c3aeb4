package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/leakpath/leakpath/internal/session"
)

func diffFlags(o *session.ReplayOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.Format, "format", "text", "output `format`: text or json (leakpath.diff/v1)")
	fs.StringVar(&o.Output, "output", "", "write to `FILE` instead of stdout")
	fs.StringVar(&o.Kinds, "kinds", "", "count only blocks of these leak `KINDS` (comma-separated: definite, indirect, possible, reachable, unclassified; default: every live block)")
	fs.IntVar(&o.MaxSites, "max-sites", 25, "show at most `N` sites that grew in text (JSON has all)")
	fs.Var((*commaList)(&o.DebugDirs), "debug-dir", "look for separate debug files under `DIR` too, for traces (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath diff [flags] A B\n\n"+
			"Shows what grew from A to B: the live blocks by allocation site, the sites\n"+
			"that grew most first. A and B are snapshots (leakpath snapshot), JSON\n"+
			"reports (leakpath run --json) or traces (leakpath run -o), in any mix; sites\n"+
			"compare by their symbolized stacks, so A and B may come from different runs.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdDiff(args []string, stdout, stderr io.Writer) int {
	var o session.ReplayOptions
	fs := diffFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "leakpath diff: want two files (usage: leakpath diff [flags] A B)")
		return exitUsage
	}
	if err := o.CheckDiff(); err != nil {
		fail(stderr, err)
		return exitUsage
	}
	if err := session.Diff(fs.Arg(0), fs.Arg(1), &o, stdout, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}
