package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leakpath/leakpath/internal/session"
)

// attachFlags defines attach's flags: those it shares with run, and its
// own.
func attachFlags(r *session.Options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(out)
	addRecordFlags(fs, r)
	fs.BoolVar(&r.Scan, "scan", true, "scan the program's memory (ptrace) before the detach, and at its exit if it exits meanwhile, to tell definite, indirect, possible leaks from reachable blocks")
	fs.BoolVar(&r.Types, "types", false, "at the scan before the detach (and at snapshots), also give the live blocks their types, follow who holds whom, and report the type table, retained sizes and --path-to-root")
	addLeakFlags(fs, &r.Leaks)
	fs.DurationVar(&r.For, "for", 0, "detach after `DURATION` (default: on `leakpath detach PID`, SIGINT or SIGTERM)")
	fs.DurationVar(&r.Patience, "patience", 200*time.Millisecond, "while loading the agent, let the other threads run after `DURATION` (one may hold a lock the loading needs)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath attach [flags] PID\n\n"+
			"Loads leakpath's agent into PID, a dynamically linked program that runs already,\n"+
			"and records its allocations from now on, until 'leakpath detach PID', SIGINT or\n"+
			"SIGTERM (or --for): then the live blocks are scanned, the program's allocator calls\n"+
			"are given back, the program runs on, and the report is written. Blocks allocated\n"+
			"before the attach are unknown: every number covers the time since the attach.\n"+
			"'leakpath snapshot PID' works meanwhile.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdAttach(args []string, stdout, stderr io.Writer) int {
	var o session.Options
	fs := attachFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pid, ok := pidArg(fs, "attach", stderr)
	if !ok {
		return exitUsage
	}
	o.Tool = "leakpath " + version
	if err := session.CheckOutputNames(&o); err != nil {
		fmt.Fprintf(stderr, "leakpath attach: %v\n", err)
		return exitUsage
	}
	if _, err := session.Attach(context.Background(), pid, &o, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

var detachRequest = pidRequest{op: "detach", timeout: time.Minute,
	ask: func(ctx context.Context, pid int, _, stderr io.Writer) error { return session.Detach(ctx, pid, stderr) },
	about: "Ends the 'leakpath attach' to PID: the attach scans the live blocks, gives the\n" +
		"program's allocator calls back, lets the program run on and writes its report.\n"}

func cmdDetach(args []string, stdout, stderr io.Writer) int {
	return detachRequest.run(args, stdout, stderr)
}
