package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/rootcause"
	"github.com/leakpath/leakpath/internal/session"
)

// rootCauseAfter is --root-cause-after: a duration, or "request".
type rootCauseAfter rootcause.Options

func (r *rootCauseAfter) String() string {
	if r == nil {
		return "0s"
	}
	if r.OnRequest {
		return "request"
	}
	return r.After.String()
}

func (r *rootCauseAfter) Set(v string) error {
	if v == "request" {
		r.OnRequest, r.After = true, 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration (30s, 2m) or request, not %q", v)
	}
	r.OnRequest, r.After = false, d
	return nil
}

// pidRequest is a command that sends one control request about a PID to
// the leakpath that records it: root-cause, detach.
type pidRequest struct {
	op      string
	timeout time.Duration // --timeout's default
	about   string        // the usage's text after its first line
	// ask sends the request, bounded by ctx, and prints its answer.
	ask func(ctx context.Context, pid int, stdout, stderr io.Writer) error
}

var rootCauseRequest = pidRequest{op: "root-cause", timeout: 30 * time.Second,
	ask: func(ctx context.Context, pid int, stdout, _ io.Writer) error {
		return session.RootCause(ctx, pid, stdout)
	},
	about: "Starts root-cause tracing of PID, a program running under\n" +
		"'leakpath run --root-cause --root-cause-after=request': from now on its\n" +
		"growing allocation sites are judged and traced, and the report written\n" +
		"when it ends names, under each leak, the function and branch where its\n" +
		"freed and leaked executions part.\n"}

func (c pidRequest) flags(timeout *time.Duration, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(c.op, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(timeout, "timeout", c.timeout, "give up after `DURATION`")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath %s [flags] PID\n\n%s\nFlags:\n", c.op, c.about)
		fs.PrintDefaults()
	}
	return fs
}

// run parses args and sends the request.
func (c pidRequest) run(args []string, stdout, stderr io.Writer) int {
	var timeout time.Duration
	fs := c.flags(&timeout, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pid, ok := pidArg(fs, c.op, stderr)
	if !ok {
		return exitUsage
	}
	ctx, done := askContext(timeout)
	defer done()
	if err := c.ask(ctx, pid, stdout, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

func cmdRootCause(args []string, stdout, stderr io.Writer) int {
	return rootCauseRequest.run(args, stdout, stderr)
}
