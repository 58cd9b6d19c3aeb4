package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
)

type snapshotOptions struct {
	out           string
	showReachable bool
	quiet         bool
	timeout       time.Duration
}

func snapshotFlags(o *snapshotOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.out, "o", "", "write the snapshot (leakpath.report/v1 JSON) to `FILE` (default: leakpath.snapshot.PID.N.json, N the first number free)")
	fs.BoolVar(&o.showReachable, "show-reachable", false, "list still reachable blocks in the text too (the file always has them)")
	fs.BoolVar(&o.quiet, "quiet", false, "print no report, only where the snapshot went")
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
	if err := takeSnapshot(ctx, pid, &o, stdout, stderr); err != nil {
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

// takeSnapshot asks the collector recording pid for a snapshot and writes
// it out.
func takeSnapshot(ctx context.Context, pid int, o *snapshotOptions, stdout, stderr io.Writer) error {
	ep, err := control.Find(pid)
	if err != nil {
		return err
	}
	// Create the file first: a bad path fails before the program stops.
	f, path, err := createSnapshotFile("", o.out, pid)
	if err != nil {
		return err
	}
	resp, err := control.Ask(ctx, ep, control.Request{Op: "snapshot", PID: pid, ShowReachable: o.showReachable})
	if err == nil && len(resp.Report) == 0 {
		err = errors.New("the collector sent no snapshot")
	}
	if err == nil {
		_, err = f.Write(append(resp.Report, '\n'))
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("snapshot of pid %d: %w", pid, err)
	}
	if !o.quiet {
		// The text is the collector's, ours; escaped all the same, as
		// every text that may carry the target's names.
		io.WriteString(stdout, termsafe.Text(resp.Text))
	}
	fmt.Fprintf(stderr, "leakpath: snapshot of pid %d written to %s (the program was paused %.3g s)\n", pid, path, resp.PauseSeconds)
	return nil
}

// createSnapshotFile creates the snapshot's file: name, or the first free
// leakpath.snapshot.PID.N.json in dir.
func createSnapshotFile(dir, name string, pid int) (*os.File, string, error) {
	if name != "" {
		f, err := createOutput(name)
		if err != nil {
			return nil, "", fmt.Errorf("-o: %w", err)
		}
		return f, name, nil
	}
	d, _, err := openOutputDir(dir)
	if err != nil {
		return nil, "", err
	}
	defer unix.Close(d)
	for n := 1; ; n++ {
		path := filepath.Join(dir, fmt.Sprintf("leakpath.snapshot.%d.%d.json", pid, n))
		f, err := openAt(d, path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, path, nil
	}
}

// snapshotReport answers a snapshot request of `leakpath run`'s collector
// (collect.Options.Snapshot): the report of image proc as it runs, in
// text and JSON, with the run's report options, and the leaks of the
// kinds check names.
func snapshotReport(s *heap.Session, proc uint32, req control.Request, opts report.Options, check []event.LeakKind) control.Response {
	opts.Snapshot = true
	opts.ShowReachable = opts.ShowReachable || req.ShowReachable
	opts.Label, opts.LeakCheck, opts.AskedBy = req.Label, req.Op == "leak-check", req.TID
	rep := report.New(s, int32(proc), opts)
	var text, js bytes.Buffer
	if err := rep.Generate(&js, "json"); err != nil {
		return control.Response{Error: err.Error()}
	}
	if err := rep.Generate(&text, "text"); err != nil {
		return control.Response{Error: err.Error()}
	}
	resp := control.Response{Report: bytes.TrimSpace(js.Bytes()), Text: text.String()}
	_, resp.LeakedBytes, resp.LeakedBlocks = rep.Failing(check)
	if p := s.Process(proc); p != nil && p.Scan != nil {
		resp.PauseSeconds = float64(p.Scan.PauseNs) / 1e9
	}
	return resp
}
