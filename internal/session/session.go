// Package session is leakpath's one record→report pipeline. From one
// Options it starts a program (Run) or attaches to one that runs (Attach),
// records it with the collector (internal/collect) and the analyses wired
// in analyses.go, and writes the report and the files asked for; while it
// records, it answers snapshots (Snapshot is the asking side). The
// commands of cmd/leakpath only fill Options from their flags.
//
// A recording goes in two steps: Prepare checks the options, opens the
// outputs and builds the collector's and the report's options; Record
// records and reports.
package session

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/sys/clock"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/inject"
	"github.com/leakpath/leakpath/internal/target/launch"
	"github.com/leakpath/leakpath/internal/target/region"
)

// traceCompression is the zstd level of traces written by run and attach:
// zstd's fastest. Where every allocation and free is a record (blocks that
// outlive the agent's fold window: bench/workloads/longlived.c) the
// collector's CPU is the cost that counts: the default level took ~25 ns
// an event to compress against ~18, for a trace 1-2 % smaller there
// (5-6 % smaller on python3's and the C++ map's).
const traceCompression = tracefile.CompressFastest

// Result is what a recording produced, and what its report found.
type Result struct {
	*collect.Result
	LeakedBlocks uint64
	// Failing is the number of leak groups that fail --check (of
	// Options.Leaks.CheckKinds; with a baseline, those not in it).
	Failing int
	// Unmeasured: the program did not load the agent, or its executable
	// defines its own allocator, whose calls the agent never sees.
	Unmeasured bool
}

// Leaked reports whether the report found leaked blocks.
func (r *Result) Leaked() bool { return r.LeakedBlocks > 0 }

// Run starts o.Argv, records it until it ends and writes its report.
func Run(ctx context.Context, o *Options, stderr io.Writer) (*Result, error) {
	r, err := Prepare(o, 0, stderr)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Record(ctx)
}

// Attach records process pid from an attach to its detach (after o.For,
// at ctx's end, on `leakpath detach PID`, SIGINT or SIGTERM) and writes
// the report.
func Attach(ctx context.Context, pid int, o *Options, stderr io.Writer) (*Result, error) {
	if o.For > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, o.For)
		defer cancel()
	}
	r, err := Prepare(o, pid, stderr)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Record(ctx)
}

// Recording is a recording prepared from Options: checked, its outputs
// open, its symbolizer started, not yet recording.
type Recording struct {
	// Collect are the collector's options the Options were made into.
	Collect collect.Options
	// Inject are Attach's options to load and unload the agent.
	Inject inject.Options
	// CheckKinds are the leak kinds --check fails on.
	CheckKinds []event.LeakKind

	o         *Options
	pid       int // Attach's process; 0: Run starts o.Argv
	stderr    io.Writer
	sigs      *collect.Signals // Run's, caught while it is set up
	supp      *suppress.Set
	genFormat string
	baseline  *report.Baseline
	outs      *outputs
	tw        *traceOut
	sym       *Symbolizer
	late      lateWarnings
	asked     *askedLog
	use       *Usage
	ui        *liveUI
	recorded  bool
}

