package suppress

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// TypeLeak is the only suppression type LeakSanitizer, and so leakpath,
// accepts in a suppression file.
const TypeLeak = "leak"

// Standard is the text of the suppressions LeakSanitizer always adds after
// the user's and the program's on x86-64 Linux: a leak of glibc's dynamic TLS
// (https://sourceware.org/bugzilla/show_bug.cgi?id=12650). Parse it with
// source StandardSource and Add it last to do as LSan does.
const Standard = "leak:*tls_get_addr*\n"

// StandardSource is the source name of Standard in errors and Suppression.
const StandardSource = "<LeakSanitizer standard suppressions>"

// UnknownModule is the string a frame without a module (Frame.Module "") is
// matched as, as LSan names a PC outside every known module.
const UnknownModule = "<unknown module>"

// Errors wrapped by *ParseError.
var (
	// ErrUnknownType is a line that is not blank, not a comment and does not
	// start with "leak:".
	ErrUnknownType = errors.New("unknown suppression type")
	// ErrEmptyPattern is a "leak:" line with nothing after the colon.
	ErrEmptyPattern = errors.New("empty pattern")
	// ErrNUL is a NUL byte in the text.
	ErrNUL = errors.New("NUL byte")
)

// ParseError is a line of suppressions that Parse rejects. Err is one of
// ErrUnknownType, ErrEmptyPattern and ErrNUL.
type ParseError struct {
	Source string // the source given to Parse
	Line   int    // 1-based line number
	Text   string // the line, trimmed
	Err    error
}

// Error returns "source:line: what (text)".
func (e *ParseError) Error() string {
	msg := e.Err.Error()
	switch {
	case errors.Is(e.Err, ErrUnknownType):
		msg += fmt.Sprintf(" in %q: LeakSanitizer accepts only %q", e.Text, TypeLeak+":PATTERN")
	case errors.Is(e.Err, ErrEmptyPattern):
		msg += ` after "leak:" (LeakSanitizer would suppress every leak)`
	case errors.Is(e.Err, ErrNUL):
		msg += " (LeakSanitizer would ignore the rest of the text)"
	}
	return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, msg)
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }

// Suppression is one TYPE:PATTERN line of LSan, or one Memcheck:Leak entry
// of a valgrind suppression file. Its hit counters are updated by Set.Hit
// and are safe for concurrent use.
type Suppression struct {
	Type string // TypeLeak, or TypeValgrind
	// Pattern is, for TypeLeak, the template as written after "leak:",
	// '^' and '$' included; for TypeValgrind the entry's name.
	Pattern string
	Source  string // the source given to Parse
	Line    int    // 1-based line number in Source (of a valgrind entry's '{')

	kinds uint8   // TypeValgrind: the leak kinds it matches (kind* bits)
	locs  []vgLoc // TypeValgrind: its frame lines

	count atomic.Uint64 // leaked blocks suppressed
	bytes atomic.Uint64 // their bytes
}

// String returns "TYPE:PATTERN"; for a valgrind entry "valgrind:NAME
// (SOURCE:LINE)", as valgrind's own generated entries all have one name.
func (s *Suppression) String() string {
	if s.Type == TypeValgrind {
		return fmt.Sprintf("%s:%s (%s:%d)", s.Type, s.Pattern, s.Source, s.Line)
	}
	return s.Type + ":" + s.Pattern
}

// Set is an ordered list of suppressions. The zero Set, and a nil *Set for
// Match and Used, is empty. A Set must not be changed (Add) while it is
// matched; Match and Hit may be called concurrently.
type Set struct {
	list    []*Suppression
	ignored int // valgrind entries of other kinds and tools, skipped
}

// ParseFile reads a suppression file in either format: valgrind's when its
// first line that is not blank and not a '#' comment is "{" (see
// parseValgrind), LeakSanitizer's otherwise (see Parse). Errors are
// *ParseError naming source and the line.
func ParseFile(text []byte, source string) (*Set, error) {
	if isValgrindText(text) {
		return parseValgrind(text, source)
	}
	return Parse(text, source)
}

