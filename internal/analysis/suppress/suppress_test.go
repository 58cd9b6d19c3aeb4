package suppress

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestTemplateMatch(t *testing.T) {
	tests := []struct {
		templ, str string
		want       bool
	}{
		// Substring.
		{"foo", "foo", true},
		{"foo", "xfooy", true},
		{"foo", "fo", false},
		{"foo", "FOO", false},
		{"libfontconfig", "/usr/lib/x86_64-linux-gnu/libfontconfig.so.1.12.0", true},
		// Start anchor.
		{"^foo", "foobar", true},
		{"^foo", "xfoo", false},
		{"^foo", "xfoofoo", false},
		{"x^foo", "x^foo", true}, // '^' elsewhere is a byte
		{"^^foo", "^foo", true},
		{"^", "anything", true},
		// End anchor.
		{"foo$", "xfoo", true},
		{"foo$", "foox", false},
		{"^foo$", "foo", true},
		{"^foo$", "foofoo", false},
		{"$", "x", false},
		{"^$", "x", false},
		// The first occurrence is taken, without backtracking.
		{"ab$", "abab", false},
		{"*ab$", "abab", false},
		{"*.h$", "a.h.h", false},
		{"abab$", "abab", true},
		{"aba*b$", "abab", true},
		{"ab*$", "abab", true},
		{"*$", "x", true},
		// Everything after the first '$' is ignored.
		{"foo$bar", "foo", true},
		{"foo$bar", "foobar", false},
		{"foo$*", "xfoo", true},
		// Stars.
		{"*", "x", true},
		{"**", "x", true},
		{"a*c", "abc", true},
		{"a*c", "ac", true},
		{"a*c", "ca", false},
		{"^a*c", "xabc", false},
		{"^*abc", "xabc", true}, // a star lifts the start anchor
		{"*LSanTestLeakingFunc*", "LSanTestLeakingFunc()", true},
		{"^std::*::_M_create", "std::__cxx11::basic_string<char>::_M_create(unsigned long&, unsigned long)", true},
		{"a*b*c$", "aXbYc", true},
		{"a*b*c$", "aXbYcZ", false},
		{"a*b*c$", "acb", false},
		// The empty string matches nothing, not even the empty template.
		{"", "", false},
		{"*", "", false},
		{"^", "", false},
		{"$", "", false},
		{"", "x", true},
	}
	for _, tt := range tests {
		if got := templateMatch(tt.templ, tt.str); got != tt.want {
			t.Errorf("templateMatch(%q, %q) = %v, want %v", tt.templ, tt.str, got, tt.want)
		}
		if got := refMatch(tt.templ, tt.str); got != tt.want {
			t.Errorf("refMatch(%q, %q) = %v, want %v", tt.templ, tt.str, got, tt.want)
		}
	}
}

func patterns(s *Set) []string {
	var out []string
	for _, sup := range s.Suppressions() {
		out = append(out, sup.Pattern)
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"empty", "", nil},
		{"one", "leak:foo", []string{"foo"}},
		{"blank lines", "\n\nleak:a\n   \n\t\nleak:b\n\n", []string{"a", "b"}},
		{"comments", "# c\n  # indented\n\t#tab\nleak:a # not a comment\n#leak:b\n", []string{"a # not a comment"}},
		{"surrounding whitespace", "  \tleak:a \t \n", []string{"a"}},
		{"space after colon kept", "leak: a\nleak:\ta", []string{" a", "\ta"}},
		{"CRLF", "# c\r\nleak:a\r\n\r\n  \r\nleak:b \r\nleak:c", []string{"a", "b", "c"}},
		{"anchors and stars", "leak:^foo$\nleak:*bar*\nleak:^", []string{"^foo$", "*bar*", "^"}},
		{"colons in pattern", "leak:ns::f(int)\nleak:leak:x", []string{"ns::f(int)", "leak:x"}},
		{"last line unterminated", "leak:a\nleak:b", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse([]byte(tt.text), "supp")
			if err != nil {
				t.Fatal(err)
			}
			if got := patterns(set); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("patterns = %q, want %q", got, tt.want)
			}
			for _, sup := range set.Suppressions() {
				if sup.Type != TypeLeak || sup.Source != "supp" {
					t.Errorf("%+v: want type leak, source supp", sup)
				}
			}
		})
	}
}

func TestParseLineNumbers(t *testing.T) {
	set, err := Parse([]byte("# one\r\n\r\nleak:three\n\n  leak:five\n"), "f.supp")
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, sup := range set.Suppressions() {
		lines = append(lines, sup.Line)
	}
	if !reflect.DeepEqual(lines, []int{3, 5}) {
		t.Errorf("lines = %v, want [3 5]", lines)
	}
}