// Prepare checks o and sets up its recording: of process pid (Attach),
// or of o.Argv, which it starts (Run) when pid is 0. Nothing runs and
// nothing is recorded before Record; Close releases what it holds.
func Prepare(o *Options, pid int, stderr io.Writer) (r *Recording, err error) {
	r = &Recording{o: o, pid: pid, stderr: stderr}
	defer func() {
		if err != nil {
			r.Close()
			r = nil
		}
	}()
	if pid == 0 {
		// Caught while the run is set up, not when the program is to start.
		r.sigs = collect.CatchSignals()
	}
	agent, err := o.checkRecording()
	if err != nil {
		return r, err
	}
	if pid == 0 { // attach has no stale watch
		if err := o.Stale.Check(); err != nil {
			return r, err
		}
	}
	if r.supp, err = o.Leaks.SuppressionSet(); err != nil {
		return r, err
	}
	if err := o.Leaks.Own.Check(); err != nil {
		return r, err
	}
	if r.CheckKinds, err = o.Leaks.Kinds(); err != nil {
		return r, err
	}
	if r.genFormat, err = o.GenSupp.Check(true); err != nil {
		return r, err
	}
	if r.baseline, err = readBaseline(o.Baseline, o.Check); err != nil {
		return r, err
	}
	if err := checkAnalyses(o, pid != 0); err != nil {
		return r, err
	}
	if pid == 0 {
		if err := writableDir(o.SnapshotDir); err != nil {
			return r, fmt.Errorf("--snapshot-dir: %w", err)
		}
	}
	// Open every output before recording, so a bad path fails fast (one
	// named by the pid: when it is known; see outputs.go).
	if r.outs, err = newOutputs(o, stderr); err != nil {
		return r, err
	}
	// The symbolizer starts before the recording, to load symbols
	// meanwhile; its warnings go to the report made after.
	r.sym = NewSymbolizer(o.DebugDirs, r.late.warn)
	r.Collect = r.collectOptions(agent)
	r.Inject = inject.Options{Patience: o.Patience}
	started := time.Now()
	r.Collect.Snapshot = func(s *heap.Session, proc uint32, req control.Request) control.Response {
		ropts := r.ReportOptions()
		ropts.Elapsed = time.Since(started)
		return snapshotReport(s, proc, req, ropts, r.CheckKinds)
	}
	if o.SnapshotDir != "" {
		r.asked = &askedLog{dir: o.SnapshotDir, started: started}
		r.Collect.Asked = r.asked.add
	}
	if r.use, err = StartUsage(&o.Usage, r.sym); err != nil {
		return r, err
	}
	var obs Observers
	if r.use != nil && r.use.Observer() != nil {
		obs = append(obs, r.use.Observer())
	}
	if o.UI {
		if r.ui, err = startLiveUI(o.UIListen, filepath.Base(o.Argv[0]), r.sym, stderr); err != nil {
			return r, err
		}
		obs = append(obs, r.ui)
	}
	switch len(obs) {
	case 0:
	case 1:
		r.Collect.Observer = obs[0]
	default:
		r.Collect.Observer = obs
	}
	command := o.Argv
	if pid != 0 {
		command = procCommand(pid)
	}
	r.tw, err = r.outs.startTrace(tracefile.Meta{Command: command, Created: time.Now(), Tool: o.Tool, Host: hostname()},
		tracefile.Options{Compression: traceCompression}, clock.ShiftAfter(o.TimeRes, clock.UseTSC()))
	if err != nil {
		return r, err
	}
	if r.tw != nil {
		r.Collect.Trace = r.tw
	}
	return r, nil
}

// Close releases what Prepare holds; a trace begun but never recorded to
// is removed.
func (r *Recording) Close() {
	if r.sigs != nil {
		r.sigs.Stop()
	}
	if r.tw != nil && !r.recorded {
		r.tw.finish(false, 0)
	}
	if r.ui != nil {
		r.ui.close()
	}
	r.use.Close()
	if r.sym != nil {
		r.sym.Close()
	}
	if r.outs != nil {
		r.outs.close()
	}
}

// checkRecording checks the options that shape the recording and returns
// the agent to record with.
func (o *Options) checkRecording() (string, error) {
	agent, err := launch.FindAgent(o.Agent)
	if err != nil {
		return "", err
	}
	if o.MaxDepth < 1 || o.MaxDepth > 128 {
		return "", fmt.Errorf("--max-depth %d: want 1 to 128", o.MaxDepth)
	}
	if o.MaxMemMiB < 0 {
		return "", fmt.Errorf("--max-memory %d: want a number of MiB, or 0 for the default", o.MaxMemMiB)
	}
	if o.RingKiB < 4 || o.RingKiB > 1<<18 || o.RingKiB&(o.RingKiB-1) != 0 {
		return "", fmt.Errorf("--ring-size %d: want a power of two from 4 to 262144", o.RingKiB)
	}
	return agent, nil
}

// bigRings is how many threads' rings are four times --ring-size: the
// first threads', which most programs do their work on. A program of
// many threads maps 3 * bigRings * --ring-size more, no more.
const bigRings = 2

