package usage_test

import (
	"encoding/json"
	"fmt"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// The heap-use fixture (testdata/fixtures/usage_*.c): an executable
// calling liba, which calls libb, and libb; threads of their own. Every
// block it allocates, in program order (threads are joined one by one):

// usageBlock is n blocks of size bytes allocated by thread along path
// (the functions from the stack's root in) by a call of fn ("": the new
// block of a realloc, whose call counts for the block it resized), and
// released by freeFn ("": kept to the end).
type usageBlock struct {
	thread string
	path   []string
	fn     string
	size   uint64
	n      uint64
	freeFn string
}

var usageBlocks = []usageBlock{
	0:  {"usage-main", []string{"main"}, "malloc", 50, 1, "free"},
	1:  {"usage-main", []string{"main"}, "posix_memalign", 128, 1, ""},
	2:  {"usage-main", []string{"main", "liba_work"}, "malloc", 200, 1, "free"},
	3:  {"usage-main", []string{"main", "liba_work", "libb_alloc"}, "malloc", 300, 1, "realloc"},
	4:  {"usage-main", []string{"main", "liba_work", "libb_work"}, "malloc", 100, 3, "free"},
	5:  {"usage-main", []string{"main", "liba_work", "libb_work"}, "malloc", 1000, 1, ""},
	6:  {"usage-main", []string{"main", "liba_work"}, "", 3000, 1, "free"}, // realloc of 3, freed by libb_release
	7:  {"usage-main", []string{"main", "liba_work"}, "malloc", 2000, 1, ""},
	8:  {"usage-main", []string{"main", "libb_work"}, "malloc", 100, 3, "free"},
	9:  {"usage-main", []string{"main", "libb_work"}, "malloc", 1000, 1, ""},
	10: {"usage-main", []string{"main"}, "calloc", 600, 1, "free"}, // freed by app-thread
	11: {"liba-thread", []string{"liba_thread"}, "malloc", 7000, 1, "free"},
	12: {"liba-thread", []string{"liba_thread", "libb_alloc"}, "malloc", 400, 1, ""},
	13: {"libb-thread", []string{"libb_thread"}, "calloc", 300, 1, "free"},
	14: {"libb-thread", []string{"libb_thread"}, "posix_memalign", 640, 1, "free"},
	15: {"libb-thread", []string{"libb_thread"}, "malloc", 5000, 1, ""},
	16: {"app-thread", []string{"app_thread"}, "malloc", 77, 1, "free"}, // freed by libb_release
}

// usageTimeline is the order of the allocations (+i) and frees (-i) of
// usageBlocks.
const usageTimeline = "+0 +1 +2 +3 +4 -4 +4 -4 +4 -4 +5 -3 +6 -2 -6 +7 +8 -8 +8 -8 +8 -8 +9 +10 " +
	"+11 -11 +12 +13 +14 +15 -13 -14 -10 +16 -16 -0"

// runTimeRes is run --time-resolution's default (cmd/leakpath's
// defaultTimeRes): the most a run's times and its trace's may differ.
const runTimeRes = 4 * time.Millisecond

// usageModules says where the fixture's functions are.
var usageModules = map[string]string{"main": "exe", "app_thread": "exe", "liba_work": "liba", "liba_thread": "liba",
	"libb_alloc": "libb", "libb_work": "libb", "libb_thread": "libb"}

// usageUnits returns the units block b counts for (internal/usage's
// rules, on the fixture's own paths).
func usageUnits(b usageBlock, by, attr string) []string {
	unit := func(f string) string {
		if by == "library" {
			return usageModules[f]
		}
		return f
	}
	last := b.path[len(b.path)-1]
	switch {
	case by == "thread":
		return []string{b.thread}
	case attr == "caller":
		return []string{unit(last)}
	case attr == "entry" && by == "function":
		if len(b.path) > 1 {
			return []string{b.path[1]}
		}
		return []string{b.path[0]}
	case attr == "entry":
		for _, f := range b.path {
			if usageModules[f] != "exe" {
				return []string{usageModules[f]}
			}
		}
		return []string{"exe"}
	}
	var out []string
	for _, f := range b.path {
		if u := unit(f); !contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// usageRow is what the tests compare of a unit.
type usageRow struct {
	Current, CurrentBlocks, Allocated, AllocatedBlocks int64
	Calls                                              map[string]uint64
}

func (r *usageRow) add(o usageRow) {
	r.Current += o.Current
	r.CurrentBlocks += o.CurrentBlocks
	r.Allocated += o.Allocated
	r.AllocatedBlocks += o.AllocatedBlocks
	if r.Calls == nil {
		r.Calls = map[string]uint64{}
	}
	for k, v := range o.Calls {
		if v != 0 {
			r.Calls[k] += v
		}
	}
}

// expectedUsage computes the rows of the fixture's units.
func expectedUsage(by, attr string) map[string]*usageRow {
	out := map[string]*usageRow{}
	for _, b := range usageBlocks {
		row := usageRow{Allocated: int64(b.size * b.n), AllocatedBlocks: int64(b.n), Calls: map[string]uint64{}}
		if b.fn != "" {
			row.Calls[b.fn] += b.n
		}
		if b.freeFn != "" {
			row.Calls[b.freeFn] += b.n
		} else {
			row.Current, row.CurrentBlocks = int64(b.size*b.n), int64(b.n)
		}
		for _, u := range usageUnits(b, by, attr) {
			if out[u] == nil {
				out[u] = &usageRow{}
			}
			out[u].add(row)
		}
	}
	return out
}

// expectedMax simulates usageTimeline: the maximum of each unit's net size
// when every block is seen (no folding).
func expectedMax(by, attr string) map[string]int64 {
	cur, max := map[string]int64{}, map[string]int64{}
	for _, s := range strings.Fields(usageTimeline) {
		i, _ := strconv.Atoi(s[1:])
		b := usageBlocks[i]
		d := int64(b.size)
		if s[0] == '-' {
			d = -d
		}
		for _, u := range usageUnits(b, by, attr) {
			cur[u] += d
			if cur[u] > max[u] {
				max[u] = cur[u]
			}
		}
	}
	return max
}

// usageDoc is leakpath.usage/v1 as the tests read it.
type usageDoc struct {
	Schema      string      `json:"schema"`
	By          string      `json:"by"`
	Attribution string      `json:"attribution"`
	Units       []usageUnit `json:"units"`
	Intervals   []struct {
		StartNS int64       `json:"start_ns"`
		EndNS   int64       `json:"end_ns"`
		Units   []usageUnit `json:"units"`
	} `json:"intervals"`
	Processes []json.RawMessage `json:"processes"`
}

type usageUnit struct {
	Name            string            `json:"name"`
	Kind            string            `json:"kind"`
	Module          string            `json:"module"`
	TID             int               `json:"tid"`
	ThreadName      string            `json:"thread_name"`
	ThreadStart     *float64          `json:"thread_start_seconds"`
	ThreadExit      *float64          `json:"thread_exit_seconds"`
	CurrentBytes    int64             `json:"current_bytes"`
	CurrentBlocks   int64             `json:"current_blocks"`
	MinBytes        int64             `json:"min_bytes"`
	MaxBytes        int64             `json:"max_bytes"`
	MaxSeconds      float64           `json:"max_seconds"`
	AllocatedBytes  int64             `json:"allocated_bytes"`
	AllocatedBlocks int64             `json:"allocated_blocks"`
	NetBytes        int64             `json:"net_bytes"`
	Site            uint32            `json:"site"`
	Calls           map[string]uint64 `json:"calls"`
	Stack           []e2e.Frame       `json:"stack"`
}

func (u *usageUnit) row() usageRow {
	r := usageRow{Current: u.CurrentBytes, CurrentBlocks: u.CurrentBlocks, Allocated: u.AllocatedBytes,
		AllocatedBlocks: u.AllocatedBlocks, Calls: map[string]uint64{}}
	for k, v := range u.Calls {
		if v != 0 {
			r.Calls[k] = v
		}
	}
	return r
}

var (
	usageAppOnce sync.Once
	usageApp     string
	usageAppErr  string
)

// usageFixture builds the fixture: libusageb.so, libusagea.so (linked
// with libb) and the executable (linked with both, found by its rpath).
func usageFixture(t *testing.T) string {
	usageAppOnce.Do(func() {
		dir := filepath.Join(e2e.Fixtures, "usage")
		os.MkdirAll(dir, 0o755)
		src := filepath.Join(e2e.Root, "testdata", "fixtures")
		for _, b := range []struct {
			out  string
			args []string
		}{
			{filepath.Join(dir, "libusageb.so"), []string{"-shared", "-fPIC", filepath.Join(src, "usage_libb.c")}},
			{filepath.Join(dir, "libusagea.so"), []string{"-shared", "-fPIC", filepath.Join(src, "usage_liba.c"), "-L" + dir, "-lusageb", "-Wl,-rpath," + dir}},
			{filepath.Join(dir, "usage_app"), []string{filepath.Join(src, "usage_app.c"), "-L" + dir, "-lusagea", "-lusageb", "-Wl,-rpath," + dir}},
		} {
			if err := testfixture.Compile("cc", b.out, append(append([]string{"-g", "-O0"}, b.args...), "-pthread")...); err != nil {
				usageAppErr = err.Error()
				return
			}
		}
		usageApp = filepath.Join(dir, "usage_app")
	})
	if usageAppErr != "" {
		t.Fatal(usageAppErr)
	}
	return usageApp
}

// usageReport runs `leakpath report --format json ARGS TRACE`.
func usageReport(t *testing.T, trace string, args ...string) *usageDoc {
	t.Helper()
	cmd := exec.Command(e2e.Bin, append(append([]string{"report", "--format", "json"}, args...), trace)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("leakpath report %v: %v\n%s", args, err, stderr.String())
	}
	return parseUsage(t, out)
}

func parseUsage(t *testing.T, b []byte) *usageDoc {
	t.Helper()
	d := new(usageDoc)
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatalf("usage JSON: %v\n%s", err, b)
	}
	if d.Schema != "leakpath.usage/v1" {
		t.Fatalf("schema %q", d.Schema)
	}
	return d
}

// fixtureUnit names the fixture unit u is (exe, liba, libb, a function or
// a thread of the fixture), or "" for the C runtime's units.
func fixtureUnit(u *usageUnit, by string) string {
	switch by {
	case "library":
		switch base := filepath.Base(u.Name); {
		case base == "libusagea.so":
			return "liba"
		case base == "libusageb.so":
			return "libb"
		case base == "usage_app":
			return "exe"
		}
	case "function":
		if m, ok := usageModules[u.Name]; ok {
			want := map[string]string{"exe": "usage_app", "liba": "libusagea.so", "libb": "libusageb.so"}[m]
			if filepath.Base(u.Module) == want {
				return u.Name
			}
		}
	case "thread":
		if u.ThreadName != "" && strings.HasSuffix(u.ThreadName, "-thread") || u.ThreadName == "usage-main" {
			return u.ThreadName
		}
	}
	return ""
}

// runtimeUnderMain sums the sites of the C runtime's own allocations that
// main called (pthread_create's), which the fixture does not list: they
// count for main and the executable in inclusive attribution. No other
// fixture function may be on their stacks.
func runtimeUnderMain(t *testing.T, sites *usageDoc) usageRow {
	var r usageRow
	for _, u := range sites.Units {
		if len(u.Stack) == 0 {
			continue
		}
		if _, ours := usageModules[u.Stack[0].Function]; ours {
			continue
		}
		var fns []string
		for _, f := range u.Stack {
			if _, ours := usageModules[f.Function]; ours {
				fns = append(fns, f.Function)
			}
		}
		switch {
		case len(fns) == 0:
		case len(fns) == 1 && fns[0] == "main":
			r.add(u.row())
		default:
			t.Fatalf("a runtime allocation under the fixture's %v (site %s): update the test", fns, u.Name)
		}
	}
	return r
}

// TestUsageAttribution: every row of every unit and attribution equals
// what the fixture allocates, frees and keeps, with folding and without;
// the other rows (the C runtime's own allocations) sum up with them to the
// totals. Without folding every block is seen, so each unit's maximum is
// the fixture's too. A block still pending in its thread's fold window
// when another thread frees it reaches the collector from the freeing
// thread; its ALLOC_LATE record names the thread that allocated it, so
// rows by thread are exact with folding too.
func TestUsageAttribution(t *testing.T) {
	app := usageFixture(t)
	dir := t.TempDir()
	for _, fold := range []bool{true, false} {
		trace := filepath.Join(dir, fmt.Sprintf("usage-%t.lpt", fold))
		runJSON := filepath.Join(dir, fmt.Sprintf("usage-%t.json", fold))
		r := e2e.Leakpath(t, []string{"-o", trace, "--fold=" + strconv.FormatBool(fold),
			"--by", "library", "--attribution", "entry", "--usage-json", runJSON}, nil, app)
		if r.Code != 0 {
			t.Fatalf("exit %d\n%s", r.Code, r.Stderr)
		}
		totals := r.Report.Totals
		sites := usageReport(t, trace, "--by", "site")
		extra := runtimeUnderMain(t, sites)
		for _, c := range []struct{ by, attr string }{
			{"library", "caller"}, {"library", "entry"}, {"library", "inclusive"},
			{"function", "caller"}, {"function", "entry"}, {"function", "inclusive"},
			{"thread", "caller"},
		} {
			name := fmt.Sprintf("%s/%s (fold %t)", c.by, c.attr, fold)
			d := usageReport(t, trace, "--by", c.by, "--attribution", c.attr)
			wantAttr := c.attr
			if c.by == "thread" {
				wantAttr = "none"
			}
			if d.By != c.by || d.Attribution != wantAttr {
				t.Errorf("%s: by %q, attribution %q", name, d.By, d.Attribution)
			}
			want := expectedUsage(c.by, c.attr)
			if c.attr == "inclusive" {
				want[map[string]string{"library": "exe", "function": "main"}[c.by]].add(extra)
			}
			maxes := expectedMax(c.by, c.attr)
			var sum, mainThread usageRow
			seen := map[string]bool{}
			for i := range d.Units {
				u := &d.Units[i]
				sum.add(u.row())
				id := fixtureUnit(u, c.by)
				if id == "usage-main" {
					mainThread = u.row()
				}
				if id == "" || id == "usage-main" {
					continue // the runtime's, or holding the runtime's
				}
				seen[id] = true
				if w := want[id]; w == nil {
					t.Errorf("%s: unexpected unit %s (%s)", name, u.Name, id)
				} else if got := u.row(); !reflect.DeepEqual(got, *w) {
					t.Errorf("%s: unit %s:\n got %+v\nwant %+v", name, id, got, *w)
				}
				if !fold && !(c.attr == "inclusive" && (id == "exe" || id == "main")) &&
					(u.MaxBytes != maxes[id] || u.MinBytes != 0) {
					t.Errorf("%s: %s: max %d, min %d; want max %d, min 0", name, id, u.MaxBytes, u.MinBytes, maxes[id])
				}
			}
			for id := range want {
				if !seen[id] && id != "usage-main" {
					t.Errorf("%s: no row for %s", name, id)
				}
			}
			if c.by == "thread" {
				// The main thread holds the fixture's blocks and the runtime's.
				if w := want["usage-main"]; mainThread.Allocated < w.Allocated || mainThread.Current < w.Current {
					t.Errorf("%s: usage-main %+v, less than the fixture's own %+v", name, mainThread, *w)
				}
				for _, u := range d.Units {
					if id := fixtureUnit(&u, "thread"); id != "" && (u.ThreadStart == nil ||
						id != "usage-main" && (u.ThreadExit == nil || *u.ThreadExit < *u.ThreadStart)) {
						t.Errorf("%s: thread %s started %v, exited %v", name, id, u.ThreadStart, u.ThreadExit)
					}
				}
			}
			if c.attr == "inclusive" {
				continue // rows overlap
			}
			// All rows sum to the totals.
			if sum.Allocated != int64(totals.AllocatedBytes) || sum.AllocatedBlocks != int64(totals.Allocations) ||
				sum.Current != int64(totals.LeakedBytes) || sum.CurrentBlocks != int64(totals.LeakedBlocks) {
				t.Errorf("%s: rows sum to %+v; totals %+v", name, sum, totals)
			}
			for fn, n := range totals.Calls {
				if sum.Calls[fn] != n {
					t.Errorf("%s: %s called %d times in all rows, %d in the totals", name, fn, sum.Calls[fn], n)
				}
			}
		}

		// The run's own usage JSON is the report's, but for times: the run
		// converts them with its final clock calibration, and the trace
		// keeps them to at most run --time-resolution's default (4 ms:
		// 2^21 ns, rounded down).
		b, err := os.ReadFile(runJSON)
		if err != nil {
			t.Fatal(err)
		}
		fromRun, fromReport := parseUsage(t, b), usageReport(t, trace, "--by", "library", "--attribution", "entry")
		if len(fromRun.Units) == len(fromReport.Units) {
			for i := range fromRun.Units {
				a, b := &fromRun.Units[i], &fromReport.Units[i]
				if math.Abs(a.MaxSeconds-b.MaxSeconds) > runTimeRes.Seconds() {
					t.Errorf("%s: at its max after %.4f s in the run, %.4f s in its trace", a.Name, a.MaxSeconds, b.MaxSeconds)
				}
				a.MaxSeconds, b.MaxSeconds = 0, 0
			}
		}
		if !reflect.DeepEqual(fromRun.Units, fromReport.Units) {
			t.Errorf("usage of the run:\n%+v\nof its trace:\n%+v", fromRun.Units, fromReport.Units)
		}
		// The run printed the table after the leak report.
		leaks := strings.Index(r.Text, "leak groups")
		table := strings.Index(r.Text, "leakpath: heap use by library, entry attribution")
		if leaks < 0 || table < leaks {
			t.Fatalf("no usage table after the leak report:\n%s", r.Text)
		}
		liba := expectedUsage("library", "entry")["liba"]
		for _, s := range []string{"usage_app (executable)", "(C runtime)", report.Bytes(uint64(liba.Allocated)) + "  ",
			report.Count(liba.Calls["malloc"]), "posix_memalign"} {
			if !strings.Contains(r.Text[table:], s) {
				t.Errorf("usage table without %q:\n%s", s, r.Text[table:])
			}
		}
	}
}

// TestUsageIntervals: per 10 ms (the fixture's phases are 20 ms apart),
// each unit's intervals sum to its totals, in text and JSON.
func TestUsageIntervals(t *testing.T) {
	app := usageFixture(t)
	trace := filepath.Join(t.TempDir(), "usage.lpt")
	if r := e2e.Leakpath(t, []string{"-o", trace}, nil, app); r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	for _, by := range []string{"library", "function", "thread", "site"} {
		d := usageReport(t, trace, "--by", by, "--attribution", "inclusive", "--interval", "10ms")
		if len(d.Intervals) < 4 {
			t.Errorf("%s: %d intervals, want at least 4 (phases 20 ms apart)", by, len(d.Intervals))
		}
		sums := map[string]*usageRow{}
		net := map[string]int64{}
		for k, iv := range d.Intervals {
			if iv.EndNS-iv.StartNS != 10e6 || k > 0 && iv.StartNS < d.Intervals[k-1].EndNS {
				t.Errorf("%s: interval %d: %d to %d ns", by, k, iv.StartNS, iv.EndNS)
			}
			for _, u := range iv.Units {
				key := fmt.Sprintf("%s#%d", u.Name, u.Site)
				if sums[key] == nil {
					sums[key] = &usageRow{}
				}
				r := u.row()
				r.Current, r.CurrentBlocks = 0, 0
				sums[key].add(r)
				net[key] += u.NetBytes
				if u.MinBytes > u.CurrentBytes || u.MaxBytes < u.CurrentBytes {
					t.Errorf("%s: %s at %d ns: %d outside min %d, max %d", by, u.Name, iv.StartNS, u.CurrentBytes, u.MinBytes, u.MaxBytes)
				}
			}
		}
		for _, u := range d.Units {
			key := fmt.Sprintf("%s#%d", u.Name, u.Site)
			s := sums[key]
			if s == nil {
				t.Errorf("%s: %s in no interval", by, u.Name)
				continue
			}
			want := u.row()
			want.Current, want.CurrentBlocks = 0, 0
			if !reflect.DeepEqual(*s, want) || net[key] != u.CurrentBytes {
				t.Errorf("%s: %s: intervals sum to %+v, net %d; the run: %+v", by, key, *s, net[key], u.row())
			}
		}
	}
	text, err := exec.Command(e2e.Bin, "report", "--by", "thread", "--interval", "10ms", trace).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"heap use by thread", "liba-thread (tid ", "libb-thread (tid ", "app-thread (tid ",
		"usage-main (tid ", "over time, per 10ms", "5,000 B"} {
		if !strings.Contains(string(text), s) {
			t.Errorf("text without %q:\n%s", s, text)
		}
	}
	// The fixture works in five phases 20 ms apart: as many slices, each
	// 10 ms long. (Which slice a phase falls in moves with the trace's
	// 4 ms time resolution: a phase 20.5 ms in is dated 16.8 ms.)
	spans := intervalHeader.FindAllStringSubmatch(string(text), -1)
	for _, m := range spans {
		if lo, hi := atof(m[1]), atof(m[2]); hi-lo < 0.0099 || hi-lo > 0.0101 {
			t.Errorf("slice %s to %s s is not 10 ms", m[1], m[2])
		} else if k := lo / 0.010; k-math.Round(k) > 0.01 || math.Round(k)-k > 0.01 {
			// Slices start at the run's start; which one the first phase
			// falls in depends on how soon the program got going.
			t.Errorf("slice %s to %s s does not start at a multiple of 10 ms", m[1], m[2])
		}
	}
	if len(spans) < 5 {
		t.Errorf("%d slices, want one a phase at least (5):\n%s", len(spans), text)
	}
}

var intervalHeader = regexp.MustCompile(`(?m)^\s+(\d+\.\d{3}) to (\d+\.\d{3}) s$`)

func atof(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// TestUsageFlags: bad values are usage errors.
func TestUsageFlags(t *testing.T) {
	for _, args := range [][]string{
		{"report", "--by", "planet", "x.lpt"},
		{"report", "--by", "library", "--attribution", "outer", "x.lpt"},
		{"report", "--interval", "1s", "x.lpt"},
		{"run", "--by", "library", "--interval", "-1s", "--", "true"},
		{"run", "--usage-json", "u.json", "--", "true"},
	} {
		cmd := exec.Command(e2e.Bin, args...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "leakpath") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

// TestUsageFork: a table per process image; the fork child starts with
// what it inherited (fork.c: the parent allocates A (64) and B (128) and
// forks; the child frees A and keeps C (256); the parent frees B and keeps
// D (512)).
func TestUsageFork(t *testing.T) {
	bin := e2e.Fixture(t, "fork.c")
	uj := filepath.Join(t.TempDir(), "usage.json")
	r := e2e.Leakpath(t, []string{"--by", "library", "--usage-json", uj}, nil, bin)
	if r.Code != 0 {
		t.Fatalf("exit %d", r.Code)
	}
	b, err := os.ReadFile(uj)
	if err != nil {
		t.Fatal(err)
	}
	d := parseUsage(t, b)
	if len(d.Processes) != 2 {
		t.Fatalf("%d processes in the usage JSON, want the parent and the child", len(d.Processes))
	}
	type image struct {
		PID   int `json:"pid"`
		Units []struct {
			usageUnit
			Inherited int64 `json:"inherited_bytes"`
		} `json:"units"`
	}
	var exe []int64
	for _, raw := range d.Processes {
		var im image
		if err := json.Unmarshal(raw, &im); err != nil {
			t.Fatal(err)
		}
		for _, u := range im.Units {
			if u.Kind == "executable" {
				exe = append(exe, u.CurrentBytes, u.Inherited, u.MinBytes, u.MaxBytes, u.AllocatedBytes)
			}
		}
	}
	// The parent: A and B (192), B freed, D: 576 now and at most, 704
	// allocated. The child: inherited A and B (192), A freed (128, its
	// minimum), C: 384 now and at most, 256 allocated.
	want := []int64{576, 0, 0, 576, 704, 384, 192, 128, 384, 256}
	if !reflect.DeepEqual(exe, want) {
		t.Errorf("executable's rows (current, inherited, min, max, allocated per image) %v, want %v", exe, want)
	}
	if n := strings.Count(r.Text, "leakpath: heap use by library"); n != 2 {
		t.Errorf("%d usage tables, want 2:\n%s", n, r.Text)
	}
}
