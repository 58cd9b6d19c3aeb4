package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/termsafe"
)

// leakOptions are the flags about leak kinds and suppressions, shared by
// run and report.
type leakOptions struct {
	suppressions  commaList
	showReachable bool
	checkKinds    string
	pathToRoot    string
	own           ownOptions
}

func addLeakFlags(fs *flag.FlagSet, o *leakOptions) {
	fs.Var(&o.suppressions, "suppressions", "hide leaks matching the suppressions in `FILE`: LeakSanitizer's (leak:PATTERN lines) or valgrind's ({ ... Memcheck:Leak ... } entries), told apart per file; repeatable; the program's __lsan_default_suppressions are applied too")
	fs.BoolVar(&o.showReachable, "show-reachable", false, "list still reachable blocks in the text report too (the JSON always has them)")
	fs.StringVar(&o.pathToRoot, "path-to-root", "", "with a typed scan (run --types), show how the largest instance of `TYPE` (qualified, e.g. shop::Widget, or its last part) is held: the chain of fields from a global, a stack or registers")
	addOwnFlags(fs, &o.own)
	fs.StringVar(&o.checkKinds, "check-kinds", "definite,possible", "leak `KINDS` that make --check fail (comma-separated: definite, indirect, possible, reachable; unclassified blocks count as definite)")
}

// maxSuppressionFile bounds a --suppressions file (valgrind's
// default.supp is 40 kB).
const maxSuppressionFile = 64 << 20

// suppressionSet reads the --suppressions files. With LEAKPATH_DEBUG set,
// it says on stderr what each valgrind file held.
func (o *leakOptions) suppressionSet() (*suppress.Set, error) {
	if len(o.suppressions) == 0 {
		return nil, nil
	}
	set := &suppress.Set{}
	for _, path := range o.suppressions {
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

// genSuppOptions are --gen-suppressions and its format, of run and
// report.
type genSuppOptions struct {
	path   string
	format string
	named  pathPattern // run's path: %p and %r name the pid and MPI rank
}

func addGenSuppFlags(fs *flag.FlagSet, o *genSuppOptions) {
	fs.StringVar(&o.path, "gen-suppressions", "", "write to `FILE` suppressions that hide the leaks of --check-kinds that no suppression hid (pass it to --suppressions so that --check passes): LeakSanitizer's format, or valgrind's for a name ending in .supp (run: %p and %r as in -o)")
	fs.StringVar(&o.format, "gen-suppressions-format", "", "the `FORMAT` of --gen-suppressions: lsan or valgrind (default: by the file name)")
}

// check checks the flags and returns the format to write, before the run.
// With named, the path may hold %p and %r, as run's -o.
func (o *genSuppOptions) check(named bool) (string, error) {
	if o.path == "" {
		if o.format != "" {
			return "", fmt.Errorf("--gen-suppressions-format needs --gen-suppressions")
		}
		return "", nil
	}
	format := o.format
	switch format {
	case suppress.FormatLSan, suppress.FormatValgrind:
	case "":
		format = suppress.FormatLSan
		if strings.HasSuffix(o.path, ".supp") {
			format = suppress.FormatValgrind
		}
	default:
		return "", fmt.Errorf("--gen-suppressions-format %q: want lsan or valgrind", o.format)
	}
	o.named = pathPattern{s: o.path}
	if named {
		var err error
		if o.named, err = parsePattern("--gen-suppressions", o.path); err != nil {
			return "", err
		}
	}
	if err := checkDir(o.named); err != nil {
		return "", fmt.Errorf("--gen-suppressions: %w", err)
	}
	return format, nil
}

// write writes the suppressions of rep's leaks of kinds in format to
// path, and says on stderr how many.
func (o *genSuppOptions) write(rep *report.Report, path, format string, kinds []event.LeakKind, command []string, stderr io.Writer) error {
	header := fmt.Sprintf("Suppressions for the leaks of: %s\nwritten by leakpath %s --gen-suppressions; kinds %s",
		strings.Join(command, " "), version, kindNames(kinds))
	var groups, written, unhidden int
	var text bytes.Buffer
	err := writeOutput(path, nil, func(w io.Writer) error {
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

// kinds parses --check-kinds.
func (o *leakOptions) kinds() ([]event.LeakKind, error) {
	var out []event.LeakKind
	for _, name := range strings.Split(o.checkKinds, ",") {
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
