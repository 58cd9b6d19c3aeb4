package main

import (
	"flag"

	"github.com/leakpath/leakpath/internal/session"
)

// addLeakFlags adds the flags about leak kinds and suppressions, shared by
// the commands that report leaks.
func addLeakFlags(fs *flag.FlagSet, o *session.LeakOptions) {
	fs.Var((*commaList)(&o.Suppressions), "suppressions", "hide leaks matching the suppressions in `FILE`: LeakSanitizer's (leak:PATTERN lines) or valgrind's ({ ... Memcheck:Leak ... } entries), told apart per file; repeatable; the program's __lsan_default_suppressions are applied too")
	fs.BoolVar(&o.ShowReachable, "show-reachable", false, "list still reachable blocks in the text report too (the JSON always has them)")
	fs.StringVar(&o.PathToRoot, "path-to-root", "", "with a typed scan (run --types), show how the largest instance of `TYPE` (qualified, e.g. shop::Widget, or its last part) is held: the chain of fields from a global, a stack or registers")
	addOwnFlags(fs, &o.Own)
	fs.StringVar(&o.CheckKinds, "check-kinds", "definite,possible", "leak `KINDS` that make --check fail (comma-separated: definite, indirect, possible, reachable; unclassified blocks count as definite)")
}

// addGenSuppFlags adds --gen-suppressions and its format, of run and
// report.
func addGenSuppFlags(fs *flag.FlagSet, o *session.GenSuppOptions) {
	fs.StringVar(&o.Path, "gen-suppressions", "", "write to `FILE` suppressions that hide the leaks of --check-kinds that no suppression hid (pass it to --suppressions so that --check passes): LeakSanitizer's format, or valgrind's for a name ending in .supp (run: %p and %r as in -o)")
	fs.StringVar(&o.Format, "gen-suppressions-format", "", "the `FORMAT` of --gen-suppressions: lsan or valgrind (default: by the file name)")
}
