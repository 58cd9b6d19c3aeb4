package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/rootcause"
	"github.com/leakpath/leakpath/internal/render/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
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

// pidRequest is a command that sends one control request (Op) about a
// PID to the leakpath that records it: root-cause, detach.
type pidRequest struct {
	op, what string        // what: the error's prefix, with the pid as %d
	timeout  time.Duration // --timeout's default
	about    string        // the usage's text after its first line
}

var rootCauseRequest = pidRequest{op: "root-cause", what: "root cause of pid %d", timeout: 30 * time.Second,
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

// run parses args, sends the request and hands the answer to then, with
// the socket it went to and the context that bounds the command.
func (c pidRequest) run(args []string, stderr io.Writer,
	then func(ctx context.Context, pid int, resp *control.Response, sock string) int) int {
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
	resp, sock, err := askPID(ctx, pid, c.op)
	if err != nil {
		fail(stderr, fmt.Errorf(c.what+": %w", pid, err))
		return 1
	}
	return then(ctx, pid, resp, sock)
}

func cmdRootCause(args []string, stdout, stderr io.Writer) int {
	return rootCauseRequest.run(args, stderr, func(_ context.Context, _ int, resp *control.Response, _ string) int {
		io.WriteString(stdout, termsafe.Text(resp.Text))
		return 0
	})
}

// askPID sends request op about pid to the leakpath that records it
// (run or attach) and returns the answer and the socket it went to.
func askPID(ctx context.Context, pid int, op string) (*control.Response, string, error) {
	ep, err := control.Find(pid)
	if err != nil {
		return nil, "", err
	}
	resp, err := control.Ask(ctx, ep, control.Request{Op: op, PID: pid})
	return resp, ep.Socket(), err
}
