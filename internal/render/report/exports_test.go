package report

import "testing"

func TestSARIFArtifact(t *testing.T) {
	c := &sarifContext{root: "/src/app"}
	for _, tc := range []struct {
		file, module string
		want         sarifArtifactLoc
	}{
		{"/src/app/lib/list.c", "/src/app/prog", sarifArtifactLoc{URI: "lib/list.c", URIBaseID: "%SRCROOT%"}},
		{"/src/application/x.c", "/src/app/prog", sarifArtifactLoc{URI: "file:///src/application/x.c"}},
		{"/src/app/../other/y.c", "/src/app/prog", sarifArtifactLoc{URI: "file:///src/other/y.c"}},
		{"src/a b.c", "/src/app/prog", sarifArtifactLoc{URI: "src/a%20b.c", URIBaseID: "%SRCROOT%"}},
		{"./malloc/malloc.c", "/usr/lib/x86_64-linux-gnu/libc.so.6", sarifArtifactLoc{URI: "./malloc/malloc.c"}},
		{"../csu/libc-start.c", "/src/app/prog", sarifArtifactLoc{URI: "../csu/libc-start.c"}},
	} {
		if got := c.artifact(tc.file, tc.module); got != tc.want {
			t.Errorf("artifact(%q, %q) = %+v, want %+v", tc.file, tc.module, got, tc.want)
		}
	}
}

func TestSARIFPrimaryFrame(t *testing.T) {
	c := &sarifContext{root: "/src/app"}
	fs := []Frame{
		{Function: "__libc_malloc", File: "malloc.c", Line: 3, Module: "/lib/x86_64-linux-gnu/libc.so.6"},
		{Function: "vendor_alloc", File: "/opt/vendor/v.c", Line: 7, Module: "/opt/vendor/libv.so"},
		{Function: "make_node", File: "/src/app/list.c", Line: 42, Module: "/src/app/prog"},
		{Function: "main", File: "/src/app/main.c", Line: 9, Module: "/src/app/prog"},
	}
	if got := c.primary(fs); got != 2 {
		t.Errorf("primary = %d, want 2 (the innermost frame under the source root)", got)
	}
	if got := c.primary(fs[:2]); got != 1 {
		t.Errorf("primary without the program's frames = %d, want 1 (not the C library)", got)
	}
	if got := c.primary(fs[:1]); got != -1 {
		t.Errorf("primary of a C library frame = %d, want -1", got)
	}
}

func TestFoldedNames(t *testing.T) {
	for _, c := range []struct {
		f    Frame
		want string
	}{
		{Frame{Function: "parse_request"}, "parse_request"},
		{Frame{Module: "/usr/lib/libfoo.so.1", Offset: 0x1a2b}, "libfoo.so.1+0x1a2b"},
		{Frame{Address: 0x401000}, "0x401000"},
	} {
		if got := FoldedFrame(c.f); got != c.want {
			t.Errorf("FoldedFrame(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
	if got := foldName("a;b\nc"); got != "a:b c" {
		t.Errorf("foldName = %q", got)
	}
}
