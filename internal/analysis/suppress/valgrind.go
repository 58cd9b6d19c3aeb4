package suppress

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// TypeValgrind is the Type of a suppression read from a valgrind
// suppression file (a Memcheck:Leak entry); its Pattern is the entry's name.
const TypeValgrind = "valgrind"

// ValgrindAllocModule is the module the allocation function's frame is
// matched as in valgrind suppressions: memcheck's preloaded allocator, where
// valgrind's leak stacks start (obj:*vgpreload_memcheck* matches it).
const ValgrindAllocModule = "/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so"

// ErrValgrindSyntax is wrapped by the *ParseError of a malformed valgrind
// suppression file.
var ErrValgrindSyntax = errors.New("malformed valgrind suppression")

// maxValgrindLocs is how many location lines an entry may have: valgrind's
// own limit (VG_DEEPEST_BACKTRACE).
const maxValgrindLocs = 500

// The leak kinds of match-leak-kinds, as bits.
const (
	kindDefinite = 1 << iota
	kindIndirect
	kindPossible
	kindReachable
	kindAll = kindDefinite | kindIndirect | kindPossible | kindReachable
)

var kindBits = map[string]uint8{
	"definite": kindDefinite, "indirect": kindIndirect, "possible": kindPossible, "reachable": kindReachable,
}

// locKind is what a location line of a valgrind entry matches.
type locKind uint8

const (
	locFun locKind = iota // fun:NAME, the function's mangled name
	locObj                // obj:PATH, the module's path
	locSrc                // src:FILE or src:FILE:LINE
	locAny                // "...": zero or more frames
)

type vgLoc struct {
	kind locKind
	name string // the glob
	line int    // src: its line, 0: any
}

// isValgrindText reports whether text is a valgrind suppression file: its
// first line that is not blank and not a '#' comment is "{". LSan's lines
// never start so.
func isValgrindText(text []byte) bool {
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		return string(line) == "{"
	}
	return false
}

// parseValgrind reads a valgrind suppression file the way valgrind's
// m_errormgr.c does: entries "{", a name, "TOOLS:KIND", extra lines of the
// kind, location lines, "}", with blank and '#' lines skipped anywhere.
// Only Memcheck:Leak entries are kept; entries of other kinds or tools are
// skipped and counted in Set.ignored. Every malformed entry is an error.
func parseValgrind(text []byte, source string) (*Set, error) {
	set := &Set{}
	lines := bytes.Split(text, []byte{'\n'})
	n, last := 0, 0 // the index of the next line to read; the last line read
	// next returns the next line that is not blank and not a comment, and
	// its 1-based number; at the end of the text, ok is false and num the
	// last such line's.
	next := func() (line string, num int, ok bool) {
		for n < len(lines) {
			l := bytes.TrimSpace(lines[n])
			n++
			if len(l) == 0 || l[0] == '#' {
				continue
			}
			last = n
			return string(l), n, true
		}
		return "", last, false
	}
	bad := func(num int, text, msg string) error {
		return &ParseError{Source: source, Line: num, Text: text, Err: fmt.Errorf("%w: %s", ErrValgrindSyntax, msg)}
	}
	if bytes.IndexByte(text, 0) >= 0 {
		num := bytes.Count(text[:bytes.IndexByte(text, 0)], []byte{'\n'}) + 1
		return nil, &ParseError{Source: source, Line: num, Err: ErrNUL}
	}
	for {
		line, num, ok := next()
		if !ok {
			break
		}
		if line != "{" {
			return nil, bad(num, line, fmt.Sprintf("expected '{' or the end of the file, found %q", line))
		}
		start := num
		name, num, ok := next()
		if !ok || name == "}" {
			return nil, bad(num, name, "an entry has no name (the line after '{')")
		}
		kindLine, num, ok := next()
		if !ok {
			return nil, bad(num, "", "the file ends in the entry "+strconv.Quote(name)+" (expected TOOL:KIND)")
		}
		tools, kind, found := strings.Cut(kindLine, ":")
		if !found || kindLine == "}" {
			return nil, bad(num, kindLine, fmt.Sprintf("expected TOOL:KIND (e.g. Memcheck:Leak) after the name, found %q", kindLine))
		}
		if !hasTool(tools, "Memcheck") || kind != "Leak" {
			// Another tool's entry or another kind of error: skipped
			// up to its '}', as valgrind skips other tools' entries.
			for {
				l, num, ok := next()
				if !ok {
					return nil, bad(num, "", "the file ends in the entry "+strconv.Quote(name)+" (no '}')")
				}
				if l == "}" {
					break
				}
			}
			set.ignored++
			continue
		}
		sup := &Suppression{Type: TypeValgrind, Pattern: name, Source: source, Line: start, kinds: kindAll}
		line, num, ok = next()
		if ok {
			if rest, isKinds := strings.CutPrefix(line, "match-leak-kinds:"); isKinds {
				k, err := parseLeakKinds(rest)
				if err != nil {
					return nil, bad(num, line, err.Error())
				}
				sup.kinds = k
				line, num, ok = next()
			}
		}
		for {
			if !ok {
				return nil, bad(num, "", "the file ends in the entry "+strconv.Quote(name)+" (no '}')")
			}
			if line == "}" {
				break
			}
			if len(sup.locs) == maxValgrindLocs {
				return nil, bad(num, line, fmt.Sprintf("more than %d frames", maxValgrindLocs))
			}
			loc, err := parseLoc(line)
			if err != nil {
				return nil, bad(num, line, err.Error())
			}
			sup.locs = append(sup.locs, loc)
			line, num, ok = next()
		}
		if len(sup.locs) == 0 {
			return nil, bad(num, line, "the entry "+strconv.Quote(name)+" has no frame line")
		}
		onlyAny := true
		for _, l := range sup.locs {
			onlyAny = onlyAny && l.kind == locAny
		}
		if onlyAny {
			return nil, bad(num, line, "the entry "+strconv.Quote(name)+` has only "..." frame lines (it needs a fun:, obj: or src: line)`)
		}
		set.list = append(set.list, sup)
	}
	return set, nil
}

