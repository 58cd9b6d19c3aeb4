package suppress

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pat, str string
		want     bool
	}{
		{"malloc", "malloc", true},
		{"malloc", "xmalloc", false}, // whole string, unlike LSan
		{"malloc", "mallocx", false},
		{"*alloc", "calloc", true},
		{"*alloc", "alloc_x", false},
		{"?alloc", "calloc", true},
		{"?alloc", "alloc", false},
		{"_Z*", "_ZN4shop4Cart3addEi", true},
		{"*/libc.so*", "/usr/lib/x86_64-linux-gnu/libc.so.6", true},
		{"*/libc-2.*.so", "/usr/lib/x86_64-linux-gnu/libc.so.6", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbYcZ", false},
		{"a*b*c", "abcbc", true},
		{"*", "", true},
		{"", "", true},
		{"", "x", false},
		{"**a**", "bab", true},
		{"a\\*", "a\\x", true}, // no escapes: '\' is a byte
		{"a\\*", "a*", false},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pat, tt.str); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pat, tt.str, got, tt.want)
		}
	}
}

// vgStack is a leak stack for the matching tests: main calls outer, which
// calls leak_here, which calls malloc.
var vgStack = []Frame{
	{Function: "leak_here", Mangled: "leak_here", File: "/src/app/fix.c", Line: 12, Module: "/src/app/fix"},
	{Function: "outer", Mangled: "outer", File: "/src/app/fix.c", Line: 20, Module: "/src/app/fix"},
	{Function: "shop::Cart::add(int)", Mangled: "_ZN4shop4Cart3addEi", File: "/src/app/cart.cc", Line: 7, Module: "/src/app/libcart.so"},
	{Function: "main", Mangled: "main", File: "/src/app/fix.c", Line: 30, Module: "/src/app/fix"},
	{Function: "__libc_start_call_main", Mangled: "__libc_start_call_main", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
}

func TestValgrindMatch(t *testing.T) {
	entry := func(kinds string, locs ...string) string {
		s := "{\n   name\n   Memcheck:Leak\n"
		if kinds != "" {
			s += "   match-leak-kinds: " + kinds + "\n"
		}
		for _, l := range locs {
			s += "   " + l + "\n"
		}
		return s + "}\n"
	}
	tests := []struct {
		name  string
		supp  string
		alloc string
		kind  string
		want  bool
	}{
		{"full stack", entry("definite", "fun:malloc", "fun:leak_here", "fun:outer", "fun:_ZN4shop4Cart3addEi", "fun:main", "fun:(below main)"), "malloc", "definite", true},
		{"prefix", entry("", "fun:malloc", "fun:leak_here"), "malloc", "definite", true},
		{"wrong allocator", entry("", "fun:calloc", "fun:leak_here"), "malloc", "definite", false},
		{"wildcard allocator", entry("", "fun:*alloc", "fun:leak_here"), "malloc", "definite", true},
		{"allocator module", entry("", "obj:*vgpreload_memcheck*", "fun:leak_here"), "malloc", "definite", true},
		{"no allocator line", entry("", "fun:leak_here"), "malloc", "definite", false},
		{"dots first", entry("", "...", "fun:leak_here"), "malloc", "definite", true},
		{"dots middle", entry("", "fun:malloc", "...", "fun:main"), "malloc", "definite", true},
		{"dots zero frames", entry("", "fun:malloc", "...", "fun:leak_here", "...", "fun:outer"), "malloc", "definite", true},
		{"dots wrong order", entry("", "...", "fun:main", "...", "fun:outer"), "malloc", "definite", false},
		{"too long", entry("", "...", "fun:(below main)", "fun:_start"), "malloc", "definite", false},
		{"mangled", entry("", "...", "fun:_ZN4shop*"), "malloc", "definite", true},
		{"demangled too", entry("", "...", "fun:shop::Cart::add*"), "malloc", "definite", true},
		{"obj", entry("", "...", "obj:*/libcart.so", "fun:main"), "malloc", "definite", true},
		{"obj mismatch", entry("", "fun:malloc", "obj:*/libcart.so"), "malloc", "definite", false},
		{"src", entry("", "...", "src:cart.cc:7"), "malloc", "definite", true},
		{"src wrong line", entry("", "...", "src:cart.cc:8"), "malloc", "definite", false},
		{"src any line", entry("", "fun:malloc", "src:fix.c"), "malloc", "definite", true},
		{"question mark", entry("", "fun:mallo?", "fun:leak_her?"), "malloc", "definite", true},
		{"kind not listed", entry("possible,reachable", "fun:malloc"), "malloc", "definite", false},
		{"kind listed", entry("possible,definite", "fun:malloc"), "malloc", "definite", true},
		{"kind all", entry("all", "fun:malloc"), "malloc", "reachable", true},
		{"kind none", entry("none", "fun:malloc"), "malloc", "definite", false},
		{"unclassified is definite", entry("definite", "fun:malloc"), "malloc", "", true},
		{"unclassified not possible", entry("possible", "fun:malloc"), "malloc", "", false},
		{"unknown allocator", entry("", "fun:leak_here"), "", "definite", true},
	}
	for _, tt := range tests {
		set, err := ParseFile([]byte(tt.supp), "t.supp")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, got := set.MatchLeak(Leak{Stack: vgStack, Alloc: tt.alloc, Kind: tt.kind})
		if got != tt.want {
			t.Errorf("%s: MatchLeak = %v, want %v\n%s", tt.name, got, tt.want, tt.supp)
		}
	}
}

func TestValgrindParse(t *testing.T) {
	text := `# comment
{
   ignored param
   Memcheck:Param
   write(buf)
   fun:write
}

{
   <insert_a_suppression_name_here>
   Memcheck:Leak
   match-leak-kinds: definite,possible
   fun:malloc
   ...
}
{
   helgrind
   Helgrind:Race
   fun:foo
}
{
   both tools
   Memcheck,Helgrind:Leak
   fun:calloc
}
{
   core
   core:PThread
   fun:foo
}
`
	set, err := ParseFile([]byte(text), "x.supp")
	if err != nil {
		t.Fatal(err)
	}
	sups := set.Suppressions()
	if len(sups) != 2 || set.Ignored() != 3 {
		t.Fatalf("got %d entries, %d ignored; want 2 and 3", len(sups), set.Ignored())
	}
	if got := sups[0].String(); got != "valgrind:<insert_a_suppression_name_here> (x.supp:9)" {
		t.Errorf("String() = %q", got)
	}
	if sups[0].Line != 9 || sups[0].kinds != kindDefinite|kindPossible || len(sups[0].locs) != 2 {
		t.Errorf("first entry: line %d kinds %b locs %d", sups[0].Line, sups[0].kinds, len(sups[0].locs))
	}
	if !set.HasValgrind() {
		t.Error("HasValgrind() = false")
	}
	// A copy keeps the entries' frames and the ignored count.
	var all Set
	all.Add(set)
	if _, ok := all.MatchLeak(Leak{Stack: vgStack, Alloc: "malloc", Kind: "possible"}); !ok || all.Ignored() != 3 {
		t.Errorf("the copy does not match, or lost the ignored count (%d)", all.Ignored())
	}
	// LSan's Match ignores valgrind entries.
	if _, ok := set.Match(vgStack); ok {
		t.Error("Match used a valgrind entry")
	}
}

func TestValgrindParseErrors(t *testing.T) {
	tests := []struct {
		text string
		line int
		want string
	}{
		{"{\n n\n Memcheck:Leak\n fun:a\n}\nleak:foo\n", 6, "expected '{'"},
		{"{\n}\n", 2, "no name"},
		{"{\n n\n Memcheck Leak\n fun:a\n}\n", 3, "TOOL:KIND"},
		{"{\n n\n Memcheck:Leak\n}\n", 4, "no frame line"},
		{"{\n n\n Memcheck:Leak\n ...\n}\n", 5, `only "..."`},
		{"{\n n\n Memcheck:Leak\n fun:a\n", 4, "no '}'"},
		{"{\n n\n Memcheck:Leak\n func:a\n}\n", 4, `must be "...", or start with`},
		{"{\n n\n Memcheck:Leak\n fun:\n}\n", 4, "nothing after"},
		{"{\n n\n Memcheck:Leak\n match-leak-kinds: definite,lost\n fun:a\n}\n", 4, `unknown kind "lost"`},
		{"{\n n\n Memcheck:Leak\n src:a.c:x\n}\n", 4, "not a positive number"},
		{"{\n n\n Memcheck:Cond\n fun:a\n", 4, "no '}'"},
		{"{\n n\n Memcheck:Leak\n fun:a\x00\n}\n", 4, "NUL"},
		{"{\n n\n Memcheck:Leak\n" + strings.Repeat(" fun:a\n", maxValgrindLocs+1) + "}\n", 4 + maxValgrindLocs, "more than 500 frames"},
	}
	for _, tt := range tests {
		_, err := ParseFile([]byte(tt.text), "bad.supp")
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: error %v, want a *ParseError", tt.text, err)
			continue
		}
		if pe.Line != tt.line || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "bad.supp:") {
			t.Errorf("%q: error %q (line %d), want line %d and %q", tt.text, err, pe.Line, tt.line, tt.want)
		}
	}
}

