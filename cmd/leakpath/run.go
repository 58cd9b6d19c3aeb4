package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leakpath/leakpath/internal/session"
)

// defaultTimeRes is how finely a trace keeps times unless told: 4 ms, a
// usual kernel tick (the coarse clock's: no finer than that, the agent
// dates what it keeps pending by the collector's millisecond clock), finer
// than heaptrack's 10 ms.
const defaultTimeRes = 4 * time.Millisecond

// runOptions are run's flags: the session's options, and the exit codes
// of --check, which main chooses.
type runOptions struct {
	s         session.Options
	checkCode int
	// checkUnmeasured is the exit code of --check when the program was
	// not measured (session.Result.Unmeasured).
	checkUnmeasured int
}

// addRecordFlags defines the flags run and attach share: where the
// results go and how the agent records.
func addRecordFlags(fs *flag.FlagSet, o *session.Options) {
	fs.StringVar(&o.Trace, "o", "", "keep the trace in `FILE` (.lpt), for 'leakpath report' later")
	fs.StringVar(&o.JSON, "json", "", "also write the report as JSON (leakpath.report/v1) to `FILE`")
	fs.StringVar(&o.Report, "report", "", "write the text report to `FILE` instead of stderr")
	fs.BoolVar(&o.FreeStacks, "free-stacks", true, "record the call stack of frees too (improper uses show it; a free that folds records none unless run --root-cause)")
	fs.BoolVar(&o.Fold, "fold", true, "count short-lived blocks a thread frees soon (its latest 256 allocations) per site instead of one by one: much faster; the peak counts them too (with threads it may be a little low)")
	fs.DurationVar(&o.TimeRes, "time-resolution", defaultTimeRes, "keep the trace's times to `DURATION` (a power of two of clock ticks at most that; allocations the agent keeps pending are dated to about a millisecond when DURATION is no finer than the system's coarse clock tick): exact times are most of a trace's size; 0 keeps them exact (the default with run --per-call)")
	fs.IntVar(&o.MaxDepth, "max-depth", 64, "record at most `N` frames per stack (1-128)")
	fs.StringVar(&o.Agent, "agent", "", "the agent library `PATH` (default: libleakpath.so beside the leakpath binary, or $LEAKPATH_AGENT)")
	fs.Var((*commaList)(&o.DebugDirs), "debug-dir", "look for separate debug files under `DIR` too (repeatable; /usr/lib/debug is always searched)")
	fs.IntVar(&o.RingKiB, "ring-size", 256, "per-thread buffer shared with the collector, in `KiB` (a power of two; the first two threads' are four times that)")
	fs.IntVar(&o.MaxMemMiB, "max-memory", 0, "stop recording (with a warning; the program runs on) when the collector's live heap passes `MiB` (0: half the machine's memory, or its control group's)")
	fs.BoolVar(&o.Quiet, "quiet", false, "print no report when nothing leaked and nothing went wrong")
}

func runFlags(o *runOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(out)
	s := &o.s
	addRecordFlags(fs, s)
	fs.BoolVar(&s.Check, "check", false, "exit with --check-exit-code when leaks of --check-kinds remain after suppressions (for CI)")
	fs.BoolVar(&s.Scan, "scan", true, "at exit, hold the program while its memory is scanned (stopped with ptrace, unless it ends with one thread) to tell definite, indirect, possible leaks from reachable blocks")
	fs.BoolVar(&s.Types, "types", false, "at every scan (exit, snapshots), also give the live blocks their types (a vtable in the first word, the DWARF types of the globals and fields that point at them), follow who holds whom, and report the type table, retained sizes and --path-to-root")
	addLeakFlags(fs, &s.Leaks)
	fs.BoolVar(&s.RootCause.Enabled, "root-cause", false, "find why growing sites leak: trace the thread that allocates at one (ptrace, that thread only, a window at a time) and report the function and branch where freed and leaked executions part (sets --fold=false unless given)")
	fs.Var((*rootCauseAfter)(&s.RootCause), "root-cause-after", "with --root-cause, judge sites only after `DURATION` (skip the start-up), or only once 'leakpath root-cause PID' asks (request)")
	fs.IntVar(&s.RootCause.MaxSites, "root-cause-sites", 4, "with --root-cause, trace at most `N` sites at once")
	fs.DurationVar(&s.RootCause.Budget, "root-cause-budget", 0, "with --root-cause, give up on a site after `DURATION` of tracing (default 10s; 30s where hardware breakpoints do not fire)")
	fs.Float64Var(&s.RootCause.MaxSlowdown, "root-cause-slowdown", 1.25, "with --root-cause, pace the tracing so that the traced threads run at least 1/`F` of their speed (F > 1)")
	addStaleFlags(fs, &s.Stale, true)
	fs.IntVar(&o.checkCode, "check-exit-code", exitLeaks, "exit `code` of --check when leaks remain")
	fs.IntVar(&o.checkUnmeasured, "check-unmeasured-exit-code", exitUnmeasured, "exit `code` of --check when no leak was found but the program was not measured: it did not load the agent (statically linked, setuid) or its executable defines its own malloc")
	addGenSuppFlags(fs, &s.GenSupp)
	fs.StringVar(&s.Baseline, "baseline", "", "with --check, fail only on leak sites not in `REPORT.json` (the --json report of an earlier run; sites compare by symbolized stack, as leakpath diff does) and list them")
	fs.Var((*stringList)(&s.AllocFamilies), "alloc-family", "trace the allocator functions `PREFIX`malloc, PREFIXfree, PREFIXcalloc, PREFIXrealloc (and the aligned ones) too, by patching their entries at the start (repeatable; je_, _rjem_, mi_, rp and tc_ are always looked for; see docs/allocators.md)")
	fs.BoolVar(&s.FollowFork, "follow-fork", true, "record fork children as processes of their own")
	fs.StringVar(&s.SnapshotDir, "snapshot-dir", ".", "write the snapshots and leak checks the program asks for (leakpath_snapshot, leakpath_leak_check) to `DIR`, as leakpath.snapshot.PID.N.json")
	addUsageFlags(fs, &s.Usage, true)
	fs.BoolVar(&s.UI, "ui", false, "serve a live view of the program (the page of 'leakpath ui') on 127.0.0.1, its address (with its access token) on stderr;\n"+
		"at the end, the whole report there until Ctrl-C")
	fs.StringVar(&s.UIListen, "ui-listen", "127.0.0.1:0", "with --ui, serve on `ADDR` (host:port)")
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
