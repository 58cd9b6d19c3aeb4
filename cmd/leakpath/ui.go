package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/leakpath/leakpath/internal/session"
)

func uiFlags(o *session.ReplayOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:0", "serve on `ADDR` (host:port; the default is a free port of 127.0.0.1)")
	fs.Var((*commaList)(&o.DebugDirs), "debug-dir", "look for separate debug files under `DIR` too (repeatable)")
	addLeakFlags(fs, &o.Leaks)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath ui [flags] TRACE.lpt\n\n"+
			"Serves a web page to explore a trace kept with 'leakpath run -o TRACE.lpt':\n"+
			"memory over time, flame graphs of a chosen time range, the leaks with their\n"+
			"stacks, source lines and root causes, heap use by library, function, thread\n"+
			"and scope. It prints the page's address, which carries the token every\n"+
			"request needs, and serves until interrupted (Ctrl-C).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdUI(args []string, stdout, stderr io.Writer) int {
	var o session.ReplayOptions
	fs := uiFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "leakpath ui: want one trace file (usage: leakpath ui [flags] TRACE.lpt)")
		return exitUsage
	}
	if err := session.ServeUI(fs.Arg(0), &o, stdout, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}
