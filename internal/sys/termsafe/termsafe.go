// Package termsafe makes text that came from a recorded program (its
// command line, thread names, symbols, file names, labels) safe to print
// on a terminal: control characters and invalid UTF-8 become visible
// escapes, so that the program cannot move the cursor, rewrite earlier
// lines, set the window title or reprogram the terminal of whoever reads
// leakpath's report — often root.
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String escapes every control character of s, newlines and tabs
// included: for a single field (a name, a label) that must stay on its
// line.
func String(s string) string { return escape(s, false) }

// Text escapes the control characters of s but keeps newlines and tabs:
// for a whole report or message made of lines.
func Text(s string) string { return escape(s, true) }

// escape returns s itself when nothing needs escaping (the common case:
// no allocation).
func escape(s string, lines bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, n, lines) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafe(r, n, lines):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// unsafe reports whether rune r (n bytes of input) must be escaped: C0
// controls (ESC among them) but newline and tab when lines, DEL, C1
// controls (U+0080–U+009F: 8-bit CSI and OSC among them), invalid UTF-8,
// and the invisible bidirectional overrides that make a terminal show
// text in another order than it is.
func unsafe(r rune, n int, lines bool) bool {
	switch {
	case r == utf8.RuneError && n <= 1:
		return true
	case r == '\n' || r == '\t':
		return !lines
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f:
		return true
	}
	return false
}

// Filter runs render into a buffer and writes its output to out with
// Text's escapes: for a report whose every part may carry the target's
// names.
func Filter(out io.Writer, render func(io.Writer) error) error {
	var b strings.Builder
	if err := render(&b); err != nil {
		return err
	}
	_, err := io.WriteString(out, Text(b.String()))
	return err
}
