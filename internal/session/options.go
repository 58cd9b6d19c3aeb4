package session

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/rootcause"
	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// Options are everything a recording is made of: the flags of `leakpath
// run` and `leakpath attach` (and of `leakpath snapshot`, which asks a
// recording for a report) fill them, and Prepare turns them into the
// collector's and the report's options. A field a command has no flag for
// keeps its zero value, which turns its feature off.
type Options struct {
	// Argv is the program Run starts; Attach takes a pid instead.
	Argv []string
	// Tool names leakpath in the trace and the files it generates
	// ("leakpath VERSION").
	Tool string

	// Where the results go (-o, --json, --report; %p and %r: see
	// outputs.go). Snapshot writes its JSON to JSON, as given.
	Trace, JSON, Report string
	// Quiet prints no report when nothing leaked and nothing went wrong.
	Quiet bool
	// SnapshotDir is where the snapshots and leak checks the program asks
	// for are written; "": they are answered, not written (attach).
	SnapshotDir string

	// How the agent records.
	Agent         string // "": launch.FindAgent's default
	DebugDirs     []string
	RingKiB       int
	MaxDepth      int
	MaxMemMiB     int
	FreeStacks    bool
	Fold          bool
	TimeRes       time.Duration
	FollowFork    bool     // Run's; Attach always follows forks
	AllocFamilies []string // --alloc-family prefixes

	// The analyses (see analyses.go).
	Scan      bool
	Types     bool
	RootCause rootcause.Options
	Stale     StaleOptions
	Usage     UsageOptions

	// The report and what --check fails on.
	Leaks    LeakOptions
	GenSupp  GenSuppOptions
	Check    bool
	Baseline string // a --json report of an earlier run

	// UI serves a live view on UIListen.
	UI       bool
	UIListen string

	// Attach's: how long the agent's loading keeps the other threads
	// stopped (Patience), and when to detach (For; 0: on `leakpath
	// detach PID`, SIGINT or SIGTERM).
	Patience time.Duration
	For      time.Duration
}

// LeakOptions are about leak kinds and suppressions, shared by the
// commands that report leaks.
type LeakOptions struct {
	Suppressions  []string // files
	ShowReachable bool
	CheckKinds    string // comma-separated
	PathToRoot    string
	Own           OwnOptions
}

// maxSuppressionFile bounds a --suppressions file (valgrind's
// default.supp is 40 kB).
const maxSuppressionFile = 64 << 20

// SuppressionSet reads the --suppressions files. With LEAKPATH_DEBUG set,
// it says on stderr what each valgrind file held.
func (o *LeakOptions) SuppressionSet() (*suppress.Set, error) {
	if len(o.Suppressions) == 0 {
		return nil, nil
	}
	set := &suppress.Set{}
	for _, path := range o.Suppressions {
		b, err := readBounded(path, maxSuppressionFile)
		if err != nil {
			return nil, fmt.Errorf("--suppressions: %w", err)
		}
		s, err := suppress.ParseFile(b, path)
		if err != nil {
			return nil, fmt.Errorf("--suppressions: %w", err)
		}
		if s.HasValgrind() || s.Ignored() > 0 {
			debugf("%s: valgrind format, %d Memcheck:Leak entries, %d entries of other kinds or tools ignored", path, s.Len(), s.Ignored())
		}
		set.Add(s)
	}
	return set, nil
}

// Kinds parses --check-kinds.
func (o *LeakOptions) Kinds() ([]event.LeakKind, error) {
	var out []event.LeakKind
	for _, name := range strings.Split(o.CheckKinds, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		k, ok := event.ParseLeakKind(name)
		if !ok || k == event.Unclassified {
			return nil, fmt.Errorf("--check-kinds: unknown kind %q (want definite, indirect, possible or reachable)", name)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--check-kinds: no kind given")
	}
	return out, nil
}

// debugf prints a debugging note on stderr when LEAKPATH_DEBUG is set.
func debugf(format string, args ...any) {
	if os.Getenv("LEAKPATH_DEBUG") == "" {
		return
	}
	fmt.Fprintf(os.Stderr, "leakpath: debug: %s\n", termsafe.Text(fmt.Sprintf(format, args...)))
}

// readBounded reads the file at path, of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, max>>20)
	}
	return b, nil
}

// OwnOptions tell the user's code from libraries (docs/own-code.md).
type OwnOptions struct {
	Patterns    []string // globs
	ShowLibrary bool
	CheckScope  string // all or own
}

// Check validates the options.
func (o *OwnOptions) Check() error {
	if o.CheckScope != "all" && o.CheckScope != "own" {
		return fmt.Errorf("--check-scope: %q is neither all nor own", o.CheckScope)
	}
	for _, p := range o.Patterns {
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("--own %q: %w", p, err)
		}
	}
	return nil
}

