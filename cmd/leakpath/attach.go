package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/termsafe"
	"github.com/leakpath/leakpath/internal/sys/clock"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/inject"
)

type attachOptions struct {
	run      runOptions // the flags attach shares with run
	duration time.Duration
	patience time.Duration
}

func attachFlags(o *attachOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(out)
	r := &o.run
	addRecordFlags(fs, r)
	fs.BoolVar(&r.scan, "scan", true, "scan the program's memory (ptrace) before the detach, and at its exit if it exits meanwhile, to tell definite, indirect, possible leaks from reachable blocks")
	fs.BoolVar(&r.types, "types", false, "at the scan before the detach (and at snapshots), also give the live blocks their types, follow who holds whom, and report the type table, retained sizes and --path-to-root")
	addLeakFlags(fs, &r.leaks)
	fs.DurationVar(&o.duration, "for", 0, "detach after `DURATION` (default: on `leakpath detach PID`, SIGINT or SIGTERM)")
	fs.DurationVar(&o.patience, "patience", 200*time.Millisecond, "while loading the agent, let the other threads run after `DURATION` (one may hold a lock the loading needs)")
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
	o := attachOptions{}
	fs := attachFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pid, ok := pidArg(fs, "attach", stderr)
	if !ok {
		return exitUsage
	}
	if err := checkOutputNames(&o.run); err != nil {
		fmt.Fprintf(stderr, "leakpath attach: %v\n", err)
		return exitUsage
	}
	ctx := context.Background()
	if o.duration > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	if err := attachProgram(ctx, pid, &o, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

// attachProgram records pid from an attach to its detach and writes the
// report.
func attachProgram(ctx context.Context, pid int, o *attachOptions, stderr io.Writer) error {
	r := &o.run
	agent, err := r.checkRecording()
	if err != nil {
		return err
	}
	supp, err := r.leaks.suppressionSet()
	if err != nil {
		return err
	}
	if err := r.leaks.own.check(); err != nil {
		return err
	}
	checkKinds, err := r.leaks.kinds()
	if err != nil {
		return err
	}
	if r.types && !r.scan {
		return fmt.Errorf("--types needs the scan before the detach (--scan)")
	}
	outs, err := newOutputs(r, stderr)
	if err != nil {
		return err
	}
	defer outs.close()
	var late lateWarnings
	sym := newSymbolizer(r.debugDirs, late.warn)
	defer sym.close()
	copts := attachCollectOptions(r, agent, sym, stderr)
	started := time.Now()
	copts.Snapshot = func(s *heap.Session, proc uint32, req control.Request) control.Response {
		ropts := r.reportOptions(sym, supp)
		ropts.Elapsed = time.Since(started)
		return snapshotReport(s, proc, req, ropts, checkKinds)
	}
	argv := procCommand(pid)
	tw, err := outs.startTrace(tracefile.Meta{Command: argv, Created: time.Now(), Tool: "leakpath " + version, Host: hostname()},
		tracefile.Options{Compression: traceCompression}, clock.ShiftAfter(r.timeRes, clock.UseTSC()))
	if err != nil {
		return err
	}
	if tw != nil {
		copts.Trace = tw
	}
	res, info, err := collect.Attach(ctx, pid, copts, o.injectOptions())
	tracePath := ""
	if tw != nil {
		if cerr := tw.finish(res != nil, pid); cerr != nil && err == nil {
			err = cerr
		}
		tracePath = tw.path
	}
	if err != nil {
		return err
	}
	textOut := stderr
	textFile, jsonFile, err := outs.files(pid)
	if err != nil {
		return err
	}
	if textFile != nil {
		textOut = textFile
	}
	sym.ready()
	resolveModulePaths(res.Session)
	warnings := append(res.Warnings, late.early...)
	if info.Detached {
		pause, with := info.DetachPause, ""
		if p := res.Session.Process(uint32(max(res.Main, 0))); p != nil && p.Scan != nil {
			pause += time.Duration(p.Scan.PauseNs) // the detach ran in the scan's stop
			with = " (scan included)"
		}
		fmt.Fprintf(stderr, "leakpath: detached from pid %d after %.1f s; the program was paused %.3g ms at attach, %.3g ms at detach%s; %d allocator slots restored\n",
			pid, res.Elapsed.Seconds(), msOf(info.AttachPause), msOf(pause), with, info.Restored)
	}
	ropts := r.reportOptions(sym, supp)
	ropts.TracePath, ropts.Rank = tracePath, outs.rank
	ropts.Elapsed, ropts.TicksPerSec, ropts.Warnings = res.Elapsed, res.TicksPerSec, warnings
	rep := late.to(report.New(res.Session, res.Main, ropts))
	return writeReports(rep, jsonFile, textOut, r.quiet && len(res.Warnings) == 0)
}

// attachCollectOptions are the collector's options of an attach: run's,
// from the same flags, following the forks (attach has no --follow-fork).
func attachCollectOptions(r *runOptions, agent string, sym *symbolizer, stderr io.Writer) collect.Options {
	copts := r.collectOptions(agent, sym, stderr)
	copts.FollowFork = true
	return copts
}

// injectOptions are how the agent is loaded and unloaded.
func (o *attachOptions) injectOptions() inject.Options {
	return inject.Options{Patience: o.patience}
}

// procCommand is pid's command line, nil if unreadable.
func procCommand(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var detachRequest = pidRequest{op: "detach", what: "detach from pid %d", timeout: time.Minute,
	about: "Ends the 'leakpath attach' to PID: the attach scans the live blocks, gives the\n" +
		"program's allocator calls back, lets the program run on and writes its report.\n"}

func cmdDetach(args []string, stdout, stderr io.Writer) int {
	return detachRequest.run(args, stderr, func(ctx context.Context, pid int, resp *control.Response, sock string) int {
		io.WriteString(stderr, termsafe.Text(resp.Text))
		// Done when the attach has let go: its socket goes last.
		for {
			if _, serr := os.Stat(sock); serr != nil {
				return 0
			}
			select {
			case <-ctx.Done():
				fail(stderr, fmt.Errorf("detach from pid %d: the attach has not ended yet: %w", pid, ctx.Err()))
				return 1
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}
