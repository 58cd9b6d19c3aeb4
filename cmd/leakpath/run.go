package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/sys/clock"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/launch"
	"github.com/leakpath/leakpath/internal/target/region"
)

// defaultTimeRes is how finely a trace keeps times unless told: 4 ms, a
// usual kernel tick (the coarse clock's: no finer than that, the agent
// dates what it keeps pending by the collector's millisecond clock), finer
// than heaptrack's 10 ms.
const defaultTimeRes = 4 * time.Millisecond

// traceCompression is the zstd level of traces written by run and attach:
// zstd's default level, 5 % smaller than its fastest on python3's trace
// for twice the compression time (a trace's payload is ~3-5 bytes an
// event: tens of milliseconds on a run of millions).
const traceCompression = tracefile.CompressDefault

type runOptions struct {
	argv       []string
	trace      string
	jsonOut    string
	reportOut  string
	check      bool
	checkCode  int
	followFork bool
	freeStacks bool
	fold       bool
	maxDepth   int
	agent      string
	debugDirs  commaList
	ringKiB    int
	maxMemMiB  int
	quiet      bool
	snapDir    string
	timeRes    time.Duration
	scan       bool
	types      bool
	rootCause  collect.RootCauseOptions
	stale      staleOptions
	leaks      leakOptions
	genSupp    genSuppOptions
	baseline   string
	usage      usageOptions
	ui         bool
	uiListen   string

	// checkUnmeasured is the exit code of --check when the program was
	// not measured (runReport.unmeasured).
	checkUnmeasured int
	// allocFamilies are the prefixes of --alloc-family.
	allocFamilies stringList
}

// addRecordFlags defines the flags run and attach share: where the
// results go and how the agent records.
func addRecordFlags(fs *flag.FlagSet, o *runOptions) {
	fs.StringVar(&o.trace, "o", "", "keep the trace in `FILE` (.lpt), for 'leakpath report' later")
	fs.StringVar(&o.jsonOut, "json", "", "also write the report as JSON (leakpath.report/v1) to `FILE`")
	fs.StringVar(&o.reportOut, "report", "", "write the text report to `FILE` instead of stderr")
	fs.BoolVar(&o.freeStacks, "free-stacks", true, "record the call stack of frees too (improper uses show it; a free that folds records none unless run --root-cause)")
	fs.BoolVar(&o.fold, "fold", true, "count short-lived blocks a thread frees soon (its latest 256 allocations) per site instead of one by one: much faster; the peak counts them too (with threads it may be a little low)")
	fs.DurationVar(&o.timeRes, "time-resolution", defaultTimeRes, "keep the trace's times to `DURATION` (a power of two of clock ticks at most that; allocations the agent keeps pending are dated to about a millisecond when DURATION is no finer than the system's coarse clock tick): exact times are most of a trace's size; 0 keeps them exact (the default with run --per-call)")
	fs.IntVar(&o.maxDepth, "max-depth", 64, "record at most `N` frames per stack (1-128)")
	fs.StringVar(&o.agent, "agent", "", "the agent library `PATH` (default: libleakpath.so beside the leakpath binary, or $LEAKPATH_AGENT)")
	fs.Var(&o.debugDirs, "debug-dir", "look for separate debug files under `DIR` too (repeatable; /usr/lib/debug is always searched)")
	fs.IntVar(&o.ringKiB, "ring-size", 256, "per-thread buffer shared with the collector, in `KiB` (a power of two)")
	fs.IntVar(&o.maxMemMiB, "max-memory", 0, "stop recording (with a warning; the program runs on) when the collector's live heap passes `MiB` (0: half the machine's memory, or its control group's)")
	fs.BoolVar(&o.quiet, "quiet", false, "print no report when nothing leaked and nothing went wrong")
}