// collectOptions are the collector's options that o stands for, the
// analyses wired in (wireAnalyses).
func (r *Recording) collectOptions(agent string) collect.Options {
	o := r.o
	copts := collect.Options{
		Agent: agent,
		Argv:  o.Argv,
		// Attach has no --follow-fork: it follows them.
		FollowFork: o.FollowFork || r.pid != 0,
		Signals:    r.sigs,
		Region: region.Options{
			RingSize:      o.RingKiB << 10,
			BigRings:      bigRings,
			MaxDepth:      o.MaxDepth,
			FreeStacks:    o.FreeStacks,
			Fold:          o.Fold,
			ExactTimes:    clock.ExactPending(o.TimeRes),
			AllocFamilies: strings.Join(o.AllocFamilies, ","),
		},
		MemoryLimit: uint64(o.MaxMemMiB) << 20,
		Logf:        logTo(r.stderr),
	}
	wireAnalyses(&copts, o, r.sym)
	copts.Warm = r.sym.warmUp()
	return copts
}

// ReportOptions are the report options that o stands for, the same for
// the final report and the snapshots; the caller adds the times, warnings
// and trace.
func (r *Recording) ReportOptions() report.Options {
	o := r.o
	return o.Leaks.Own.With(report.Options{
		Symbolize:     r.sym.Lookup,
		SymbolName:    r.sym.SymbolName,
		Suppressions:  r.supp,
		ShowReachable: o.Leaks.ShowReachable,
		StaleT1:       uint32(o.Stale.T1),
		StaleT2:       uint32(o.Stale.T2),
		PathToRoot:    o.Leaks.PathToRoot,
	})
}

// Files are the names (patterns: see outputs.go) of the trace, JSON and
// text report files, "" for those not asked for.
func (r *Recording) Files() (trace, json, text string) {
	return r.outs.trace.s, r.outs.json.s, r.outs.report.s
}

// Record records (starts o.Argv, or attaches), then writes the report
// and the files asked for.
func (r *Recording) Record(ctx context.Context) (*Result, error) {
	res, info, err := r.record(ctx)
	pid := r.pid
	if pid == 0 && res != nil {
		pid = res.PID
	}
	tracePath := ""
	if r.tw != nil {
		if cerr := r.tw.finish(res != nil, pid); cerr != nil && err == nil {
			err = cerr
		}
		tracePath = r.tw.kept()
	}
	if err != nil {
		return nil, err
	}
	return r.report(res, info, pid, tracePath)
}

// record runs the collector.
func (r *Recording) record(ctx context.Context) (*collect.Result, *collect.AttachInfo, error) {
	r.recorded = true
	var res *collect.Result
	var info *collect.AttachInfo
	var err error
	if r.pid == 0 {
		res, err = collect.Run(ctx, r.Collect)
		// From now on SIGINT and SIGTERM end leakpath at once, as they
		// would any program: the run is over, what is left is the report.
		r.sigs.Stop()
	} else {
		res, info, err = collect.Attach(ctx, r.pid, r.Collect, r.Inject)
	}
	return res, info, err
}

