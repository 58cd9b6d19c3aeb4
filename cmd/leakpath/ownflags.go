package main

import (
	"flag"
	"fmt"

	"github.com/leakpath/leakpath/internal/session"
)

// stringList is a repeatable flag, each use one value (a glob may hold a
// comma).
type stringList []string

func (l *stringList) String() string { return fmt.Sprint(*l) }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// addOwnFlags adds the flags that tell the user's code from libraries
// (docs/own-code.md), shared by the commands that report leaks.
func addOwnFlags(fs *flag.FlagSet, o *session.OwnOptions) {
	fs.Var((*stringList)(&o.Patterns), "own", "count the modules matching `PATTERN` as your code (a glob on the module's path, or on its base name if it has no '/'; repeatable); "+
		"besides, the executable, modules under the current directory and modules with their own debug information are")
	fs.BoolVar(&o.ShowLibrary, "show-library-leaks", false, "list the leaks allocated in libraries in full in the text report, after yours (default: one line per library)")
	fs.StringVar(&o.CheckScope, "check-scope", "all", "which leaks --check counts: `all` (yours and the libraries', as LeakSanitizer and valgrind count) or own (those allocated in your code)")
}
