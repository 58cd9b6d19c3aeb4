package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/suppress"
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
	fs.Var(&o.suppressions, "suppressions", "hide leaks matching LeakSanitizer suppressions in `FILE` (leak:PATTERN lines; repeatable); the program's __lsan_default_suppressions are applied too")
	fs.BoolVar(&o.showReachable, "show-reachable", false, "list still reachable blocks in the text report too (the JSON always has them)")
	fs.StringVar(&o.pathToRoot, "path-to-root", "", "with a typed scan (run --types), show how the largest instance of `TYPE` (qualified, e.g. shop::Widget, or its last part) is held: the chain of fields from a global, a stack or registers")
	addOwnFlags(fs, &o.own)
	fs.StringVar(&o.checkKinds, "check-kinds", "definite,possible", "leak `KINDS` that make --check fail (comma-separated: definite, indirect, possible, reachable; unclassified blocks count as definite)")
}

// suppressionSet reads the --suppressions files.
func (o *leakOptions) suppressionSet() (*suppress.Set, error) {
	if len(o.suppressions) == 0 {
		return nil, nil
	}
	set := &suppress.Set{}
	for _, path := range o.suppressions {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--suppressions: %w", err)
		}
		s, err := suppress.Parse(b, path)
		if err != nil {
			return nil, fmt.Errorf("--suppressions: %w", err)
		}
		set.Add(s)
	}
	return set, nil
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