// With returns opts with the report options o stands for.
func (o *OwnOptions) With(opts report.Options) report.Options {
	own := &report.OwnCode{Patterns: o.Patterns, DebugInfo: symbolize.EmbeddedDWARF}
	if wd, err := os.Getwd(); err == nil {
		own.Dirs = []string{wd}
	}
	opts.Own = own
	opts.ShowLibraryLeaks = o.ShowLibrary
	opts.CheckOwnOnly = o.CheckScope == "own"
	return opts
}

// StaleOptions are those of the stale watch (--stale).
type StaleOptions struct {
	On            bool
	Epoch         time.Duration
	T1, T2        uint
	Sample, Slots int
}

// Check validates the options.
func (o *StaleOptions) Check() error {
	switch {
	case o.T2 <= o.T1:
		return fmt.Errorf("--stale-t2 %d: want more than --stale-t1 (%d)", o.T2, o.T1)
	case o.T2 > 1<<30:
		return fmt.Errorf("--stale-t2 %d: too large", o.T2)
	case !o.On:
		return nil
	case o.Epoch < 10*time.Millisecond:
		return fmt.Errorf("--stale-epoch %v: want at least 10ms", o.Epoch)
	case o.Sample < 1:
		return fmt.Errorf("--stale-sample %d: want at least 1", o.Sample)
	case o.Slots < 1 || o.Slots > 1<<20:
		return fmt.Errorf("--stale-slots %d: want 1 to %d", o.Slots, 1<<20)
	}
	return nil
}

// GenSuppOptions are --gen-suppressions and its format.
type GenSuppOptions struct {
	Path   string
	Format string
	named  pathPattern // Run's path: %p and %r name the pid and MPI rank
}

// Check checks the options and returns the format to write, before the
// run. With named, the path may hold %p and %r, as run's -o.
func (o *GenSuppOptions) Check(named bool) (string, error) {
	if o.Path == "" {
		if o.Format != "" {
			return "", fmt.Errorf("--gen-suppressions-format needs --gen-suppressions")
		}
		return "", nil
	}
	format := o.Format
	switch format {
	case suppress.FormatLSan, suppress.FormatValgrind:
	case "":
		format = suppress.FormatLSan
		if strings.HasSuffix(o.Path, ".supp") {
			format = suppress.FormatValgrind
		}
	default:
		return "", fmt.Errorf("--gen-suppressions-format %q: want lsan or valgrind", o.Format)
	}
	o.named = pathPattern{s: o.Path}
	if named {
		var err error
		if o.named, err = parsePattern("--gen-suppressions", o.Path); err != nil {
			return "", err
		}
	}
	if err := checkDir(o.named); err != nil {
		return "", fmt.Errorf("--gen-suppressions: %w", err)
	}
	return format, nil
}

// Write writes the suppressions of rep's leaks of kinds in format to
// path, and says on stderr how many; tool names leakpath in the header.
func (o *GenSuppOptions) Write(rep *report.Report, path, format string, kinds []event.LeakKind, command []string, tool string, stderr io.Writer) error {
	header := fmt.Sprintf("Suppressions for the leaks of: %s\nwritten by %s --gen-suppressions; kinds %s",
		strings.Join(command, " "), tool, kindNames(kinds))
	var groups, written, unhidden int
	var text bytes.Buffer
	err := WriteOutput(path, nil, func(w io.Writer) error {
		var err error
		groups, written, unhidden, err = rep.GenSuppressions(io.MultiWriter(w, &text), format, kinds, header)
		return err
	})
	if err != nil {
		return fmt.Errorf("--gen-suppressions: %w", err)
	}
	fmt.Fprintf(stderr, "leakpath: wrote %d %s suppressions for %d leak groups to %s\n", written, format, groups, termsafe.String(path))
	if unhidden > 0 {
		fmt.Fprintf(stderr, "leakpath: warning: %d leak groups are not suppressed there (reachable ones, or without a named frame: see the file's comments)\n", unhidden)
	}
	if format == suppress.FormatLSan && bytes.Contains(text.Bytes(), []byte("\nleak:^main$\n")) {
		// LSan's lines match any frame: a CI job that passes this file
		// would never fail again. Said where it is read, not only in it.
		fmt.Fprintf(stderr, "leakpath: warning: %s has leak:^main$ (a leak allocated in main itself), which hides every leak under main, new ones too; a name ending in .supp (valgrind's format) hides exactly this run's leaks\n", termsafe.String(path))
	}
	return nil
}

func kindNames(kinds []event.LeakKind) string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.String())
	}
	return strings.Join(out, ",")
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
