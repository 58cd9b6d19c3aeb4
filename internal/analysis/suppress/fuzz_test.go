package suppress

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// refMatch is a reference for templateMatch built on package regexp: the
// template cut at its first '$', each '*' a lazy ".*?", the rest quoted.
// With Perl's leftmost-first semantics and lazy stars, the match found
// starts at the first occurrence of the first piece and takes every later
// piece at its first occurrence, so its end is where LSan's scan ends; a '$'
// then holds if that end is the end of str or the template's last byte
// before it is a star. It needs valid UTF-8 (see latin1).
func refMatch(templ, str string) bool {
	if str == "" {
		return false
	}
	body, dollar := templ, false
	if i := strings.IndexByte(templ, '$'); i >= 0 {
		body, dollar = templ[:i], true
	}
	var expr strings.Builder
	expr.WriteString("(?s)")
	rest := body
	if strings.HasPrefix(rest, "^") {
		expr.WriteString("^")
		rest = rest[1:]
	}
	for _, piece := range strings.SplitAfter(rest, "*") {
		if lit, ok := strings.CutSuffix(piece, "*"); ok {
			expr.WriteString(regexp.QuoteMeta(lit) + ".*?")
		} else {
			expr.WriteString(regexp.QuoteMeta(piece))
		}
	}
	loc := regexp.MustCompile(expr.String()).FindStringIndex(str)
	if loc == nil {
		return false
	}
	return !dollar || loc[1] == len(str) || strings.HasSuffix(rest, "*")
}

// latin1 returns s with each byte made the rune of that value, so that
// refMatch, which works on runes, sees s's bytes, valid UTF-8 or not; '*',
// '^' and '$' stay themselves.
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := range len(s) {
		r[i] = rune(s[i])
	}
	return string(r)
}

func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"foo", "xfoox"}, {"^foo", "foo"}, {"foo$", "xfoo"}, {"ab$", "abab"},
		{"*ab$", "abab"}, {"a*b*c$", "aXbYc"}, {"^*x", "yx"}, {"foo$bar", "foo"},
		{"", ""}, {"*", ""}, {"^$", "x"}, {"*$", "x"}, {"^^", "^"}, {"é*ü$", "éaü"},
		{"a\x00b", "a\x00b"}, {"\xff*", "\xff"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, templ, str string) {
		got := templateMatch(templ, str)
		// The reference takes time in len(templ)*len(str): past a few
		// hundred bytes the fuzzer would spend its time minimizing.
		if len(templ) > 64 || len(str) > 256 {
			return
		}
		if want := refMatch(latin1(templ), latin1(str)); got != want {
			t.Fatalf("templateMatch(%q, %q) = %v, reference %v", templ, str, got, want)
		}
		// An unanchored template without '$' is a "*...*" template.
		if !strings.ContainsAny(templ, "^$") && got != templateMatch("*"+templ+"*", str) {
			t.Fatalf("templateMatch(%q, %q) = %v, not as with stars around", templ, str, got)
		}
	})
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "leak:foo", "leak:^foo$\n# c\n\nleak:*bar*\r\n", "  leak: x \t\r\n",
		"race:foo", "leak:", "leak:a\x00", "\r\n\r\n", "leak:leak:", "#\nleak:^\nleak:$",
		"x\ny\nleak:\n", Standard,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		set, err := Parse(text, "fuzz")
		if err != nil {
			if set != nil {
				t.Fatal("a set with an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Source != "fuzz" || pe.Line < 1 || pe.Line > bytes.Count(text, []byte("\n"))+1 {
				t.Fatalf("error %v: want a *ParseError at a line of fuzz", err)
			}
			return
		}
		var canon strings.Builder
		for _, sup := range set.Suppressions() {
			if sup.Type != TypeLeak || sup.Pattern == "" || strings.ContainsAny(sup.Pattern, "\n\x00") {
				t.Fatalf("bad suppression %+v", sup)
			}
			canon.WriteString(sup.String() + "\n")
		}
		// Written one a line, the suppressions parse back the same.
		again, err := Parse([]byte(canon.String()), "canon")
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if !slices.Equal(patterns(again), patterns(set)) {
			t.Fatalf("reparse = %q, want %q", patterns(again), patterns(set))
		}
		// Match the set against stacks made of its patterns and the text.
		var stack []Frame
		for _, sup := range set.Suppressions() {
			stack = append(stack, Frame{Function: sup.Pattern, File: string(text), Module: strings.Trim(sup.Pattern, "^$*")})
		}
		stack = append(stack, Frame{})
		sup, ok := set.Match(stack)
		if ok != (sup != nil) {
			t.Fatalf("Match = %v, %v", sup, ok)
		}
		set.Hit(sup, 8, 1)
		if ok && (len(set.Used()) != 1 || set.Used()[0].Suppression != sup) {
			t.Fatalf("Used = %+v after a hit of %v", set.Used(), sup)
		}
	})
}