func TestParseErrors(t *testing.T) {
	type want struct {
		line int
		err  error
	}
	tests := []struct {
		name, text string
		want       []want
		msg        string // in the first error's text
	}{
		{"other sanitizer's type", "leak:a\ninterceptor_via_fun:foo\n", []want{{2, ErrUnknownType}}, `supp:2: unknown suppression type in "interceptor_via_fun:foo"`},
		{"tsan type", "\n\nrace:foo", []want{{3, ErrUnknownType}}, "supp:3:"},
		{"upper case", "LEAK:foo", []want{{1, ErrUnknownType}}, "supp:1:"},
		{"space before colon", "leak :foo", []want{{1, ErrUnknownType}}, "supp:1:"},
		{"no colon", "foo", []want{{1, ErrUnknownType}}, "supp:1:"},
		{"type only", "leak", []want{{1, ErrUnknownType}}, "supp:1:"},
		{"leading CR", "\rleak:foo", []want{{1, ErrUnknownType}}, "supp:1:"},
		{"empty pattern", "# x\nleak:\n", []want{{2, ErrEmptyPattern}}, `supp:2: empty pattern after "leak:"`},
		{"empty pattern, blanks", "leak: \t\r\n", []want{{1, ErrEmptyPattern}}, "supp:1:"},
		{"NUL", "leak:a\nleak:b\x00c\nleak:d", []want{{2, ErrNUL}}, "supp:2: NUL byte"},
		{"NUL in comment", "#\x00", []want{{1, ErrNUL}}, "supp:1:"},
		{"every bad line", "x\nleak:a\nleak:\ny:z", []want{{1, ErrUnknownType}, {3, ErrEmptyPattern}, {4, ErrUnknownType}}, "supp:1:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse([]byte(tt.text), "supp")
			if err == nil {
				t.Fatalf("Parse = %q, want an error", patterns(set))
			}
			if set != nil {
				t.Errorf("Parse returned a set with its error")
			}
			if !strings.HasPrefix(err.Error(), tt.msg) {
				t.Errorf("error %q, want it to start with %q", err, tt.msg)
			}
			var got []want
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					var pe *ParseError
					if !errors.As(e, &pe) {
						t.Fatalf("%v is not a *ParseError", e)
					}
					if pe.Source != "supp" {
						t.Errorf("%v: source %q", e, pe.Source)
					}
					got = append(got, want{pe.Line, pe.Err})
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors = %v, want %v", got, tt.want)
			}
			if !errors.Is(err, tt.want[0].err) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.want[0].err)
			}
		})
	}
}

