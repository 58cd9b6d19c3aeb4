package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/progress"
	"github.com/leakpath/leakpath/internal/render/report"

	"github.com/leakpath/leakpath/internal/session"
)

type reportOptions struct {
	format    string
	value     string // what --format collapsed and flamegraph count; "": leaked-bytes
	output    string
	debugDirs commaList
	leaks     session.LeakOptions
	genSupp   session.GenSuppOptions
	usage     session.UsageOptions
	stale     session.StaleOptions
}

func reportFlags(o *reportOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.format, "format", "text", "output `format`: text, json, pprof (gzipped profile.proto for go tool pprof),\n"+
		"collapsed (folded stacks for flamegraph.pl and speedscope), flamegraph (one self-contained\n"+
		"interactive HTML page) or sarif (SARIF 2.1.0)")
	fs.StringVar(&o.value, "value", "", "what --format collapsed or flamegraph counts per stack: `VALUE` leaked-bytes (default),\n"+
		"allocated-bytes, leaked-blocks or allocated-blocks")
	fs.StringVar(&o.output, "output", "", "write to `FILE` instead of stdout")
	fs.Var(&o.debugDirs, "debug-dir", "look for separate debug files under `DIR` too (repeatable)")
	addLeakFlags(fs, &o.leaks)
	addGenSuppFlags(fs, &o.genSupp)
	addStaleFlags(fs, &o.stale, false)
	addUsageFlags(fs, &o.usage, false)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath report [flags] TRACE.lpt...\n\n"+
			"Reads a trace kept with 'leakpath run -o TRACE.lpt' and prints the same report\n"+
			"as the run did. A trace cut short (the program or leakpath was killed) is\n"+
			"reported up to its last complete record, with a warning. Several traces (one\n"+
			"per rank of an MPI job: out.*.lpt) give a report of each, ordered by rank, then\n"+
			"a summary: totals summed, leak groups with equal stacks merged.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// checkFormat checks --format and --value.
func (o *reportOptions) checkFormat() error {
	if !slices.Contains(report.Formats, o.format) {
		return fmt.Errorf("--format %q: want %s", o.format, strings.Join(report.Formats, ", "))
	}
	if o.value != "" {
		if o.format != "collapsed" && o.format != "flamegraph" {
			return fmt.Errorf("--value %q: only --format collapsed and flamegraph have a value to choose", o.value)
		}
		if !slices.Contains(report.CollapsedValues, o.value) {
			return fmt.Errorf("--value %q: want %s", o.value, strings.Join(report.CollapsedValues, ", "))
		}
	}
	return nil
}

// reportTrace replays a trace into the model and reports it.
func reportTrace(path string, o *reportOptions, stdout, stderr io.Writer) error {
	if err := o.checkFormat(); err != nil {
		return err
	}
	if err := o.stale.Check(); err != nil {
		return err
	}
	supp, err := o.leaks.SuppressionSet()
	if err != nil {
		return err
	}
	if err := o.leaks.Own.Check(); err != nil {
		return err
	}
	checkKinds, err := o.leaks.Kinds()
	if err != nil {
		return err
	}
	genFormat, err := o.genSupp.Check(false)
	if err != nil {
		return err
	}
	bar := progress.OnTerminal(stderr, "reading "+filepath.Base(path))
	t, err := loadTraceProgress(path, nil, bar.Set)
	bar.Done()
	if err != nil {
		return err
	}
	var rep *report.Report
	sym := session.NewSymbolizer(o.debugDirs, func(msg string) { rep.Warn(msg) })
	defer sym.Close()
	rep = report.New(t.model, t.main, o.leaks.Own.With(report.Options{
		Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: t.warnings, TracePath: path, Rank: t.meta.Rank,
		Suppressions: supp, ShowReachable: o.leaks.ShowReachable, CollapsedValue: o.value, PathToRoot: o.leaks.PathToRoot,
		StaleT1: uint32(o.stale.T1), StaleT2: uint32(o.stale.T2),
	}))
	if err := session.WriteOutput(o.output, stdout, func(w io.Writer) error { return rep.Generate(w, o.format) }); err != nil {
		return err
	}
	if genFormat != "" {
		return o.genSupp.Write(rep, o.genSupp.Path, genFormat, checkKinds, t.meta.Command, "leakpath "+version, stderr)
	}
	return nil
}

// loadedTrace is a trace replayed into the model.
type loadedTrace struct {
	model *heap.Session
	main  int32 // the main program's last image; -1: none
	tps   float64
	// timeShift: the trace keeps times to 2^timeShift ticks.
	timeShift uint
	warnings  []string
	meta      tracefile.Meta
	cut       error // the trace ends early or is corrupt there: the model has what came before
}

// loadTrace replays the trace at path. A trace cut short or corrupt
// somewhere is read up to there, with a warning; an error is a file that
// could not be read at all.
func loadTrace(path string) (*loadedTrace, error) { return loadTraceWith(path, nil) }

// loadTraceWith is loadTrace with obs (nil: none) following the model as
// the trace is replayed.
func loadTraceWith(path string, obs heap.Observer) (*loadedTrace, error) {
	return loadTraceProgress(path, obs, nil)
}