// TestSystemValgrindFiles loads the suppression files valgrind and Open MPI
// install on Debian: each must parse, and each must have Memcheck:Leak
// entries, other entries ignored.
func TestSystemValgrindFiles(t *testing.T) {
	files := []string{
		"/usr/libexec/valgrind/default.supp",
		"/usr/lib/valgrind/debian.supp",
		"/usr/lib/valgrind/python3.supp",
		"/usr/share/openmpi/openmpi-valgrind.supp",
	}
	loaded := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Logf("%s: %v (not installed?)", f, err)
			continue
		}
		set, err := ParseFile(b, f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		loaded++
		leaks := strings.Count(string(b), "Memcheck:Leak")
		entries := strings.Count(string(b), "\n{") + strings.Count(string(b)[:min(len(b), 2)], "{")
		t.Logf("%s: %d leak entries, %d others ignored", f, set.Len(), set.Ignored())
		if set.Len() != leaks {
			t.Errorf("%s: %d leak entries, the text has %d Memcheck:Leak lines", f, set.Len(), leaks)
		}
		if set.Len()+set.Ignored() < entries {
			t.Errorf("%s: %d entries read, the text opens %d", f, set.Len()+set.Ignored(), entries)
		}
	}
	if loaded == 0 {
		t.Skip("no valgrind suppression file installed (apt-get install valgrind)")
	}
}

