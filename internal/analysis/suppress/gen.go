package suppress

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// The formats Write writes.
const (
	FormatLSan     = "lsan"
	FormatValgrind = "valgrind"
)

// GenNumCallers is how many frames a generated valgrind entry has at most,
// the allocation function's included: valgrind's default --num-callers,
// beyond which valgrind ignores an entry's lines.
const GenNumCallers = 12

// maxGenName bounds a name written into a generated file.
const maxGenName = 4096

// GenLeak is a leak group to write a suppression for. Its Stack should
// have Mangled names for the valgrind format.
type GenLeak struct {
	Leak
	Bytes, Blocks uint64
}

// Write writes a suppression file in format FormatLSan or FormatValgrind
// that hides leaks when read back with ParseFile, each line of the file
// preceded by comments naming the leaks it hides. header, if not empty, is
// written first as comment lines. It returns how many suppressions it
// wrote (leaks with equal suppressions share one) and how many leaks it
// could not write one for (they are named in comments): in the LSan
// format, reachable leaks (LSan never hides them) and leaks without a
// named frame.
//
// The LSan format can name one function, file or module per suppression,
// matched in any frame: each leak gets "leak:^F$" for F the function of
// its innermost frame in the program's own code (a module outside the
// system's library directories), else of its innermost named frame. Such a
// line also hides other leaks whose stacks pass through F. The valgrind
// format names the whole stack (up to GenNumCallers frames, up to main) and
// the leak kind, as valgrind --gen-suppressions=all does.
func Write(w io.Writer, format string, leaks []GenLeak, header string) (written, unhidden int, err error) {
	bw := bufio.NewWriter(w)
	for _, l := range strings.Split(header, "\n") {
		if l != "" {
			fmt.Fprintf(bw, "# %s\n", clean(l, '?'))
		}
	}
	switch format {
	case FormatLSan:
		written, unhidden = writeLSan(bw, leaks)
	case FormatValgrind:
		written = writeValgrind(bw, leaks)
	default:
		return 0, 0, fmt.Errorf("suppression format %q: want %s or %s", format, FormatLSan, FormatValgrind)
	}
	return written, unhidden, bw.Flush()
}

// describe is the comment line about one leak.
func describe(l GenLeak) string {
	kind := l.Kind
	if kind == "" {
		kind = "unclassified"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d B in %d block", l.Bytes, l.Blocks)
	if l.Blocks != 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " (%s)", kind)
	if l.Alloc != "" {
		fmt.Fprintf(&b, " from %s", l.Alloc)
	}
	for i, f := range l.Stack {
		if i == 3 {
			b.WriteString(" < ...")
			break
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(" < ")
		}
		b.WriteString(frameName(f))
	}
	return clean(b.String(), '?')
}

func frameName(f Frame) string {
	s := f.Function
	switch {
	case s == "" && f.Module == "":
		s = "?? in " + UnknownModule // path.Base would say "."
	case s == "":
		s = "?? in " + path.Base(f.Module)
	}
	if f.File != "" && f.Line > 0 {
		s += fmt.Sprintf(" (%s:%d)", path.Base(f.File), f.Line)
	}
	return s
}

// isSystemModule reports whether a module path is in the system's library
// directories: code the program uses, not its own.
func isSystemModule(m string) bool {
	for _, dir := range []string{"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/", "/usr/local/lib/"} {
		if strings.HasPrefix(m, dir) {
			return true
		}
	}
	return false
}

// lsanPattern returns the LSan template for leak l, "" if none can name it.
func lsanPattern(l GenLeak) string {
	pick := func(own bool) string {
		for _, f := range l.Stack {
			if f.Function != "" && (!own || f.Module != "" && !isSystemModule(f.Module)) {
				// '$' would end the template: '*' matches it.
				return "^" + strings.ReplaceAll(clean(f.Function, '*'), "$", "*") + "$"
			}
		}
		return ""
	}
	if p := pick(true); p != "" {
		return p
	}
	if p := pick(false); p != "" {
		return p
	}
	for _, f := range l.Stack {
		if f.Module != "" {
			return "^" + strings.ReplaceAll(clean(f.Module, '*'), "$", "*") + "$"
		}
	}
	return ""
}

