package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/symbols/symbolize"
)

// ownOptions are the flags that tell the user's code from libraries
// (docs/own-code.md), shared by the commands that report leaks.
type ownOptions struct {
	patterns    stringList
	showLibrary bool
	checkScope  string
}

// stringList is a repeatable flag, each use one value (a glob may hold a
// comma).
type stringList []string

func (l *stringList) String() string { return fmt.Sprint(*l) }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

func addOwnFlags(fs *flag.FlagSet, o *ownOptions) {
	fs.Var(&o.patterns, "own", "count the modules matching `PATTERN` as your code (a glob on the module's path, or on its base name if it has no '/'; repeatable); "+
		"besides, the executable, modules under the current directory and modules with their own debug information are")
	fs.BoolVar(&o.showLibrary, "show-library-leaks", false, "list the leaks allocated in libraries in full in the text report, after yours (default: one line per library)")
	fs.StringVar(&o.checkScope, "check-scope", "all", "which leaks --check counts: `all` (yours and the libraries', as LeakSanitizer and valgrind count) or own (those allocated in your code)")
}

// check validates the flags.
func (o *ownOptions) check() error {
	if o.checkScope != "all" && o.checkScope != "own" {
		return fmt.Errorf("--check-scope: %q is neither all nor own", o.checkScope)
	}
	for _, p := range o.patterns {
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("--own %q: %w", p, err)
		}
	}
	return nil
}

// with returns opts with the report options the flags stand for.
func (o *ownOptions) with(opts report.Options) report.Options {
	own := &report.OwnCode{Patterns: o.patterns, DebugInfo: symbolize.EmbeddedDWARF}
	if wd, err := os.Getwd(); err == nil {
		own.Dirs = []string{wd}
	}
	opts.Own = own
	opts.ShowLibraryLeaks = o.showLibrary
	opts.CheckOwnOnly = o.checkScope == "own"
	return opts
}
