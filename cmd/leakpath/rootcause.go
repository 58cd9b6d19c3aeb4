package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/control"
)

// rootCauseAfter is --root-cause-after: a duration, or "request".
type rootCauseAfter collect.RootCauseOptions

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

func rootCauseFlags(timeout *time.Duration, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("root-cause", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(timeout, "timeout", 30*time.Second, "give up after `DURATION`")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath root-cause [flags] PID\n\n"+
			"Starts root-cause tracing of PID, a program running under\n"+
			"'leakpath run --root-cause --root-cause-after=request': from now on its\n"+
			"growing allocation sites are judged and traced, and the report written\n"+
			"when it ends names, under each leak, the function and branch where its\n"+
			"freed and leaked executions part.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdRootCause(args []string, stdout, stderr io.Writer) int {
	var timeout time.Duration
	fs := rootCauseFlags(&timeout, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pid, ok := pidArg(fs, "root-cause", stderr)
	if !ok {
		return exitUsage
	}
	ctx, done := askContext(timeout)
	defer done()
	resp, _, err := askPID(ctx, pid, "root-cause")
	if err != nil {
		fail(stderr, fmt.Errorf("root cause of pid %d: %w", pid, err))
		return 1
	}
	io.WriteString(stdout, resp.Text)
	return 0
}

// askPID sends request op about pid to the leakpath that records it
// (run or attach) and returns the answer and the socket it went to.
func askPID(ctx context.Context, pid int, op string) (*control.Response, string, error) {
	sock, err := control.Find(pid)
	if err != nil {
		return nil, "", err
	}
	resp, err := control.Ask(ctx, sock, control.Request{Op: op, PID: pid})
	return resp, sock, err
}