func writeLSan(w *bufio.Writer, leaks []GenLeak) (written, unhidden int) {
	type entry struct {
		pattern string
		about   []string
	}
	var order []*entry
	byPattern := map[string]*entry{}
	var unnamed, reachable []string
	for _, l := range leaks {
		if l.Kind == "reachable" {
			reachable = append(reachable, describe(l))
			continue
		}
		p := lsanPattern(l)
		if p == "" {
			unnamed = append(unnamed, describe(l))
			continue
		}
		e := byPattern[p]
		if e == nil {
			e = &entry{pattern: p}
			byPattern[p] = e
			order = append(order, e)
		}
		e.about = append(e.about, describe(l))
	}
	for _, e := range order {
		fmt.Fprintln(w)
		for _, a := range e.about {
			fmt.Fprintf(w, "# %s\n", a)
		}
		if e.pattern == "^main$" {
			fmt.Fprintln(w, "# (LeakSanitizer's format matches a function in any frame: this line hides every leak allocated under main)")
		}
		fmt.Fprintf(w, "%s:%s\n", TypeLeak, e.pattern)
	}
	for _, a := range unnamed {
		fmt.Fprintf(w, "\n# not suppressed, no frame has a name: %s\n", a)
	}
	for _, a := range reachable {
		fmt.Fprintf(w, "\n# not suppressed, LeakSanitizer's format never hides reachable blocks (the valgrind format does): %s\n", a)
	}
	return len(order), len(unnamed) + len(reachable)
}

// valgrindLines returns the frame lines of l's valgrind entry.
func valgrindLines(l GenLeak) []string {
	var out []string
	for _, f := range valgrindFrames(l.Leak) {
		if len(out) == GenNumCallers {
			break
		}
		name := ValgrindName(f)
		switch {
		case f.Unloaded:
			out = append(out, "obj:*") // as valgrind writes it
		case name != "":
			out = append(out, "fun:"+clean(name, '?'))
		case f.ModuleFile != "":
			out = append(out, "obj:"+clean(f.ModuleFile, '?')) // as valgrind names it
		case f.Module != "":
			out = append(out, "obj:"+clean(f.Module, '?'))
		default:
			out = append(out, "obj:*")
		}
		// valgrind's stacks stop at main (--show-below-main=no).
		if name == "main" || name == BelowMain {
			break
		}
	}
	return out
}

func writeValgrind(w *bufio.Writer, leaks []GenLeak) int {
	type entry struct {
		name  string
		kinds []string // nil: any kind
		any   bool
		lines []string
		about []string
	}
	var order []*entry
	byLines := map[string]*entry{}
	for _, l := range leaks {
		lines := valgrindLines(l)
		if len(lines) == 0 {
			continue
		}
		key := strings.Join(lines, "\n")
		e := byLines[key]
		if e == nil {
			name := "leakpath"
			if len(l.Stack) > 0 && l.Stack[0].Function != "" {
				name += " " + clean(l.Stack[0].Function, '?')
			}
			e = &entry{name: name, lines: lines}
			byLines[key] = e
			order = append(order, e)
		}
		switch {
		case l.Kind == "":
			e.any = true
		case !contains(e.kinds, l.Kind):
			e.kinds = append(e.kinds, l.Kind)
		}
		e.about = append(e.about, describe(l))
	}
	for _, e := range order {
		fmt.Fprintln(w)
		for _, a := range e.about {
			fmt.Fprintf(w, "# %s\n", a)
		}
		fmt.Fprintf(w, "{\n   %s\n   Memcheck:Leak\n", e.name)
		if !e.any {
			fmt.Fprintf(w, "   match-leak-kinds: %s\n", strings.Join(e.kinds, ","))
		}
		for _, l := range e.lines {
			fmt.Fprintf(w, "   %s\n", l)
		}
		fmt.Fprintln(w, "}")
	}
	return len(order)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clean makes a name from the program (its symbols and paths are
// untrusted) safe on one line of a suppression file: control bytes become
// wild, a leading or trailing blank (which the parsers trim) too, and a
// name beyond maxGenName bytes ends in wild.
func clean(s string, wild byte) string {
	if len(s) > maxGenName {
		s = s[:maxGenName-1] + string(wild)
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = wild
		}
	}
	if n := len(b); n > 0 && (b[n-1] == ' ' || b[n-1] == '\t') {
		b[n-1] = wild
	}
	if len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b[0] = wild
	}
	return string(b)
}