// Parse reads suppressions from text (see the package documentation for the
// syntax). source names the text in errors and in the suppressions, e.g. the
// file's path or "__lsan_default_suppressions". On error it returns a nil
// Set and every rejected line, as *ParseError joined by errors.Join.
func Parse(text []byte, source string) (*Set, error) {
	set := &Set{}
	var errs []error
	for n := 1; len(text) > 0 || n == 1; n++ {
		var line []byte
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			line, text = text, nil
		}
		line = bytes.TrimRight(line, " \t\r")
		line = bytes.TrimLeft(line, " \t")
		if bytes.IndexByte(line, 0) >= 0 {
			errs = append(errs, &ParseError{source, n, string(line), ErrNUL})
			continue
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		pattern, ok := bytes.CutPrefix(line, []byte(TypeLeak+":"))
		switch {
		case !ok:
			errs = append(errs, &ParseError{source, n, string(line), ErrUnknownType})
		case len(pattern) == 0:
			errs = append(errs, &ParseError{source, n, string(line), ErrEmptyPattern})
		default:
			set.list = append(set.list, &Suppression{Type: TypeLeak, Pattern: string(pattern), Source: source, Line: n})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return set, nil
}

// Add appends copies of other's suppressions, hit counts included, after
// s's: they are tried after s's own. other (nil: none) is not changed.
// Combine as LSan does: the suppression file's set, Add the program's
// __lsan_default_suppressions, then Add Parse(Standard).
func (s *Set) Add(other *Set) {
	if other == nil {
		return
	}
	for _, o := range other.Suppressions() {
		c := &Suppression{Type: o.Type, Pattern: o.Pattern, Source: o.Source, Line: o.Line, kinds: o.kinds, locs: o.locs}
		c.count.Store(o.count.Load())
		c.bytes.Store(o.bytes.Load())
		s.list = append(s.list, c)
	}
	s.ignored += other.ignored
}

// Ignored returns how many entries of valgrind files s skipped: those of
// other error kinds than Memcheck:Leak and of other tools.
func (s *Set) Ignored() int {
	if s == nil {
		return 0
	}
	return s.ignored
}

// HasValgrind reports whether s has valgrind entries, which match the
// frames' mangled names (Frame.Mangled).
func (s *Set) HasValgrind() bool {
	if s == nil {
		return false
	}
	for _, sup := range s.list {
		if sup.Type == TypeValgrind {
			return true
		}
	}
	return false
}

// Len returns the number of suppressions in s (0 for nil).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}

// Suppressions returns s's suppressions in order (nil for nil or empty).
// The slice is a copy; the suppressions are s's own.
func (s *Set) Suppressions() []*Suppression {
	if s == nil || len(s.list) == 0 {
		return nil
	}
	return append([]*Suppression(nil), s.list...)
}

// Frame is what a suppression is matched against in one frame of a leak's
// allocation stack. An inlined function is a frame of its own, with the
// module of the code it was inlined into.
type Frame struct {
	// Function is the demangled function name as LSan's symbolizer prints
	// it, parameters included for C++ ("ns::Cls::f(int)"); "" if unknown,
	// then it matches nothing.
	Function string
	// File is the source file's path as in the debug information (absolute
	// when the compilation directory is known); "" if unknown, then it
	// matches nothing.
	File string
	// Module is the full path of the ELF file that contains the code, as
	// mapped ("/usr/lib/x86_64-linux-gnu/libc.so.6"), not its base name:
	// patterns match anywhere in it, so "libc.so" matches it, "^libc" does
	// not. "" if unknown: it is matched as UnknownModule.
	Module string
	// ModuleFile is Module with its symbolic links resolved, where that
	// differs ("/usr/lib/x86_64-linux-gnu/libhwloc.so.15.6.1" for the
	// soname libhwloc.so.15 a library was loaded by): valgrind's obj:
	// lines name that file, and match it too. "" if the same or unknown.
	ModuleFile string
	// Unloaded: the module was unloaded (dlclose) before the exit, when
	// valgrind names leaks; it then knows neither the function nor the
	// object ("???"), and writes obj:* for the frame.
	Unloaded bool
	// Mangled is the symbol-table name of the function ("_ZN4shop4Cart3addEi"),
	// which valgrind's fun: lines match; "" if unknown (an inlined frame:
	// fun: lines then match Function).
	Mangled string
	// SymbolName, if not nil, gives Mangled when it is "" and a fun: line
	// needs it: looking a name up can cost a module's symbols, and most
	// entries fail on the first frames.
	SymbolName func() string
	// Line is the source line (valgrind's src:FILE:LINE); 0 if unknown.
	Line int
	// Inlined: the function was inlined into the next frame's (valgrind
	// names it by its plain DWARF name).
	Inlined bool
}

// Leak is a leak group as MatchLeak matches it.
type Leak struct {
	// Stack is the allocation stack as leakpath shows it, innermost
	// first, from the caller of the allocation function.
	Stack []Frame
	// Alloc is the allocation function's symbol as valgrind names it
	// ("malloc", "calloc", "_Znwm" for operator new...): valgrind's stacks
	// start with it, so its suppressions start with a line for it. "":
	// unknown, the stack is matched alone.
	Alloc string
	// Kind is the leak kind: "definite", "indirect", "possible" or
	// "reachable"; "" when no scan told (matched as definite).
	Kind string
}

// MatchLeak returns the suppression, if any, that suppresses leak l: the
// LSan suppressions of s first, as Match decides (they never suppress
// reachable blocks, which LSan does not report), then the valgrind entries
// in s's order, the first whose kinds include l's and whose frame lines
// match the start of l's stack (valgrind's frames: the allocation function,
// then the stack).
func (s *Set) MatchLeak(l Leak) (*Suppression, bool) {
	if s == nil || len(s.list) == 0 {
		return nil, false
	}
	if l.Kind != "reachable" {
		if sup, ok := s.Match(l.Stack); ok {
			return sup, true
		}
	}
	var frames []Frame
	for _, sup := range s.list {
		if sup.Type != TypeValgrind {
			continue
		}
		if frames == nil {
			frames = valgrindFrames(l)
		}
		if sup.matchValgrind(l, frames) {
			return sup, true
		}
	}
	return nil, false
}

// Match returns the suppression, if any, that suppresses a leak allocated at
// stack (innermost frame first), as LSan decides it:
//
//   - the frames are tried in order, and the first frame with a match
//     decides;
//   - in a frame, the module is tried first, then the function, then the
//     file (LSan tries a code address's module once, then the function and
//     file of each of its inlined frames, innermost first: the same);
//   - each string is matched against the suppressions in s's order, and the
//     first that matches is returned.
//
// So the suppression returned is not the first of s that matches somewhere
// in the stack but the first that matches the first matching string.
//
// LSan's stacks start inside the allocator (its malloc interceptor, in the
// executable when the sanitizer runtime is linked statically, as clang does),
// so under LSan a pattern matching that frame, such as the executable's path
// or "malloc", suppresses every leak. Pass the stack as leakpath shows it,
// from the caller of the allocation function, to avoid this.
//
// Match ignores valgrind entries: see MatchLeak.
func (s *Set) Match(stack []Frame) (*Suppression, bool) {
	if s == nil || len(s.list) == 0 {
		return nil, false
	}
	for _, f := range stack {
		module := f.Module
		if module == "" {
			module = UnknownModule
		}
		for _, str := range [3]string{module, f.Function, f.File} {
			if sup := s.matchString(str); sup != nil {
				return sup, true
			}
		}
	}
	return nil, false
}

// matchString returns the first suppression of s whose pattern matches str,
// or nil.
func (s *Set) matchString(str string) *Suppression {
	if str == "" {
		return nil
	}
	for _, sup := range s.list {
		if sup.Type == TypeLeak && templateMatch(sup.Pattern, str) {
			return sup
		}
	}
	return nil
}

// Hit counts nblocks leaked blocks, of nbytes bytes in all, as suppressed by
// sup, which Match returned from s (a nil sup is ignored). Call it once per
// leak group (the blocks of one allocation stack) as LSan does: Used then
// shows blocks and bytes, not groups. Hit is safe for concurrent use.
func (s *Set) Hit(sup *Suppression, nbytes, nblocks uint64) {
	if sup == nil {
		return
	}
	sup.count.Add(nblocks)
	sup.bytes.Add(nbytes)
}

// Used is one line of LSan's "Suppressions used:" table.
type Used struct {
	Suppression *Suppression
	Pattern     string // Suppression.Pattern
	Count       uint64 // LSan's "count": leaked blocks suppressed
	Bytes       uint64 // LSan's "bytes": their bytes
}

// Used returns the suppressions of s that have a hit count (Count > 0), in
// s's order as LSan lists them (nil if none). LSan prints them as
//
//	Suppressions used:
//	  count      bytes template
//	      1        666 *LSanTestLeakingFunc*
//
// (fmt "%7d %10d %s").
func (s *Set) Used() []Used {
	if s == nil {
		return nil
	}
	var out []Used
	for _, sup := range s.list {
		if c := sup.count.Load(); c > 0 {
			out = append(out, Used{Suppression: sup, Pattern: sup.Pattern, Count: c, Bytes: sup.bytes.Load()})
		}
	}
	return out
}

// templateMatch reports whether str matches the LSan template templ (see the
// package documentation): '*' any sequence, a leading '^' and a '$' anchor,
// the pieces between stars found one after the other at their first
// occurrence, without backtracking. An empty str matches nothing.
func templateMatch(templ, str string) bool {
	if str == "" {
		return false
	}
	anchored := false // the next piece must start str
	if strings.HasPrefix(templ, "^") {
		anchored, templ = true, templ[1:]
	}
	star := false // the last thing read from templ was a '*'
	for templ != "" {
		switch templ[0] {
		case '*':
			templ = templ[1:]
			anchored, star = false, true
			continue
		case '$':
			return str == "" || star
		}
		n := strings.IndexAny(templ, "*$")
		if n < 0 {
			n = len(templ)
		}
		piece := templ[:n]
		templ = templ[n:]
		i := strings.Index(str, piece)
		if i < 0 || anchored && i != 0 {
			return false
		}
		str = str[i+len(piece):]
		anchored, star = false, false
	}
	return true
}