// hasTool reports whether the comma-separated tool list names tool.
func hasTool(list, tool string) bool {
	for _, t := range strings.Split(list, ",") {
		if strings.TrimSpace(t) == tool {
			return true
		}
	}
	return false
}

// parseLeakKinds parses the value of match-leak-kinds: a comma-separated
// list of definite, indirect, possible, reachable, or all, or none.
func parseLeakKinds(s string) (uint8, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "all":
		return kindAll, nil
	case "none":
		return 0, nil
	case "":
		return 0, fmt.Errorf("match-leak-kinds: no kind given")
	}
	var k uint8
	for _, name := range strings.Split(s, ",") {
		b, ok := kindBits[strings.TrimSpace(name)]
		if !ok {
			return 0, fmt.Errorf("match-leak-kinds: unknown kind %q (want definite, indirect, possible, reachable, all or none)", strings.TrimSpace(name))
		}
		k |= b
	}
	return k, nil
}

// parseLoc parses a location line: fun:NAME, obj:PATH, src:FILE[:LINE] or
// "...".
func parseLoc(line string) (vgLoc, error) {
	if line == "..." {
		return vgLoc{kind: locAny}, nil
	}
	for _, p := range []struct {
		prefix string
		kind   locKind
	}{{"fun:", locFun}, {"obj:", locObj}, {"src:", locSrc}} {
		name, ok := strings.CutPrefix(line, p.prefix)
		if !ok {
			continue
		}
		if name == "" {
			return vgLoc{}, fmt.Errorf("nothing after %q", p.prefix)
		}
		l := vgLoc{kind: p.kind, name: name}
		if p.kind == locSrc {
			if file, num, found := strings.Cut(name, ":"); found {
				n, err := strconv.Atoi(num)
				if err != nil || n <= 0 {
					return vgLoc{}, fmt.Errorf("src: line number %q is not a positive number", num)
				}
				l.name, l.line = file, n
			}
		}
		return l, nil
	}
	return vgLoc{}, fmt.Errorf(`a frame line must be "...", or start with "fun:", "obj:" or "src:" (found %q)`, line)
}

