package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/leakpath/leakpath/internal/session"
)

type snapshotOptions struct {
	s       session.Options // -o is its JSON
	timeout time.Duration
}

func snapshotFlags(o *snapshotOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.s.JSON, "o", "", "write the snapshot (leakpath.report/v1 JSON) to `FILE` (default: leakpath.snapshot.PID.N.json, N the first number free)")
	fs.BoolVar(&o.s.Leaks.ShowReachable, "show-reachable", false, "list still reachable blocks in the text too (the file always has them)")
	fs.BoolVar(&o.s.Quiet, "quiet", false, "print no report, only where the snapshot went")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after `DURATION`")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath snapshot [flags] PID\n\n"+
			"Takes a snapshot of PID, a program running under 'leakpath run': its live\n"+
			"blocks by allocation site, each classified by a scan of its memory (definite,\n"+
			"indirect, possible, reachable). The program is stopped only for the scan and\n"+
			"goes on. The report goes to stdout, the snapshot to a file that\n"+
			"'leakpath diff' compares with another snapshot, report or trace.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdSnapshot(args []string, stdout, stderr io.Writer) int {
	var o snapshotOptions
	fs := snapshotFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pid, ok := pidArg(fs, "snapshot", stderr)
	if !ok {
		return exitUsage
	}
	ctx, done := askContext(o.timeout)
	defer done()
	if err := session.Snapshot(ctx, pid, &o.s, stdout, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

// pidArg returns the one argument of command cmd, a process id, or says
// what is wrong with it.
func pidArg(fs *flag.FlagSet, cmd string, stderr io.Writer) (int, bool) {
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "leakpath %s: want one PID (usage: leakpath %s [flags] PID)\n", cmd, cmd)
		return 0, false
	}
	pid, err := strconv.Atoi(fs.Arg(0))
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "leakpath %s: %q is not a process id\n", cmd, fs.Arg(0))
		return 0, false
	}
	return pid, true
}

// askContext bounds a request to a running collector by timeout and by
// an interrupt.
func askContext(timeout time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	return ctx, func() { stop(); cancel() }
}
