package termsafe

import (
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, str, text string }{
		{"plain name", "plain name", "plain name"},
		{"héllo 世界 \ufffd", "héllo 世界 \ufffd", "héllo 世界 \ufffd"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\x1b[31mred\x1b[0m`},
		{"a\nb\tc\rd", `a\x0ab\x09c\x0dd`, "a\nb\tc\\x0dd"},
		{"del\x7f bell\x07 nul\x00", `del\x7f bell\x07 nul\x00`, `del\x7f bell\x07 nul\x00`},
		{"csi\u009b31m osc\u009d", `csi\u009b31m osc\u009d`, `csi\u009b31m osc\u009d`},
		{"raw c1 \x9b31m", `raw c1 \x9b31m`, `raw c1 \x9b31m`},
		{"bad \xff\xfe utf8 \xe4\xb8", `bad \xff\xfe utf8 \xe4\xb8`, `bad \xff\xfe utf8 \xe4\xb8`},
		{"rlo \u202egnp.exe", `rlo \u202egnp.exe`, `rlo \u202egnp.exe`},
	} {
		if got := String(c.in); got != c.str {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.str)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}

// FuzzString: whatever the input, the output is valid UTF-8 without a
// control character, and clean input comes back unchanged.
func FuzzString(f *testing.F) {
	f.Add("\x1b]0;title\x07")
	f.Add("ok")
	f.Fuzz(func(t *testing.T, in string) {
		out := String(in)
		if !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q: invalid UTF-8", in, out)
		}
		for _, r := range out {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("String(%q) = %q: control %U left", in, out, r)
			}
		}
		if String(out) != out {
			t.Fatalf("String is not idempotent on %q", out)
		}
	})
}
