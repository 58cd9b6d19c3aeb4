// Package suppress reads LeakSanitizer (LSan) leak suppressions and matches
// leak stacks against them the way LSan does, so that a suppression file
// written for LSan (LSAN_OPTIONS=suppressions=FILE, leakpath run
// --suppressions FILE) or the text a program returns from its compiled-in
// const char *__lsan_default_suppressions(void) hides the same leaks under
// leakpath. It reads valgrind's suppression files too (ParseFile tells the
// formats apart), matching their Memcheck:Leak entries as memcheck does
// (see MatchLeak and valgrind.go), and writes either format for a run's
// leaks (Write).
//
// The package imports no other leakpath package.
//
// # Syntax
//
// The text is split into lines at '\n'. On each line, spaces, tabs and
// carriage returns at the end, then spaces and tabs at the start are removed
// (so CRLF line ends are fine). What is left is one of:
//
//   - nothing: a blank line, ignored;
//   - a comment: the line starts with '#', ignored (there are no comments
//     after a suppression: "leak:foo # bar" is the pattern "foo # bar");
//   - a suppression TYPE:PATTERN, where TYPE is "leak" exactly (lower case,
//     no space before the colon) and PATTERN is everything after the colon,
//     not trimmed: "leak: foo" is the pattern " foo", with its space.
//
// LSan accepts the single type "leak" in its own suppression file; the types
// of the other sanitizers (ASan's "interceptor_via_fun", TSan's "race"...)
// make LSan stop with "failed to parse suppressions", and Parse returns an
// error for them too. Each error is a *ParseError naming the source and the
// line, and wrapping ErrUnknownType, ErrEmptyPattern or ErrNUL.
//
// Where Parse differs from LSan, it rejects or accepts only what LSan treats
// as a mistake:
//
//   - an empty pattern ("leak:") is an error (ErrEmptyPattern); LSan accepts
//     it, and as an empty template matches every non-empty string, it
//     suppresses every leak;
//   - a NUL byte is an error (ErrNUL); LSan reads the text as a C string and
//     silently ignores everything from the first NUL on;
//   - a line holding only whitespace and a carriage return (the blank line of
//     a CRLF file) is blank; LSan removes leading blanks before the trailing
//     '\r' and so fails on it with "failed to parse suppressions".
//
// # Patterns
//
// A pattern is an LSan template, matched against a string (a function name, a
// source file path, a module path):
//
//   - '*' matches any sequence of bytes, the empty one included;
//   - a '^' at the very start anchors the pattern at the start of the
//     string; anywhere else '^' is an ordinary byte;
//   - '$' anchors at the end of the string, and everything after the first
//     '$' in the pattern is ignored ("foo$bar" is "foo$");
//   - every other byte matches itself (case matters); without anchors a
//     pattern matches anywhere in the string: "foo" is "*foo*".
//
// Matching has no backtracking: the pieces of the pattern between stars are
// looked for one after the other, each at its first occurrence after the
// previous one, and a final '$' then only checks that the last piece ended
// the string. So "ab$" does not match "abab" (the first "ab" is taken, and
// "ab" follows it), "*ab$" does not either, and "*.h$" does not match
// "a.h.h"; "abab$" does, and so does "ab*$", which is "ab". A regular
// expression would match all of them. An empty string matches no pattern,
// not even "*". Match documents which strings of a stack are tried.
//
// # Combining sources
//
// LSan parses, in this order, the file named by the suppressions flag, then
// the text of __lsan_default_suppressions if the program defines it, then its
// standard suppressions (Standard: a glibc TLS leak). A string is matched
// against the suppressions in that order and the first that matches is the
// one credited, so the order of Set.Add calls decides what "Suppressions
// used" shows: add the file's set first, then the program's, then
// Parse(Standard).
//
// # What this package does not do
//
// LSan also drops, without any suppression, a leak whose allocation's caller
// is in the dynamic loader (dynamic TLS blocks) or unknown; it treats the
// blocks of a suppressed stack as reachable, so what is reachable only from
// them is not reported either; and it looks for a relative suppression file
// that does not exist in the executable's directory. These belong to the
// callers of this package.
package suppress