// report writes the report of res (of process pid) and the files asked
// for.
func (r *Recording) report(res *collect.Result, info *collect.AttachInfo, pid int, tracePath string) (*Result, error) {
	o := r.o
	var textOut io.Writer = r.stderr
	textFile, jsonFile, err := r.outs.files(pid)
	if err != nil {
		return nil, err
	}
	if textFile != nil {
		textOut = textFile
	}
	r.sym.Ready()
	var ownc chan []string
	if r.pid == 0 {
		// The programs' executables are read (their symbol tables: 30
		// MB for g++'s cc1plus) while the report folds its leaks
		// (Prepare, below); both only read the model.
		ownc = make(chan []string, 1)
		go func(s *heap.Session) { ownc <- append(unmeasured(s), untracedFamilies(s)...) }(res.Session)
	} else {
		resolveModulePaths(res.Session)
		if info.Detached {
			r.sayDetached(res, info)
		}
	}
	ropts := r.ReportOptions()
	ropts.TracePath, ropts.Rank = tracePath, r.outs.rank
	ropts.Elapsed, ropts.TicksPerSec = res.Elapsed, res.TicksPerSec
	nw := len(res.Warnings)
	ropts.Warnings = append(res.Warnings[:nw:nw], r.late.early...)
	rep := r.late.to(report.New(res.Session, res.Main, ropts))
	// A trace cut by a full disk: the report, from memory, still covers
	// the whole recording.
	seconds := func(uint64) float64 { return 0 }
	if res.Main >= 0 && int(res.Main) < len(res.Session.Procs) && res.Session.Procs[res.Main] != nil {
		main := res.Session.Procs[res.Main]
		seconds = func(ticks uint64) float64 { return rep.Seconds(main, ticks) }
	}
	cut := r.tw.cutWarning(seconds)
	if cut != "" {
		rep.Warn(cut)
	}
	rep.Prepare(jsonFile != nil)
	var own []string
	if ownc != nil {
		own = <-ownc
		res.Warnings = append(res.Warnings, own...)
		rep.WarnAt(nw, own...) // where they were before the report's others
	}
	out := &Result{Result: res, LeakedBlocks: rep.LeakedBlocks(), Unmeasured: res.NoAgent || len(own) > 0}
	out.Failing, _, _ = rep.Failing(r.CheckKinds)
	if r.baseline != nil {
		out.Failing = rep.FailingNotIn(r.baseline, r.CheckKinds)
	}
	if err := writeReports(rep, jsonFile, textOut, o.Quiet && len(res.Warnings) == 0 && cut == ""); err != nil {
		return nil, err
	}
	if r.baseline != nil && !(o.Quiet && !out.Leaked() && len(res.Warnings) == 0) {
		if err := rep.BaselineNote(textOut, r.baseline, r.CheckKinds); err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
	}
	if r.genFormat != "" {
		path := o.GenSupp.named.expand(r.outs.pid, r.outs.rank) // the pid the other files were named with
		if err := o.GenSupp.Write(rep, path, r.genFormat, r.CheckKinds, o.Argv, o.Tool, r.stderr); err != nil {
			return nil, err
		}
	}
	if r.asked != nil {
		r.asked.write(textOut)
	}
	if r.use != nil {
		if err := r.use.finish(rep, textOut, res.PID, r.outs.rank); err != nil {
			return nil, err
		}
	}
	if r.ui != nil {
		if err := r.ui.finish(rep, res.TicksPerSec, filepath.Base(o.Argv[0]), r.stderr); err != nil {
			return nil, fmt.Errorf("--ui: %w", err)
		}
	}
	return out, nil
}

// sayDetached tells how long an attach paused the program.
func (r *Recording) sayDetached(res *collect.Result, info *collect.AttachInfo) {
	pause, with := info.DetachPause, ""
	if p := res.Session.Process(uint32(max(res.Main, 0))); p != nil && p.Scan != nil {
		pause += time.Duration(p.Scan.PauseNs) // the detach ran in the scan's stop
		with = " (scan included)"
	}
	fmt.Fprintf(r.stderr, "leakpath: detached from pid %d after %.1f s; the program was paused %.3g ms at attach, %.3g ms at detach%s; %d allocator slots restored\n",
		r.pid, res.Elapsed.Seconds(), msOf(info.AttachPause), msOf(pause), with, info.Restored)
}

// writeReports writes rep as JSON to jsonFile (when given) and as text to
// textOut, unless quiet and rep has no leak.
func writeReports(rep *report.Report, jsonFile *os.File, textOut io.Writer, quiet bool) error {
	if jsonFile != nil {
		if err := rep.Generate(jsonFile, "json"); err != nil {
			return fmt.Errorf("JSON report: %w", err)
		}
	}
	if quiet && rep.LeakedBlocks() == 0 {
		return nil
	}
	if err := rep.Generate(textOut, "text"); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// lateWarnings takes the symbolizer's warnings: those before the report
// exists are kept for it, later ones go to it.
type lateWarnings struct {
	rep   *report.Report
	early []string
}

func (l *lateWarnings) warn(msg string) {
	if l.rep != nil {
		l.rep.Warn(msg)
	} else {
		l.early = append(l.early, msg)
	}
}

// to makes rep the report that takes the later warnings.
func (l *lateWarnings) to(rep *report.Report) *report.Report {
	l.rep = rep
	return rep
}

// logTo is the collector's Logf: its lines may name the target's
// programs and files.
func logTo(w io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		io.WriteString(w, "leakpath: "+termsafe.Text(fmt.Sprintf(format, args...))+"\n")
	}
}

func hostname() string {
	h, _ := os.Hostname()
	return strings.TrimSpace(h)
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