func mustParse(t *testing.T, text, source string) *Set {
	t.Helper()
	s, err := Parse([]byte(text), source)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMatch(t *testing.T) {
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	exe := "/home/u/src/app/bin/app"
	stack := []Frame{
		{Function: "xstrdup", File: "/home/u/src/app/util/str.c", Module: exe},
		{Function: "config_load", File: "/home/u/src/app/config.c", Module: exe},
		{Function: "", File: "", Module: "/usr/lib/libplugin.so.2"},
		{Function: "main", File: "/home/u/src/app/main.c", Module: exe},
		{Function: "__libc_start_call_main", File: "", Module: libc},
	}
	tests := []struct {
		name, text string
		stack      []Frame
		want       string // pattern of the suppression, "" for none
	}{
		{"$ ends the pattern", "leak:^main$x", stack, "^main$x"},
		{"no match", "leak:nothing\nleak:^mai$", stack, ""},
		{"function", "leak:config_load", stack, "config_load"},
		{"function anchored", "leak:^config_load$", stack, "^config_load$"},
		{"function prefix is not a match", "leak:^load", stack, ""},
		{"only the file", "leak:util/str.c$", stack, "util/str.c$"},
		{"only the module", "leak:libplugin.so", stack, "libplugin.so"},
		{"module is the full path", "leak:^/usr/lib/libplugin", stack, "^/usr/lib/libplugin"},
		{"not the base name", "leak:^libplugin", stack, ""},
		{"unknown function and file match nothing", "leak:^$\nleak:??", stack, ""},
		{"module of an outer frame", "leak:libc.so.6", stack, "libc.so.6"},
		{
			"unknown module",
			"leak:unknown module",
			[]Frame{{Function: "f", File: "f.c"}},
			"unknown module",
		},
		{
			// Frame 0's module matches the second suppression before frame 1's
			// function matches the first.
			"the first matching frame decides",
			"leak:config_load\nleak:bin/app",
			stack,
			"bin/app",
		},
		{
			// In a frame the module comes before the function and the file.
			"module before function",
			"leak:xstrdup\nleak:str.c\nleak:^/home",
			stack[:1],
			"^/home",
		},
		{
			"function before file",
			"leak:str.c\nleak:xstrdup",
			stack[:1],
			"xstrdup",
		},
		{
			// A string is tried against every suppression in order.
			"first suppression in order",
			"leak:strdup\nleak:xstrdup\nleak:^xstr",
			stack[:1],
			"strdup",
		},
		{"empty stack", "leak:*", nil, ""},
		{"everything", "leak:*", stack, "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := mustParse(t, tt.text, "supp")
			sup, ok := set.Match(tt.stack)
			if ok != (sup != nil) {
				t.Fatalf("Match = %v, %v", sup, ok)
			}
			got := ""
			if ok {
				got = sup.Pattern
			}
			if got != tt.want {
				t.Errorf("Match = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNilAndEmptySet(t *testing.T) {
	var nilSet *Set
	if _, ok := nilSet.Match([]Frame{{Function: "f"}}); ok {
		t.Error("nil set matched")
	}
	if nilSet.Used() != nil || nilSet.Len() != 0 || nilSet.Suppressions() != nil {
		t.Error("nil set not empty")
	}
	nilSet.Hit(nil, 1, 1)
	var zero Set
	if _, ok := zero.Match([]Frame{{Function: "f"}}); ok {
		t.Error("zero set matched")
	}
	zero.Add(nil)
	zero.Add(mustParse(t, "leak:f", "x"))
	if _, ok := zero.Match([]Frame{{Function: "f"}}); !ok {
		t.Error("zero set after Add did not match")
	}
}

// TestMerge combines a suppression file, the program's
// __lsan_default_suppressions and the standard suppressions in LSan's order.
func TestMerge(t *testing.T) {
	file := mustParse(t, "leak:parse_\nleak:libfoo.so\n", "app.supp")
	def := mustParse(t, "leak:parse_request\nleak:init_tables\n", "__lsan_default_suppressions")
	std := mustParse(t, Standard, StandardSource)
	set := &Set{}
	set.Add(file)
	set.Add(def)
	set.Add(std)
	if set.Len() != 5 {
		t.Fatalf("Len = %d, want 5", set.Len())
	}
	if file.Len() != 2 || def.Len() != 2 {
		t.Errorf("Add changed its argument")
	}
	type hit struct {
		stack []Frame
		bytes uint64
		n     uint64
		want  string // source:line
	}
	hits := []hit{
		// Both parse_ (file) and parse_request (default) match: the file's wins.
		{[]Frame{{Function: "parse_request", File: "req.c", Module: "/bin/app"}}, 1792, 28, "app.supp:1"},
		{[]Frame{{Function: "init_tables", File: "t.c", Module: "/bin/app"}}, 64, 1, "__lsan_default_suppressions:2"},
		{[]Frame{{Function: "init_tables", File: "t.c", Module: "/bin/app"}}, 32, 2, "__lsan_default_suppressions:2"},
		{[]Frame{{Function: "__tls_get_addr", Module: "/lib64/ld-linux-x86-64.so.2"}}, 100, 1, StandardSource + ":1"},
		{[]Frame{{Function: "main", File: "main.c", Module: "/bin/app"}}, 5, 5, ""},
	}
	for _, h := range hits {
		sup, ok := set.Match(h.stack)
		got := ""
		if ok {
			got = sup.Source + ":" + strconv.Itoa(sup.Line)
			set.Hit(sup, h.bytes, h.n)
		}
		if got != h.want {
			t.Errorf("Match(%v) = %q, want %q", h.stack, got, h.want)
		}
	}
	var used []string
	for _, u := range set.Used() {
		used = append(used, fmt.Sprint(u.Pattern, " ", u.Count, " ", u.Bytes))
	}
	want := []string{"parse_ 28 1792", "init_tables 3 96", "*tls_get_addr* 1 100"}
	if !reflect.DeepEqual(used, want) {
		t.Errorf("Used = %q, want %q", used, want)
	}
	// The parts' counters are their own.
	if file.Used() != nil {
		t.Errorf("file.Used = %v, want none", file.Used())
	}
	// Add copies the counts.
	again := &Set{}
	again.Add(set)
	if got := again.Used(); len(got) != 3 || got[1].Count != 3 || got[1].Bytes != 96 || got[1].Suppression == set.Used()[1].Suppression {
		t.Errorf("Used after Add = %+v", got)
	}
}

func TestHitConcurrent(t *testing.T) {
	set := mustParse(t, "leak:f", "x")
	sup, ok := set.Match([]Frame{{Function: "f"}})
	if !ok {
		t.Fatal("no match")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				set.Hit(sup, 16, 2)
			}
		})
	}
	wg.Wait()
	u := set.Used()
	if len(u) != 1 || u[0].Count != 16000 || u[0].Bytes != 128000 {
		t.Errorf("Used = %+v", u)
	}
}

func TestSuppressionString(t *testing.T) {
	set := mustParse(t, "leak:^a*b$", "x")
	if got := set.Suppressions()[0].String(); got != "leak:^a*b$" {
		t.Errorf("String = %q", got)
	}
}
