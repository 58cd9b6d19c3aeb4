package report

import (
	stdbytes "bytes"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

const docA = `{"schema":"leakpath.report/v1","command":["./app"],"pid":7,"snapshot":true,"leaks":[
 {"kind":"definite","bytes":100,"blocks":10,"function":"malloc","stack":[{"address":"0x401000","module":"/app","offset":"0x1000","function":"f","file":"a.c","line":3}]},
 {"kind":"reachable","bytes":50,"blocks":1,"stack":[{"address":"0x402000","module":"/app","offset":"0x2000","function":"g","file":"a.c","line":9}]},
 {"kind":"reachable","bytes":8,"blocks":1,"stack":[{"address":"0x7f0000403000","module":"/lib/libx.so","offset":"0x3000","function":"h"}]}]}`

// docB: the same program in another run (other addresses): f grew, g is
// gone, h is unchanged, k is new.
const docB = `{"schema":"leakpath.report/v1","command":["./app"],"pid":9,"leaks":[
 {"kind":"definite","bytes":300,"blocks":30,"stack":[{"address":"0x501000","module":"/app","offset":"0x1000","function":"f","file":"a.c","line":3}]},
 {"kind":"possible","bytes":10,"blocks":1,"stack":[{"address":"0x501000","module":"/app","offset":"0x1000","function":"f","file":"a.c","line":3}]},
 {"kind":"reachable","bytes":8,"blocks":1,"stack":[{"address":"0x7f1000403000","module":"/lib/libx.so","offset":"0x3000","function":"h"}]},
 {"kind":"indirect","bytes":64,"blocks":2,"stack":[{"address":"0x505000","module":"/app","offset":"0x5000","function":"k","file":"b.c","line":1}]}]}`

func readDocs(t *testing.T) (*Doc, *Doc) {
	t.Helper()
	a, err := ReadDoc(strings.NewReader(docA), "a.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadDoc(strings.NewReader(docB), "b.json")
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestDiffBySymbolizedSite: sites match by symbols across runs, kinds sum
// per site, and the most grown comes first.
func TestDiffBySymbolizedSite(t *testing.T) {
	a, b := readDocs(t)
	d := NewDiff(a, b, DiffOptions{})
	type row struct {
		fn            string
		dBytes, dBlks int64
		kind          event.LeakKind
	}
	var got []row
	for _, s := range d.sites {
		got = append(got, row{s.stack[0].Function, s.deltaBytes(), s.deltaBlocks(), s.kind})
	}
	want := []row{{"f", 210, 21, event.Definite}, {"k", 64, 2, event.Indirect}, {"g", -50, -1, event.Reachable}}
	if len(got) != len(want) {
		t.Fatalf("sites %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("site %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if d.same != 1 || d.TotalA != (KindTotal{158, 12}) || d.TotalB != (KindTotal{382, 34}) {
		t.Errorf("unchanged %d, totals %v %v; want 1, {158 12} {382 34}", d.same, d.TotalA, d.TotalB)
	}
	var text stdbytes.Buffer
	if err := d.Generate(&text, "text"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"change: +224 B in +22 blocks; 2 sites grew (1 new), 1 shrank (1 gone), 1 unchanged",
		"GREW +210 B in +21 blocks (definite) from malloc: 100 B in 10 blocks, then 310 B in 31 blocks",
		"GREW +64 B in +2 blocks (indirect): a new site", "#0  f (a.c:3)"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
	k := NewDiff(a, b, DiffOptions{Kinds: map[event.LeakKind]bool{event.Definite: true}})
	if len(k.sites) != 1 || k.TotalB != (KindTotal{300, 30}) {
		t.Errorf("definite only: %d sites, total B %v; want 1, {300 30}", len(k.sites), k.TotalB)
	}
}

func TestReadDocErrors(t *testing.T) {
	for _, in := range []string{"", "{", `{"schema":"x"}`, `[1,2]`, `{"schema":"leakpath.report/v1","leaks":{}}`} {
		if _, err := ReadDoc(strings.NewReader(in), "in"); err == nil {
			t.Errorf("ReadDoc(%q): no error", in)
		}
	}
}

// FuzzDiff: any document read is diffed and written without a panic.
func FuzzDiff(f *testing.F) {
	f.Add([]byte(docA))
	f.Add([]byte(docB))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := ReadDoc(stdbytes.NewReader(in), "in")
		if err != nil {
			return
		}
		a, _ := ReadDoc(strings.NewReader(docA), "a")
		for _, x := range [][2]*Doc{{a, d}, {d, a}, {d, d}} {
			df := NewDiff(x[0], x[1], DiffOptions{MaxSites: 2, MaxFrames: 2})
			for _, f := range []string{"text", "json"} {
				var out stdbytes.Buffer
				if err := df.Generate(&out, f); err != nil {
					t.Fatal(err)
				}
				if f == "json" {
					checkSchema(t, "the diff", out.Bytes())
				}
			}
		}
	})
}