// loadTraceProgress is loadTraceWith telling progress (nil: nobody) how
// many bytes of the file it has read, of how many, as it goes.
func loadTraceProgress(path string, obs heap.Observer, progress func(done, total int64)) (*loadedTrace, error) {
	r, err := tracefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var size int64
	if progress != nil {
		if fi, err := os.Stat(path); err == nil {
			size = fi.Size()
		}
		defer func() { progress(size, size) }()
	}
	model := heap.NewSession()
	model.Observer = obs
	var warnings []string
	main := int32(-1)
	var tps float64
	var cut error
	ahead := readAhead(r)
	defer ahead.stop()
	for b := range ahead.batches {
		buf, err := b.evs, b.err
		if progress != nil {
			progress(b.offset, size)
		}
		for i := range buf {
			ev := &buf[i]
			if ev.Kind == event.ProcessStart && main < 0 {
				main = int32(ev.Proc)
			}
			if ev.ClockInfo() != nil && ev.ClockInfo().TicksPerSec > 0 {
				tps = ev.ClockInfo().TicksPerSec
			}
		}
		model.Apply(buf)
		ahead.recycle(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			if !errors.Is(err, tracefile.ErrTruncated) {
				var ce *tracefile.CorruptError
				if !errors.As(err, &ce) {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
			}
			cut = err
			warnings = append(warnings, fmt.Sprintf("%s: %v; reporting what came before", path, err))
			model.Finish()
			break
		}
	}
	// The main program's last image: the latest one of the first pid.
	if main >= 0 {
		pid := model.Procs[main].Info.PID
		for i, p := range model.Procs {
			if p != nil && p.Info.PID == pid {
				main = int32(i)
			}
		}
	}
	return &loadedTrace{model: model, main: main, tps: tps, warnings: warnings, meta: r.Meta(), cut: cut, timeShift: r.TimeShift()}, nil
}

// readBatch is a batch of a trace's events read ahead.
type readBatch struct {
	evs    []event.Event
	offset int64 // the reader's offset after it
	err    error
}

// aheadReader reads a trace's batches on a goroutine of its own, up to two
// ahead, so that decompressing and decoding the next ones overlaps with
// applying this one (~a fifth of `leakpath report`'s time on a trace of
// 3.6M events). The batches' events are fresh (tracefile.Reader.Next);
// only the slices are reused, once handed back with recycle.
type aheadReader struct {
	batches  chan readBatch // closed after the batch with an error (io.EOF at the end)
	free     chan []event.Event
	quit     chan struct{}
	finished chan struct{}
	once     sync.Once
}

// readAhead starts reading r.
func readAhead(r *tracefile.Reader) *aheadReader {
	a := &aheadReader{batches: make(chan readBatch, 2), free: make(chan []event.Event, 3),
		quit: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(a.finished)
		defer close(a.batches)
		for {
			var buf []event.Event
			select {
			case buf = <-a.free:
			default:
			}
			buf, err := r.Next(buf)
			select {
			case a.batches <- readBatch{evs: buf, offset: r.Offset(), err: err}:
			case <-a.quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return a
}

// recycle hands a batch's slice back, its events applied.
func (a *aheadReader) recycle(evs []event.Event) {
	select {
	case a.free <- evs:
	default:
	}
}

// stop ends the reading, early or not, and waits for it: r can be closed
// then.
func (a *aheadReader) stop() {
	a.once.Do(func() {
		close(a.quit)
		<-a.finished
	})
}

// reportTraces reports several traces (the ranks of an MPI job, say):
// each trace's report, ordered by rank then name, then a summary over all.
// A file that cannot be read is an error naming it, on stderr, and the
// exit code is 1; the others are reported all the same.
func reportTraces(paths []string, o *reportOptions, stdout, stderr io.Writer) int {
	if o.format != "text" && o.format != "json" {
		fail(stderr, fmt.Errorf("--format %q: several traces are reported as text or json only", o.format))
		return exitUsage
	}
	if err := o.leaks.Own.Check(); err != nil {
		fail(stderr, err)
		return exitUsage
	}
	multi, err := report.NewMulti(o.format)
	if err != nil {
		fail(stderr, err)
		return exitUsage
	}
	// One symbolizer for all: the ranks of a job share their modules.
	sym := session.NewSymbolizer(o.debugDirs, multi.Warn)
	defer sym.Close()
	code, added := 0, 0
	for _, path := range paths {
		t, err := loadTrace(path)
		if err != nil {
			fail(stderr, err)
			multi.Warn(fmt.Sprintf("%s could not be read: %v", path, err))
			code = 1
			continue
		}
		if t.cut != nil {
			multi.Warn(fmt.Sprintf("%s ends early or is damaged: counted up to there", path))
		}
		rep := report.New(t.model, t.main, o.leaks.Own.With(report.Options{
			Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: t.warnings, TracePath: path, Rank: t.meta.Rank,
		}))
		if err := multi.Add(rep); err != nil {
			fail(stderr, fmt.Errorf("%s: %w", path, err))
			return 1
		}
		added++
	}
	if added == 0 {
		return 1
	}
	if err := session.WriteOutput(o.output, stdout, multi.Generate); err != nil {
		fail(stderr, err)
		return 1
	}
	return code
}
