package usage_test

import (
	"encoding/json"
	"fmt"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// percallFixture builds libpercall.so and the program calling it.
func percallFixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(e2e.Fixtures, "percall")
	os.MkdirAll(dir, 0o755)
	src := filepath.Join(e2e.Root, "testdata", "fixtures")
	app := filepath.Join(dir, "percall_app")
	for _, b := range []struct {
		out  string
		args []string
	}{
		{filepath.Join(dir, "libpercall.so"), []string{"-shared", "-fPIC", filepath.Join(src, "percall_lib.c")}},
		{app, []string{filepath.Join(src, "percall_app.c"), "-L" + dir, "-lpercall", "-Wl,-rpath," + dir}},
	} {
		if err := testfixture.Compile("cc", b.out, append(append([]string{"-g", "-O0"}, b.args...), "-pthread")...); err != nil {
			t.Fatal(err)
		}
	}
	return app
}

// percallRow is one invocation's row as the test expects it.
type percallRow struct {
	name                   string // the unit, and "call N"
	thread                 bool   // in the worker thread
	allocated, blocks      int64
	current, currentBlocks int64
	mallocs, frees         uint64
}

// TestPerCall: with --per-call, each invocation of an entry library or
// function is a row of its own whose counts are that one call's, in the
// order they ran; frees count for the invocation that allocated.
func TestPerCall(t *testing.T) {
	app := percallFixture(t)
	// What each call of the fixture costs (percall_lib.c).
	parse := func(n int64) (int64, int64, int64, int64, uint64, uint64) {
		return 100 * n, n, 100, 1, uint64(n), uint64(n - 1)
	}
	row := func(name string, thread bool, a, b, c, cb int64, m, f uint64) percallRow {
		return percallRow{name, thread, a, b, c, cb, m, f}
	}
	p3a, p3b, p3c, p3d, p3m, p3f := parse(3)
	p5a, p5b, p5c, p5d, p5m, p5f := parse(5)
	p2a, p2b, p2c, p2d, p2m, p2f := parse(2)
	p4a, p4b, p4c, p4d, p4m, p4f := parse(4)
	byLibrary := []percallRow{
		row("libpercall.so call 1", false, p3a, p3b, p3c, p3d, p3m, p3f),
		row("libpercall.so call 2", false, 200, 5, 200, 5, 5, 0),
		row("libpercall.so call 3", false, p5a, p5b, p5c, p5d, p5m, p5f),
		row("percall_app call 1", false, 10, 1, 0, 0, 1, 1),
		row("libpercall.so call 4", false, p2a, p2b, p2c, p2d, p2m, p2f),
		row("libpercall.so call 5", false, 80, 2, 80, 2, 2, 0), // the loop's two calls: one row
		row("libpercall.so call 6", true, p4a, p4b, p4c, p4d, p4m, p4f),
	}
	byFunction := []percallRow{
		row("pc_parse call 1", false, p3a, p3b, p3c, p3d, p3m, p3f),
		row("pc_index call 1", false, 200, 5, 200, 5, 5, 0),
		row("pc_parse call 2", false, p5a, p5b, p5c, p5d, p5m, p5f),
		row("main call 1", false, 10, 1, 0, 0, 1, 1),
		row("pc_parse call 3", false, p2a, p2b, p2c, p2d, p2m, p2f),
		row("pc_index call 2", false, 80, 2, 80, 2, 2, 0),
		row("pc_parse call 4", true, p4a, p4b, p4c, p4d, p4m, p4f),
	}
	dir := t.TempDir()
	trace := filepath.Join(dir, "pc.lpt")
	runJSON := filepath.Join(dir, "usage.json")
	r := e2e.Leakpath(t, []string{"-o", trace, "--by", "library", "--per-call", "--usage-json", runJSON}, nil, app)
	if r.Code != 0 {
		t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
	}
	b, err := os.ReadFile(runJSON)
	if err != nil {
		t.Fatal(err)
	}
	checkPerCall(t, "run --by library", parsePerCall(t, b), byLibrary)
	if !strings.Contains(r.Text, "libpercall.so call 1 (tid ") {
		t.Errorf("the text table lacks the per-call rows:\n%s", r.Text)
	}
	for _, c := range []struct {
		by   string
		want []percallRow
	}{{"library", byLibrary}, {"function", byFunction}} {
		out, err := exec.Command(e2e.Bin, "report", "--format", "json", "--by", c.by, "--per-call", trace).Output()
		if err != nil {
			t.Fatalf("report --by %s --per-call: %v", c.by, err)
		}
		checkPerCall(t, "report --by "+c.by, parsePerCall(t, out), c.want)
	}
	// Per call needs entry units.
	out, err := exec.Command(e2e.Bin, "report", "--by", "library", "--per-call", "--attribution", "caller", trace).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "entry") {
		t.Errorf("--per-call --attribution caller: %v, %s; want an error naming entry attribution", err, out)
	}
}

type percallDoc struct {
	PerCall bool `json:"per_call"`
	Units   []struct {
		usageUnit
		Call    int      `json:"call"`
		CallTID int      `json:"call_tid"`
		First   *float64 `json:"call_first_seconds"`
	} `json:"units"`
}

func parsePerCall(t *testing.T, b []byte) *percallDoc {
	t.Helper()
	d := new(percallDoc)
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatalf("usage JSON: %v\n%s", err, b)
	}
	if !d.PerCall {
		t.Fatalf("usage JSON does not say per_call")
	}
	return d
}

// checkPerCall compares the fixture's rows (not the C runtime's) with
// want, in order.
func checkPerCall(t *testing.T, what string, d *percallDoc, want []percallRow) {
	t.Helper()
	var got []percallRow
	mainTID := 0
	for _, u := range d.Units {
		name := filepath.Base(u.Name)
		if u.Call == 0 || u.First == nil {
			continue
		}
		if !strings.HasPrefix(name, "libpercall") && !strings.HasPrefix(name, "percall_app") && !strings.HasPrefix(name, "pc_") && !strings.HasPrefix(name, "main ") {
			continue // the C runtime's (thread creation)
		}
		if mainTID == 0 {
			mainTID = u.CallTID
		}
		got = append(got, percallRow{name, u.CallTID != mainTID, u.AllocatedBytes, u.AllocatedBlocks,
			u.CurrentBytes, u.CurrentBlocks, u.Calls["malloc"], u.Calls["free"]})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: per-call rows\n got %v\nwant %v", what, got, want)
	}
}