// belowMain are the functions that call main, which valgrind names
// "(below main)" in stacks and suppressions (m_debuginfo.c's
// VG_(get_fnname_kind)).
var belowMain = map[string]bool{
	"__libc_start_main": true, "__libc_start_call_main": true, "__libc_start_main_impl": true,
	"generic_start_main": true, "_dl_start_user": true, "__libc_start_main_alias_2": true,
}

// BelowMain is the name valgrind gives the functions that call main.
const BelowMain = "(below main)"

// ValgrindName returns the name a fun: line matches for frame f: its
// mangled name when known; for an inlined frame, the function's name in
// DWARF, unqualified and without parameters ("grab" for
// "ns::Box::grab(int)"), as valgrind names inlined calls; else its
// function; "(below main)" for the functions that call main.
func ValgrindName(f Frame) string { return valgrindName(&f) }

// valgrindName is ValgrindName that keeps in f the mangled name it looks
// up.
func valgrindName(f *Frame) string {
	if f.Mangled == "" && f.SymbolName != nil {
		f.Mangled = f.SymbolName()
		f.SymbolName = nil
	}
	fn := f.Mangled
	switch {
	case fn != "":
	case f.Inlined:
		fn = plainName(f.Function)
	default:
		fn = f.Function
	}
	base, _, _ := strings.Cut(fn, "@") // __libc_start_main@@GLIBC_2.34
	if belowMain[base] || strings.HasPrefix(fn, "__libc_start_main.") || strings.HasPrefix(fn, "generic_start_main.") {
		return BelowMain
	}
	return fn
}

// plainName returns the DW_AT_name of a demangled C++ function name: the
// last component of its qualified name, without its parameters and
// qualifiers ("std::vector<int>::push_back(int const&) const" gives
// "push_back"; "f<int>(int)" gives "f<int>"). Other names are returned
// as they are.
func plainName(fn string) string {
	// The parameters: from the last ')' back to its '('.
	if end := strings.LastIndexByte(fn, ')'); end > 0 {
		depth := 0
		for i := end; i >= 0; i-- {
			switch fn[i] {
			case ')':
				depth++
			case '(':
				depth--
			}
			if depth == 0 {
				if i > 0 {
					fn = fn[:i]
				}
				break
			}
		}
	}
	// The last "::" outside template arguments and parentheses.
	start, depth := 0, 0
	for i := 0; i < len(fn); i++ {
		switch fn[i] {
		case '<', '(':
			depth++
		case '>', ')':
			if depth > 0 {
				depth--
			}
		case ':':
			if depth == 0 && i+1 < len(fn) && fn[i+1] == ':' {
				start = i + 2
				i++
			}
		}
	}
	if start < len(fn) {
		return fn[start:]
	}
	return fn
}

// withFewerTemplateArgs returns name ("f<a, b>") with its last template
// argument list cut short from the end ("f<a>", "f<>"), as a DW_AT_name
// that omits default arguments has it; none for a name without one. At
// most 16, for a name that is the program's.
func withFewerTemplateArgs(name string) []string {
	if !strings.HasSuffix(name, ">") {
		return nil
	}
	// The '<' that opens the last list, and the top-level commas in it.
	depth, open := 0, -1
	var commas []int
	for i := len(name) - 1; i >= 0 && open < 0; i-- {
		switch name[i] {
		case '>', ')':
			depth++
		case '<', '(':
			depth--
			if depth == 0 {
				open = i
			}
		case ',':
			if depth == 1 {
				commas = append(commas, i)
			}
		}
	}
	if open <= 0 {
		return nil
	}
	var out []string
	// commas runs from the last to the first: cut at each, then empty.
	for _, c := range commas {
		if len(out) == 16 {
			break
		}
		head := strings.TrimRight(name[:c], " ")
		if strings.HasSuffix(head, ">") {
			head += " " // gcc writes "> >"
		}
		out = append(out, head+">")
	}
	if open+1 < len(name)-1 {
		out = append(out, name[:open+1]+">")
	}
	return out
}

