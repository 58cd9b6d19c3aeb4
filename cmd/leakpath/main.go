// Command leakpath finds memory leaks in native Linux programs: it runs a
// program with its agent preloaded, records every heap allocation and free
// with its call stack, and reports what was not freed, where it was
// allocated, and improper uses of the allocator.
//
// This file is the only place that prints errors and chooses exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/session"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// Exit codes of leakpath itself (the program's own code passes through).
const (
	exitUsage = 2
	// exitLeaks is the default code of --check when leaks remain, like
	// LeakSanitizer's default exitcode=23.
	exitLeaks = 23
	// exitUnmeasured is the default code of --check when nothing or not
	// all was measured (session.Result.Unmeasured): neither leakpath's
	// other codes nor a usual program's.
	exitUnmeasured = 24
)

const usage = `leakpath finds memory leaks in native Linux programs.

Usage:
  leakpath run [flags] -- PROGRAM [ARGS...]   run PROGRAM and report its leaks at exit
  leakpath report [flags] TRACE.lpt...       report from traces kept with run -o
  leakpath attach [flags] PID                record a program that runs already, until detach
  leakpath detach [flags] PID                end an attach: the program runs on, the report is written
  leakpath snapshot [flags] PID              snapshot the live blocks of a program under run or attach
  leakpath diff [flags] A B                  what grew from A to B (snapshots, reports, traces)
  leakpath root-cause [flags] PID            start root-cause tracing of a program under
                                             run --root-cause --root-cause-after=request
  leakpath ui [flags] TRACE.lpt              explore a trace in a web browser
  leakpath version                           print the version
  leakpath help [COMMAND]                    show help

Run 'leakpath help COMMAND' for a command's flags.
`

func main() {
	delayFirstGC()
	stop := profile()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// profile starts the CPU profile named by $LEAKPATH_CPUPROFILE and arms the
// heap profile named by $LEAKPATH_MEMPROFILE: for working on leakpath's own
// speed (see bench/ and docs/security.md). The files are created as every
// output is (session.CreateOutput: no symbolic link followed); one that cannot be
// is said on stderr, and the command runs on.
func profile() (stop func()) {
	var f *os.File
	if path := os.Getenv("LEAKPATH_CPUPROFILE"); path != "" {
		var err error
		if f, err = session.CreateOutput(path); err != nil {
			fail(os.Stderr, fmt.Errorf("LEAKPATH_CPUPROFILE: %w", err))
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fail(os.Stderr, fmt.Errorf("LEAKPATH_CPUPROFILE: %w", err))
		}
	}
	return func() {
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
		if path := os.Getenv("LEAKPATH_MEMPROFILE"); path != "" {
			m, err := session.CreateOutput(path)
			if err == nil {
				err = pprof.WriteHeapProfile(m)
				if cerr := m.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fail(os.Stderr, fmt.Errorf("LEAKPATH_MEMPROFILE: %w", err))
			}
		}
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "snapshot":
		return cmdSnapshot(args[1:], stdout, stderr)
	case "attach":
		return cmdAttach(args[1:], stdout, stderr)
	case "detach":
		return cmdDetach(args[1:], stdout, stderr)
	case "diff":
		return cmdDiff(args[1:], stdout, stderr)
	case "root-cause":
		return cmdRootCause(args[1:], stdout, stderr)
	case "ui":
		return cmdUI(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "leakpath %s\n", version)
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			switch args[1] {
			case "run":
				runFlags(new(runOptions), stdout).Usage()
				return 0
			case "report":
				reportFlags(new(session.ReplayOptions), stdout).Usage()
				return 0
			case "snapshot":
				snapshotFlags(new(snapshotOptions), stdout).Usage()
				return 0
			case "attach":
				attachFlags(new(session.Options), stdout).Usage()
				return 0
			case "detach":
				detachRequest.flags(new(time.Duration), stdout).Usage()
				return 0
			case "diff":
				diffFlags(new(session.ReplayOptions), stdout).Usage()
				return 0
			case "root-cause":
				rootCauseRequest.flags(new(time.Duration), stdout).Usage()
				return 0
			case "ui":
				uiFlags(new(session.ReplayOptions), stdout).Usage()
				return 0
			}
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "leakpath: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// fail prints err the way leakpath prints every error.
func fail(stderr io.Writer, err error) {
	// An error may quote the target's names or a collector's answer.
	fmt.Fprintf(stderr, "leakpath: %s\n", termsafe.Text(err.Error()))
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	fs := runFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	s := &o.s
	s.Argv, s.Tool = fs.Args(), "leakpath "+version
	if (s.Usage.PerCall || s.RootCause.Enabled) && !flagGiven(fs, "fold") {
		// Folded pairs carry no time of their own: counted one by one,
		// each lands in its invocation.
		s.Fold = false
	}
	if s.Usage.PerCall && !flagGiven(fs, "time-resolution") {
		s.TimeRes = 0 // so that `leakpath report --per-call` tells calls apart too
	}
	if !(s.RootCause.MaxSlowdown > 1) || math.IsInf(s.RootCause.MaxSlowdown, 0) {
		fmt.Fprintf(stderr, "leakpath run: --root-cause-slowdown %v: want a number above 1 (1.5: at most half again the time)\n", s.RootCause.MaxSlowdown)
		return exitUsage
	}
	if len(s.Argv) == 0 {
		fmt.Fprintln(stderr, "leakpath run: no program given (usage: leakpath run [flags] -- PROGRAM [ARGS...])")
		return exitUsage
	}
	if err := session.CheckOutputNames(s); err != nil {
		fmt.Fprintf(stderr, "leakpath run: %v\n", err)
		return exitUsage
	}
	if err := session.CheckAllocFamilies(s.AllocFamilies); err != nil {
		fmt.Fprintf(stderr, "leakpath run: %v\n", err)
		return exitUsage
	}
	res, err := session.Run(context.Background(), s, stderr)
	if err != nil {
		fail(stderr, err)
		var se *collect.StartError
		if errors.As(err, &se) {
			return se.Code
		}
		var ie *collect.InterruptedError
		if errors.As(err, &ie) {
			return ie.Code
		}
		return 1
	}
	code := res.ExitCode()
	switch {
	case !s.Check || !res.Exited:
		// A crash matters more than the leak count: 128+N.
	case res.Failing > 0:
		code = o.checkCode
	case res.Unmeasured:
		code = o.checkUnmeasured
	}
	return code
}

// parseFlags parses a command's flags; when it fails (or they asked for
// help), code is the exit code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return exitUsage, false
	}
	return 0, true
}

// flagGiven reports whether the flag name was on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// commaList is a flag that may be repeated or given as a comma list.
type commaList []string

func (c *commaList) String() string { return strings.Join(*c, ",") }
func (c *commaList) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			*c = append(*c, p)
		}
	}
	return nil
}