func TestPlainName(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"helper", "helper"},
		{"ns::Box::grab(int)", "grab"},
		{"std::vector<int, std::allocator<int> >::push_back(int const&)", "push_back"},
		{"std::map<a::b, c>::find(a::b const&) const", "find"},
		{"f<int>(int)", "f<int>"},
		{"ns::f<std::pair<a::b, c> >(std::pair<a::b, c>*)", "f<std::pair<a::b, c> >"},
		{"(anonymous namespace)::parse(char const*)", "parse"},
		{"Foo::operator()(int)", "operator()"},
		{"main::{lambda()#1}::operator()() const", "operator()"},
		{"(below main)", "(below main)"},
	} {
		if got := plainName(tt.in); got != tt.want {
			t.Errorf("plainName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestValgrindInlined matches inlined frames as valgrind names them: by
// their plain DWARF name, not the qualified one with parameters.
func TestValgrindInlined(t *testing.T) {
	stack := []Frame{
		{Function: "ns::Box::grab(int)", Inlined: true, Module: "/a/inl"},
		{Function: "helper", Inlined: true, Module: "/a/inl"},
		{Function: "outer(int)", Mangled: "_Z5outeri", Module: "/a/inl"},
		{Function: "main", Mangled: "main", Module: "/a/inl"},
	}
	// What valgrind --gen-suppressions=all wrote for this stack.
	set, err := ParseFile([]byte("{\n x\n Memcheck:Leak\n match-leak-kinds: definite\n fun:malloc\n fun:grab\n fun:helper\n fun:_Z5outeri\n fun:main\n}\n"), "vg.supp")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.MatchLeak(Leak{Stack: stack, Alloc: "malloc", Kind: "definite"}); !ok {
		t.Error("valgrind's own suppression does not match the inlined stack")
	}
	var b strings.Builder
	if _, _, err := Write(&b, FormatValgrind, []GenLeak{{Leak: Leak{Stack: stack, Alloc: "malloc", Kind: "definite"}, Bytes: 42, Blocks: 1}}, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "   fun:malloc\n   fun:grab\n   fun:helper\n   fun:_Z5outeri\n   fun:main\n}") {
		t.Errorf("generated entry differs from valgrind's:\n%s", b.String())
	}
}

// TestValgrindInlinedDefaultArgs: gcc's DW_AT_name of a function
// template leaves out the arguments that are defaults, so valgrind names
// the inlined constructor basic_string<std::allocator<char> >(...) as
// "basic_string<>" (what valgrind --gen-suppressions=all wrote for a
// std::string(40, 'a') in a leaked node, g++ 12 -O2). Cutting arguments
// from the end matches it; a different first argument does not.
func TestValgrindInlinedDefaultArgs(t *testing.T) {
	stack := []Frame{
		{Function: "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_construct(unsigned long, char)",
			Mangled: "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE12_M_constructEmc", Module: "/usr/lib/libstdc++.so.6"},
		{Function: "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::basic_string<std::allocator<char> >(unsigned long, char, std::allocator<char> const&)", Inlined: true, Module: "/a/cxx"},
		{Function: "mk(int)", Mangled: "_Z2mki", Module: "/a/cxx"},
		{Function: "main", Mangled: "main", Module: "/a/cxx"},
	}
	for _, tc := range []struct {
		fun  string
		want bool
	}{
		{"basic_string<>", true},
		{"basic_string<std::allocator<char> >", true},
		{"basic_string<std::allocator<int> >", false},
		{"basic_strin<>", false},
	} {
		set, err := ParseFile([]byte("{\n x\n Memcheck:Leak\n fun:_Znwm\n fun:_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE12_M_constructEmc\n fun:"+tc.fun+"\n fun:_Z2mki\n fun:main\n}\n"), "vg.supp")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := set.MatchLeak(Leak{Stack: stack, Alloc: "_Znwm", Kind: "indirect"}); ok != tc.want {
			t.Errorf("fun:%s matched %v, want %v", tc.fun, ok, tc.want)
		}
	}
	for in, want := range map[string][]string{
		"f<a, b<c, d>, e>": {"f<a, b<c, d> >", "f<a>", "f<>"},
		"f<>":              nil,
		"operator>":        nil,
		"plain":            nil,
	} {
		if got := withFewerTemplateArgs(in); !slices.Equal(got, want) {
			t.Errorf("withFewerTemplateArgs(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteValgrindUnloaded: a frame in a library unloaded before the
// exit is obj:* in a generated entry, as valgrind writes it (it knows
// neither its function nor its object then: "???" in its report), so
// that valgrind, too, matches the entry; leakpath matches it still.
func TestWriteValgrindUnloaded(t *testing.T) {
	l := Leak{Alloc: "malloc", Kind: "definite", Stack: []Frame{
		{Function: "strdup", Mangled: "strdup", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{Function: "component_open", Mangled: "component_open", Module: "/usr/lib/mca_x.so", Unloaded: true},
		{Function: "", Module: "/usr/lib/mca_x.so", Unloaded: true},
		{Function: "main", Mangled: "main", Module: "/a/prog"},
	}}
	var b strings.Builder
	if _, _, err := Write(&b, FormatValgrind, []GenLeak{{Leak: l, Bytes: 5, Blocks: 1}}, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "   fun:malloc\n   fun:strdup\n   obj:*\n   obj:*\n   fun:main\n}") {
		t.Errorf("frames of the unloaded library are not obj:*:\n%s", b.String())
	}
	set, err := ParseFile([]byte(b.String()), "gen.supp")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.MatchLeak(l); !ok {
		t.Errorf("the entry written does not hide its leak:\n%s", b.String())
	}
}

func TestWriteLSan(t *testing.T) {
	libc := "/usr/lib/x86_64-linux-gnu/libc.so.6"
	leaks := []GenLeak{
		// strdup is libc's: the pattern names the program's caller.
		{Leak: Leak{Kind: "definite", Alloc: "malloc", Stack: []Frame{
			{Function: "strdup", Module: libc}, {Function: "ns::copy(char const*)", Module: "/src/app"}, {Function: "main", Module: "/src/app"}}}, Bytes: 6, Blocks: 1},
		// The same function again: one line for both.
		{Leak: Leak{Kind: "possible", Alloc: "malloc", Stack: []Frame{{Function: "ns::copy(char const*)", Module: "/src/app"}}}, Bytes: 8, Blocks: 2},
		// Only system frames: the innermost named one.
		{Leak: Leak{Kind: "definite", Stack: []Frame{{Module: libc}, {Function: "g_malloc", Module: "/usr/lib/libglib.so"}}}, Bytes: 1, Blocks: 1},
		{Leak: Leak{Kind: "definite", Stack: []Frame{{Function: "main", Module: "/src/app"}}}, Bytes: 1, Blocks: 1},
		{Leak: Leak{Kind: "reachable", Stack: []Frame{{Function: "init", Module: "/src/app"}}}, Bytes: 1, Blocks: 1},
		{Leak: Leak{Kind: "definite", Stack: []Frame{{}}}, Bytes: 1, Blocks: 1},
	}
	var b strings.Builder
	written, unhidden, err := Write(&b, FormatLSan, leaks, "for the test")
	if err != nil {
		t.Fatal(err)
	}
	text := b.String()
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "leak:") {
			lines = append(lines, l)
		}
	}
	want := []string{"leak:^ns::copy(char const*)$", "leak:^g_malloc$", "leak:^main$"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") || written != 3 || unhidden != 2 {
		t.Errorf("lines %q (written %d, unhidden %d), want %q, 3 and 2:\n%s", lines, written, unhidden, want, text)
	}
	for _, s := range []string{"# for the test\n", "# 8 B in 2 blocks (possible) from malloc: ns::copy(char const*)\n",
		"hides every leak allocated under main", "never hides reachable blocks", "no frame has a name"} {
		if !strings.Contains(text, s) {
			t.Errorf("no %q in:\n%s", s, text)
		}
	}
	set, err := ParseFile([]byte(text), "gen.txt")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range leaks {
		_, ok := set.MatchLeak(l.Leak)
		if ok != (i < 4) {
			t.Errorf("leak %d: suppressed %v, want %v", i, ok, i < 4)
		}
	}
}

func TestValgrindNameBelowMain(t *testing.T) {
	for _, tt := range []struct {
		f    Frame
		want string
	}{
		{Frame{Mangled: "__libc_start_main@@GLIBC_2.34"}, BelowMain},
		{Frame{Mangled: "__libc_start_call_main"}, BelowMain},
		{Frame{Function: "__libc_start_main_impl"}, BelowMain},
		{Frame{Mangled: "main"}, "main"},
		{Frame{Mangled: "memcpy@@GLIBC_2.14"}, "memcpy@@GLIBC_2.14"},
		{Frame{Function: "f(int)", Mangled: "_Z1fi"}, "_Z1fi"},
		{Frame{Function: "f(int)", SymbolName: func() string { return "_Z1fi" }}, "_Z1fi"},
		{Frame{Function: "a::f(int)", Inlined: true}, "f"},
	} {
		if got := ValgrindName(tt.f); got != tt.want {
			t.Errorf("ValgrindName(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}
