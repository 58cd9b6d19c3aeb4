package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
)

// Snapshot asks the recording of pid (Run's or Attach's, another
// leakpath's) for a snapshot and writes its JSON to o.JSON (default:
// leakpath.snapshot.PID.N.json), its text to stdout unless o.Quiet; with
// o.Leaks.ShowReachable, the text lists the reachable blocks too.
func Snapshot(ctx context.Context, pid int, o *Options, stdout, stderr io.Writer) error {
	ep, err := control.Find(pid)
	if err != nil {
		return err
	}
	// Create the file first: a bad path fails before the program stops.
	f, path, err := createSnapshotFile("", o.JSON, pid)
	if err != nil {
		return err
	}
	resp, err := control.Ask(ctx, ep, control.Request{Op: "snapshot", PID: pid, ShowReachable: o.Leaks.ShowReachable})
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
	if !o.Quiet {
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
		f, err := CreateOutput(name)
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

// snapshotReport answers a snapshot request to a recording
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