func FuzzParseFile(f *testing.F) {
	for _, s := range []string{
		"{\n n\n Memcheck:Leak\n fun:malloc\n ...\n obj:*/libc*\n src:a.c:3\n}\n",
		"{\n n\n Memcheck:Leak\n match-leak-kinds: definite,possible\n fun:m?lloc\n}\n{\n p\n Memcheck:Param\n write(buf)\n fun:w\n}\n",
		"{\n}\n", "{\n n\n Helgrind:Race\n", "{\n n\n Memcheck:Leak\n ...\n}\n", "# c\n{\n", "leak:foo",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		set, err := ParseFile(text, "fuzz")
		if err != nil {
			var pe *ParseError
			if set != nil || !errors.As(err, &pe) || pe.Source != "fuzz" || pe.Line < 0 || pe.Line > bytes.Count(text, []byte("\n"))+1 {
				t.Fatalf("error %v: want a *ParseError at a line of fuzz, and no set", err)
			}
			return
		}
		stack := []Frame{{Function: string(text), Mangled: string(text), Module: string(text), File: string(text), Line: 3}, {}, {Inlined: true, Function: "a::b(c)"}}
		for _, kind := range []string{"", "definite", "reachable"} {
			sup, ok := set.MatchLeak(Leak{Stack: stack, Alloc: "malloc", Kind: kind})
			if ok != (sup != nil) {
				t.Fatalf("MatchLeak = %v, %v", sup, ok)
			}
		}
	})
}

// FuzzGenRoundTrip writes a suppression for a leak in each format: read
// back, it must hide that leak, whatever bytes the names hold.
func FuzzGenRoundTrip(f *testing.F) {
	f.Add("leak_here", "_Z9leak_herev", "/a/b.c", "/src/app", false, "main")
	f.Add("ns::f(int)", "", "", "", true, "")
	f.Add("a\nb$c", "x y ", " /m\x00", "f", false, "__libc_start_main")
	f.Add("", "", "", "", false, "(below main)")
	f.Fuzz(func(t *testing.T, fn, mangled, file, module string, inlined bool, caller string) {
		l := Leak{
			Stack: []Frame{
				{Function: fn, Mangled: mangled, File: file, Module: module, Line: 7, Inlined: inlined},
				{Function: caller, Mangled: caller, Module: module},
			},
			Alloc: "malloc", Kind: "definite",
		}
		for _, format := range []string{FormatLSan, FormatValgrind} {
			var b bytes.Buffer
			n, _, err := Write(&b, format, []GenLeak{{Leak: l, Bytes: 1, Blocks: 1}}, "header\nline")
			if err != nil {
				t.Fatal(err)
			}
			set, err := ParseFile(b.Bytes(), "gen")
			if err != nil {
				t.Fatalf("%s: %v\n%s", format, err, b.Bytes())
			}
			if n != set.Len() {
				t.Fatalf("%s: wrote %d, read %d\n%s", format, n, set.Len(), b.Bytes())
			}
			if n == 0 {
				continue // no frame to name (LSan: all names empty)
			}
			if _, ok := set.MatchLeak(l); !ok {
				t.Fatalf("%s: the suppression does not hide its leak\n%s", format, b.Bytes())
			}
		}
	})
}
