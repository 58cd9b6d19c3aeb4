package report

import "testing"

func TestNumbersForPeople(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{{0, "0 B"}, {999, "999 B"}, {9999, "9,999 B"}, {10000, "10.0 kB"}, {108_912_345, "108.9 MB"}, {3 << 40, "3.3 TB"}} {
		if got := bytes(c.n); got != c.want {
			t.Errorf("bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0"}, {12, "12"}, {1234, "1,234"}, {618306, "618,306"}, {-1234567, "-1,234,567"}} {
		if got := count(c.n); got != c.want {
			t.Errorf("count(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := plural(1, "leak group"); got != "1 leak group" {
		t.Errorf("plural(1) = %q", got)
	}
	if got := plural64(2000, "block"); got != "2,000 blocks" {
		t.Errorf("plural64(2000) = %q", got)
	}
}

func TestFrameText(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Function: "main", File: "a.c", Line: 3}, "main (a.c:3)"},
		{Frame{Function: "helper", File: "a.c", Line: 9, Inlined: true}, "helper (a.c:9) [inlined]"},
		{Frame{Function: "qsort", Module: "/lib/libc.so.6"}, "qsort in libc.so.6"},
		{Frame{Address: 0x401000, Module: "/bin/prog", Offset: 0x1000}, "0x401000 /bin/prog+0x1000"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("String(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}