func runFlags(o *runOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(out)
	addRecordFlags(fs, o)
	fs.BoolVar(&o.check, "check", false, "exit with --check-exit-code when leaks of --check-kinds remain after suppressions (for CI)")
	fs.BoolVar(&o.scan, "scan", true, "at exit, hold the program while its memory is scanned (stopped with ptrace, unless it ends with one thread) to tell definite, indirect, possible leaks from reachable blocks")
	fs.BoolVar(&o.types, "types", false, "at every scan (exit, snapshots), also give the live blocks their types (a vtable in the first word, the DWARF types of the globals and fields that point at them), follow who holds whom, and report the type table, retained sizes and --path-to-root")
	addLeakFlags(fs, &o.leaks)
	fs.BoolVar(&o.rootCause.Enabled, "root-cause", false, "find why growing sites leak: trace the thread that allocates at one (ptrace, that thread only, a window at a time) and report the function and branch where freed and leaked executions part (sets --fold=false unless given)")
	fs.Var((*rootCauseAfter)(&o.rootCause), "root-cause-after", "with --root-cause, judge sites only after `DURATION` (skip the start-up), or only once 'leakpath root-cause PID' asks (request)")
	fs.IntVar(&o.rootCause.MaxSites, "root-cause-sites", 4, "with --root-cause, trace at most `N` sites at once")
	fs.DurationVar(&o.rootCause.Budget, "root-cause-budget", 0, "with --root-cause, give up on a site after `DURATION` of tracing (default 10s; 30s where hardware breakpoints do not fire)")
	fs.Float64Var(&o.rootCause.MaxSlowdown, "root-cause-slowdown", 1.25, "with --root-cause, pace the tracing so that the traced threads run at least 1/`F` of their speed (F > 1)")
	addStaleFlags(fs, &o.stale, true)
	fs.IntVar(&o.checkCode, "check-exit-code", exitLeaks, "exit `code` of --check when leaks remain")
	fs.IntVar(&o.checkUnmeasured, "check-unmeasured-exit-code", exitUnmeasured, "exit `code` of --check when no leak was found but the program was not measured: it did not load the agent (statically linked, setuid) or its executable defines its own malloc")
	addGenSuppFlags(fs, &o.genSupp)
	fs.StringVar(&o.baseline, "baseline", "", "with --check, fail only on leak sites not in `REPORT.json` (the --json report of an earlier run; sites compare by symbolized stack, as leakpath diff does) and list them")
	fs.Var(&o.allocFamilies, "alloc-family", "trace the allocator functions `PREFIX`malloc, PREFIXfree, PREFIXcalloc, PREFIXrealloc (and the aligned ones) too, by patching their entries at the start (repeatable; je_, _rjem_, mi_, rp and tc_ are always looked for; see docs/allocators.md)")
	fs.BoolVar(&o.followFork, "follow-fork", true, "record fork children as processes of their own")
	fs.StringVar(&o.snapDir, "snapshot-dir", ".", "write the snapshots and leak checks the program asks for (leakpath_snapshot, leakpath_leak_check) to `DIR`, as leakpath.snapshot.PID.N.json")
	addUsageFlags(fs, &o.usage, true)
	fs.BoolVar(&o.ui, "ui", false, "serve a live view of the program (the page of 'leakpath ui') on 127.0.0.1, its address (with its access token) on stderr;\n"+
		"at the end, the whole report there until Ctrl-C")
	fs.StringVar(&o.uiListen, "ui-listen", "127.0.0.1:0", "with --ui, serve on `ADDR` (host:port)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath run [flags] -- PROGRAM [ARGS...]\n\n"+
			"Runs PROGRAM with leakpath's agent preloaded, records every heap allocation and\n"+
			"free with its call stack, and prints a leak report on stderr when it ends.\n"+
			"PROGRAM's stdin, stdout, stderr, environment (but LD_PRELOAD and LEAKPATH_SESSION),\n"+
			"exit code and signals are its own; leakpath exits with PROGRAM's exit code\n"+
			"(128+N if signal N killed it, even with --check) unless --check finds leaks,\n"+
			"or finds PROGRAM unmeasured (--check-unmeasured-exit-code).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// runResult is what cmdRun needs after the report.
type runReport struct {
	leakedBlocks uint64
	failing      int // leak groups that fail --check
	// unmeasured: the program did not load the agent, or its executable
	// defines its own allocator, whose calls the agent never sees.
	unmeasured bool
}

func (r *runReport) leaked() bool { return r.leakedBlocks > 0 }

func runProgram(ctx context.Context, o *runOptions, stderr io.Writer) (*collect.Result, *runReport, error) {
	// Caught while the run is set up, not when the program is to start.
	sigs := collect.CatchSignals()
	defer sigs.Stop()
	agent, err := o.checkRecording()
	if err != nil {
		return nil, nil, err
	}
	if err := o.stale.check(); err != nil {
		return nil, nil, err
	}
	supp, err := o.leaks.suppressionSet()
	if err != nil {
		return nil, nil, err
	}
	if err := o.leaks.own.check(); err != nil {
		return nil, nil, err
	}
	checkKinds, err := o.leaks.kinds()
	if err != nil {
		return nil, nil, err
	}
	genFormat, err := o.genSupp.check(true)
	if err != nil {
		return nil, nil, err
	}
	baseline, err := readBaseline(o.baseline, o.check)
	if err != nil {
		return nil, nil, err
	}
	if o.types && !o.scan {
		return nil, nil, fmt.Errorf("--types needs the scan at exit (--scan)")
	}
	if err := writableDir(o.snapDir); err != nil {
		return nil, nil, fmt.Errorf("--snapshot-dir: %w", err)
	}
	// Open every output before running, so a bad path fails fast (one
	// named by the pid: when it is known; see outpath.go).
	outs, err := newOutputs(o, stderr)
	if err != nil {
		return nil, nil, err
	}
	defer outs.close()
	// The symbolizer starts before the run, to load symbols while it runs;
	// its warnings go to the report made after.
	var late lateWarnings
	sym := newSymbolizer(o.debugDirs, late.warn)
	defer sym.close()
	copts := o.collectOptions(agent, sym, stderr)
	copts.Argv, copts.FollowFork, copts.Signals = o.argv, o.followFork, sigs
	started := time.Now()
	copts.Snapshot = func(s *heap.Session, proc uint32, req control.Request) control.Response {
		ropts := o.reportOptions(sym, supp)
		ropts.Elapsed = time.Since(started)
		return snapshotReport(s, proc, req, ropts, checkKinds)
	}
	asked := &askedLog{dir: o.snapDir, started: started}
	copts.Asked = asked.add
	use, err := startUsage(&o.usage, sym)
	if err != nil {
		return nil, nil, err
	}
	defer use.close()
	var obs observers
	if use != nil && use.engine.Observes() {
		obs = append(obs, use.engine)
	}
	var ui *liveUI
	if o.ui {
		if ui, err = startLiveUI(o.uiListen, filepath.Base(o.argv[0]), sym, stderr); err != nil {
			return nil, nil, err
		}
		defer ui.close()
		obs = append(obs, ui)
	}
	switch len(obs) {
	case 0:
	case 1:
		copts.Observer = obs[0]
	default:
		copts.Observer = obs
	}
	tw, err := outs.startTrace(tracefile.Meta{
		Command: o.argv, Created: time.Now(), Tool: "leakpath " + version, Host: hostname(),
	}, tracefile.Options{Compression: traceCompression}, clock.ShiftAfter(o.timeRes, clock.UseTSC()))
	if err != nil {
		return nil, nil, err
	}
	if tw != nil {
		copts.Trace = tw
	}
	res, err := collect.Run(ctx, copts)
	// From now on SIGINT and SIGTERM end leakpath at once, as they would
	// any program: the run is over, what is left is the report.
	sigs.Stop()
	if res != nil && len(res.RootCause) > 0 {
		// The root causes go into the model and the trace like the
		// rest, for `leakpath report` too.
		evs := collect.RootCauseEvents(res)
		res.Session.Apply(evs)
		if tw != nil {
			if werr := tw.Write(evs); werr != nil && err == nil {
				err = werr
			}
		}
	}
	tracePath := ""
	if tw != nil {
		pid := 0
		if res != nil {
			pid = res.PID
		}
		if cerr := tw.finish(res != nil, pid); cerr != nil && err == nil {
			err = cerr
		}
		tracePath = tw.kept()
	}
	if err != nil {
		return nil, nil, err
	}
	var textOut io.Writer = stderr
	textFile, jsonFile, err := outs.files(res.PID)
	if err != nil {
		return nil, nil, err
	}
	if textFile != nil {
		textOut = textFile
	}
	sym.ready()
	own := unmeasured(res.Session)
	own = append(own, untracedFamilies(res.Session)...)
	res.Warnings = append(res.Warnings, own...)
	ropts := o.reportOptions(sym, supp)
	ropts.TracePath, ropts.Rank = tracePath, outs.rank
	ropts.Elapsed, ropts.TicksPerSec = res.Elapsed, res.TicksPerSec
	ropts.Warnings = append(res.Warnings, late.early...)
	rep := late.to(report.New(res.Session, res.Main, ropts))
	// A trace cut by a full disk: the report, from memory, still covers
	// the whole run.
	seconds := func(uint64) float64 { return 0 }
	if res.Main >= 0 && int(res.Main) < len(res.Session.Procs) && res.Session.Procs[res.Main] != nil {
		main := res.Session.Procs[res.Main]
		seconds = func(ticks uint64) float64 { return rep.Seconds(main, ticks) }
	}
	cut := tw.cutWarning(seconds)
	if cut != "" {
		rep.Warn(cut)
	}
	rr := &runReport{leakedBlocks: rep.LeakedBlocks(), unmeasured: res.NoAgent || len(own) > 0}
	rr.failing, _, _ = rep.Failing(checkKinds)
	if baseline != nil {
		rr.failing = rep.FailingNotIn(baseline, checkKinds)
	}
	if err := writeReports(rep, jsonFile, textOut, o.quiet && len(res.Warnings) == 0 && cut == ""); err != nil {
		return nil, nil, err
	}
	if baseline != nil && !(o.quiet && !rr.leaked() && len(res.Warnings) == 0) {
		if err := rep.BaselineNote(textOut, baseline, checkKinds); err != nil {
			return nil, nil, fmt.Errorf("report: %w", err)
		}
	}
	if genFormat != "" {
		path := o.genSupp.named.expand(outs.pid, outs.rank) // the pid the other files were named with
		if err := o.genSupp.write(rep, path, genFormat, checkKinds, o.argv, stderr); err != nil {
			return nil, nil, err
		}
	}
	asked.write(textOut)
	if use != nil {
		if err := use.finish(rep, textOut, res.PID, outs.rank); err != nil {
			return nil, nil, err
		}
	}
	if ui != nil {
		if err := ui.finish(rep, res.TicksPerSec, filepath.Base(o.argv[0]), stderr); err != nil {
			return nil, nil, fmt.Errorf("--ui: %w", err)
		}
	}
	return res, rr, nil
}

// collectOptions are the collector's options that the recording flags of
// run and attach stand for; the caller adds the program, its signals and
// what only it has. With --types it makes sym read types too.
func (o *runOptions) collectOptions(agent string, sym *symbolizer, stderr io.Writer) collect.Options {
	if o.types {
		sym.types = dwarftypes.NewReader(sym.s) // before the warm-up reads it
	}
	copts := collect.Options{
		Agent: agent,
		Region: region.Options{
			RingSize:   o.ringKiB << 10,
			MaxDepth:   o.maxDepth,
			FreeStacks: o.freeStacks,
			Fold:       o.fold,
			// Root causes need the stacks of every free.
			FoldFreeStacks: o.rootCause.Enabled,
			HoldExit:       o.scan,
			// Root causes compare pending allocations' times with
			// their windows.
			ExactTimes:    o.rootCause.Enabled || clock.ExactPending(o.timeRes),
			AllocFamilies: strings.Join(o.allocFamilies, ","),
		},
		StaleEpoch:  staleEpoch(&o.stale),
		RootCause:   o.rootCause,
		MemoryLimit: uint64(o.maxMemMiB) << 20,
		Logf:        logTo(stderr),
		Warm:        sym.warmUp(),
	}
	if o.stale.on {
		copts.Region.StaleSlots, copts.Region.StaleSample = o.stale.slots, o.stale.sample
	}
	if o.types {
		copts.Types = &collect.TypeOptions{Symbols: sym.s, DWARF: sym.types}
	}
	return copts
}

// reportOptions are the report options that the flags of run and attach
// stand for, the same for the final report and the snapshots; the caller
// adds the times, warnings and trace.
func (o *runOptions) reportOptions(sym *symbolizer, supp *suppress.Set) report.Options {
	return o.leaks.own.with(report.Options{
		Symbolize:     sym.lookup,
		SymbolName:    sym.symbolName,
		Suppressions:  supp,
		ShowReachable: o.leaks.showReachable,
		StaleT1:       uint32(o.stale.t1),
		StaleT2:       uint32(o.stale.t2),
		PathToRoot:    o.leaks.pathToRoot,
	})
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

// readBaseline reads the --baseline report (nil: none given).
func readBaseline(path string, check bool) (*report.Baseline, error) {
	if path == "" {
		return nil, nil
	}
	if !check {
		return nil, fmt.Errorf("--baseline works with --check (it chooses the leaks --check fails on)")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	defer f.Close()
	d, err := report.ReadDoc(bufio.NewReader(f), path)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	b := report.NewBaseline(d)
	debugf("baseline %s: %d leak sites", path, b.Sites())
	return b, nil
}

// checkRecording checks the flags that shape the recording and returns
// the agent to record with.
func (o *runOptions) checkRecording() (string, error) {
	agent, err := launch.FindAgent(o.agent)
	if err != nil {
		return "", err
	}
	if o.maxDepth < 1 || o.maxDepth > 128 {
		return "", fmt.Errorf("--max-depth %d: want 1 to 128", o.maxDepth)
	}
	if o.maxMemMiB < 0 {
		return "", fmt.Errorf("--max-memory %d: want a number of MiB, or 0 for the default", o.maxMemMiB)
	}
	if o.ringKiB < 4 || o.ringKiB&(o.ringKiB-1) != 0 {
		return "", fmt.Errorf("--ring-size %d: want a power of two, at least 4", o.ringKiB)
	}
	return agent, nil
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

func hostname() string {
	h, _ := os.Hostname()
	return strings.TrimSpace(h)
}