// valgrindFrames returns the frames valgrind would match l against: the
// allocation function's first, then the stack.
func valgrindFrames(l Leak) []Frame {
	out := make([]Frame, 0, len(l.Stack)+1) // a copy: valgrindName fills it in
	if l.Alloc == "" {
		return append(out, l.Stack...)
	}
	out = append(out, Frame{Function: l.Alloc, Mangled: l.Alloc, Module: ValgrindAllocModule})
	return append(out, l.Stack...)
}

// matchValgrind reports whether the Memcheck:Leak entry sup suppresses l.
func (sup *Suppression) matchValgrind(l Leak, frames []Frame) bool {
	if k, ok := kindBits[l.Kind]; ok && sup.kinds&k == 0 {
		return false
	}
	if l.Kind == "" && sup.kinds&kindDefinite == 0 {
		return false // unclassified blocks count as definite
	}
	return matchLocs(sup.locs, frames)
}

// matchLocs reports whether the location lines match a prefix of frames,
// "..." matching zero or more frames (valgrind's VG_(generic_match) with
// matchAll False). It runs in O(len(locs)*len(frames)).
func matchLocs(locs []vgLoc, frames []Frame) bool {
	// The lines before the first "..." match one frame each: most entries
	// fail there, without the table below.
	for len(locs) > 0 && locs[0].kind != locAny {
		if len(frames) == 0 || !locs[0].matches(&frames[0]) {
			return false
		}
		locs, frames = locs[1:], frames[1:]
	}
	if len(locs) == 0 {
		return true
	}
	// can[j]: locs[i:] match a prefix of frames[j:], computed for i from
	// the last location back.
	can := make([]bool, len(frames)+1)
	for j := range can {
		can[j] = true // no location left: whatever remains is fine
	}
	for i := len(locs) - 1; i >= 0; i-- {
		l := &locs[i]
		prev := can
		can = make([]bool, len(frames)+1)
		if l.kind == locAny {
			// can[j] = prev[j] || can[j+1]
			can[len(frames)] = prev[len(frames)]
			for j := len(frames) - 1; j >= 0; j-- {
				can[j] = prev[j] || can[j+1]
			}
			continue
		}
		for j := 0; j < len(frames); j++ {
			can[j] = prev[j+1] && l.matches(&frames[j])
		}
	}
	return can[0]
}

// matches reports whether one location line matches one frame.
func (l *vgLoc) matches(f *Frame) bool {
	switch l.kind {
	case locFun:
		name := valgrindName(f)
		if name != "" && globMatch(l.name, name) {
			return true
		}
		if f.Inlined && f.Mangled == "" {
			// gcc's DW_AT_name leaves out the template arguments that
			// are their defaults (basic_string<> for the constructor
			// template basic_string<std::allocator<char> >).
			for _, short := range withFewerTemplateArgs(name) {
				if globMatch(l.name, short) {
					return true
				}
			}
		}
		// A hand-written demangled name matches too.
		return f.Function != "" && f.Function != name && globMatch(l.name, f.Function)
	case locObj:
		m := f.Module
		if m == "" {
			m = UnknownModule // "obj:*" matches it
		}
		return globMatch(l.name, m) || f.ModuleFile != "" && globMatch(l.name, f.ModuleFile)
	case locSrc:
		if f.File == "" || l.line != 0 && l.line != f.Line {
			return false
		}
		return globMatch(l.name, path.Base(f.File)) || globMatch(l.name, f.File)
	}
	return false
}

// globMatch reports whether str matches the valgrind pattern pat as a whole:
// '*' any sequence, '?' any one byte, no escape (VG_(string_match)). It
// backtracks only to the last star, so it is linear
// in practice and never exponential.
func globMatch(pat, str string) bool {
	p, s := 0, 0
	starP, starS := -1, 0
	for s < len(str) {
		if p < len(pat) {
			switch c := pat[p]; {
			case c == '*':
				starP, starS = p, s
				p++
				continue
			case c == '?':
				p++
				s++
				continue
			case c == str[s]:
				p++
				s++
				continue
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		p, s = starP+1, starS
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}
