package heap_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// scopeJSON is an entry of the report's "scopes" as the tests read it.
type scopeJSON struct {
	Name            string            `json:"name"`
	Entered         uint64            `json:"entered"`
	Closed          uint64            `json:"closed"`
	Unclosed        uint64            `json:"unclosed"`
	Recursive       uint64            `json:"recursive"`
	Threads         int               `json:"threads"`
	AllocatedBytes  uint64            `json:"allocated_bytes"`
	AllocatedBlocks uint64            `json:"allocated_blocks"`
	FreedBytes      uint64            `json:"freed_bytes"`
	FreedBlocks     uint64            `json:"freed_blocks"`
	NetBytes        int64             `json:"net_bytes"`
	HeldBytes       uint64            `json:"held_bytes"`
	HeldBlocks      uint64            `json:"held_blocks"`
	HeldLiveBytes   uint64            `json:"held_live_bytes"`
	HeldLiveBlocks  uint64            `json:"held_live_blocks"`
	LiveBytes       uint64            `json:"live_bytes"`
	TotalSeconds    float64           `json:"total_seconds"`
	LongestSeconds  float64           `json:"longest_seconds"`
	FirstSeconds    float64           `json:"first_seconds"`
	LastSeconds     float64           `json:"last_seconds"`
	Calls           map[string]uint64 `json:"calls"`
	Held            []struct {
		Bytes      uint64      `json:"bytes"`
		Blocks     uint64      `json:"blocks"`
		LiveBlocks uint64      `json:"live_blocks"`
		Addresses  []string    `json:"addresses"`
		Stack      []e2e.Frame `json:"stack"`
	} `json:"held"`
}

// scopeCounts is what a fixture's comment says of one scope.
type scopeCounts struct {
	entered, recursive, threads          uint64
	allocBytes, allocBlocks              uint64
	freedBytes, freedBlocks              uint64
	heldBytes, heldBlocks, heldLiveBytes uint64
}

func (s *scopeJSON) counts() scopeCounts {
	return scopeCounts{s.Entered, s.Recursive, uint64(s.Threads), s.AllocatedBytes, s.AllocatedBlocks,
		s.FreedBytes, s.FreedBlocks, s.HeldBytes, s.HeldBlocks, s.HeldLiveBytes}
}

// readScopes returns the scopes of the report's main image, by name.
func readScopes(t *testing.T, reportJSON []byte) map[string]*scopeJSON {
	t.Helper()
	var doc struct {
		Scopes         []*scopeJSON `json:"scopes"`
		ScopeAnomalies uint64       `json:"scope_anomalies"`
	}
	if err := json.Unmarshal(reportJSON, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ScopeAnomalies != 0 {
		t.Errorf("%d scope anomalies", doc.ScopeAnomalies)
	}
	out := map[string]*scopeJSON{}
	for _, s := range doc.Scopes {
		out[s.Name] = s
	}
	return out
}

func checkScopeCounts(t *testing.T, what string, got map[string]*scopeJSON, want map[string]scopeCounts) {
	t.Helper()
	for name, w := range want {
		s := got[name]
		if s == nil {
			t.Errorf("%s: no scope %q", what, name)
			continue
		}
		if c := s.counts(); c != w {
			t.Errorf("%s: scope %q:\n got %+v\nwant %+v", what, name, c, w)
		}
		if s.Closed != s.Entered || s.Unclosed != 0 {
			t.Errorf("%s: scope %q entered %d, closed %d, never closed %d", what, name, s.Entered, s.Closed, s.Unclosed)
		}
		if s.TotalSeconds <= 0 || s.LongestSeconds <= 0 || s.LongestSeconds > s.TotalSeconds ||
			s.FirstSeconds <= 0 || s.LastSeconds < s.FirstSeconds+s.LongestSeconds*0.999 {
			t.Errorf("%s: scope %q: times total %g longest %g first %g last %g", what, name,
				s.TotalSeconds, s.LongestSeconds, s.FirstSeconds, s.LastSeconds)
		}
	}
	if len(got) != len(want) {
		var names []string
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Errorf("%s: scopes %v, want %d", what, names, len(want))
	}
}

// scopesC is what testdata/fixtures/scopes.c says of its scopes.
var scopesC = map[string]scopeCounts{
	"frees_all": {entered: 1, allocBytes: 600, allocBlocks: 3, freedBytes: 600, freedBlocks: 3},
	"leaks":     {entered: 1, allocBytes: 96, allocBlocks: 2, freedBytes: 32, freedBlocks: 1, heldBytes: 64, heldBlocks: 1, heldLiveBytes: 64},
	"outer": {entered: 1, allocBytes: 1035, allocBlocks: 4, freedBytes: 1010, freedBlocks: 2,
		heldBytes: 25, heldBlocks: 2, heldLiveBytes: 5},
	"inner":   {entered: 1, allocBytes: 30, allocBlocks: 2, freedBytes: 10, freedBlocks: 1, heldBytes: 20, heldBlocks: 1},
	"loop":    {entered: 1000, allocBytes: 16000, allocBlocks: 1000, freedBytes: 16000, freedBlocks: 1000},
	"worker":  {entered: 2, threads: 2, allocBytes: 324, allocBlocks: 4, freedBytes: 300, freedBlocks: 2, heldBytes: 24, heldBlocks: 2, heldLiveBytes: 24},
	"t1":      {entered: 1, allocBytes: 108, allocBlocks: 2, freedBytes: 100, freedBlocks: 1, heldBytes: 8, heldBlocks: 1, heldLiveBytes: 8},
	"t2":      {entered: 1, allocBytes: 216, allocBlocks: 2, freedBytes: 200, freedBlocks: 1, heldBytes: 16, heldBlocks: 1, heldLiveBytes: 16},
	"realloc": {entered: 1, allocBytes: 80, allocBlocks: 1, freedBytes: 40, freedBlocks: 1, heldBytes: 80, heldBlocks: 1, heldLiveBytes: 80},
}

func init() {
	for _, n := range []string{"frees_all", "leaks", "outer", "inner", "loop", "realloc"} {
		c := scopesC[n]
		c.threads = 1
		scopesC[n] = c
	}
	for _, n := range []string{"t1", "t2"} {
		c := scopesC[n]
		c.threads = 1
		scopesC[n] = c
	}
}

// TestScopesC: the C fixture's scopes (LEAKPATH_SCOPE by cleanup, the
// begin/end calls, nested, in a loop, on two threads at once, leaking,
// freeing everything, around a realloc) have exactly the numbers it
// knows, folded or not, built as PIE or not; without leakpath it behaves
// the same; the trace has a begin and an end marker per entry, and
// `report --by scope` reads the same numbers back from it.
func TestScopesC(t *testing.T) {
	for _, build := range []struct {
		name  string
		flags []string
	}{{"pie", nil}, {"no-pie", []string{"-no-pie", "-fno-pie"}}} {
		t.Run(build.name, func(t *testing.T) {
			bin := e2e.Fixture(t, "scopes.c", append([]string{e2e.IncludeFlag()}, build.flags...)...)
			want := e2e.Native(t, nil, bin)
			if want.Code != 3 || string(want.Stdout) != "scopes: start\nscopes: done\n" {
				t.Fatalf("without leakpath: exit %d, stdout %q", want.Code, want.Stdout)
			}
			trace := filepath.Join(t.TempDir(), "scopes.lpt")
			r := e2e.Leakpath(t, []string{"-o", trace}, nil, bin)
			e2e.SameBehaviour(t, r, want)
			got := readScopes(t, r.ReportJSON)
			checkScopeCounts(t, "run", got, scopesC)
			if !strings.Contains(r.Text, "SCOPES: 9 scopes entered 1,009 times") ||
				!strings.Contains(r.Text, `HELD by scope "leaks" when it closed: 64 B in 1 block; 64 B in 1 block never freed`) {
				t.Errorf("text report without the scopes:\n%s", r.Text)
			}
			// Held blocks by address and site.
			if h := got["leaks"].Held; len(h) != 1 || len(h[0].Addresses) != 1 || !e2e.StackHas(h[0].Stack, "leaks") {
				t.Errorf("leaks held %+v, want one block allocated in leaks", h)
			}
			if c := got["loop"].Calls; c["malloc"] != 1000 || c["free"] != 1000 {
				t.Errorf("loop calls %v", c)
			}
			if build.name == "no-pie" {
				return
			}
			checkScopeMarkers(t, trace)
			// The same numbers from the trace, as usage/v1.
			out, errOut, code := e2e.Run(t, "report", "--by", "scope", "--format", "json", trace)
			if code != 0 {
				t.Fatalf("report --by scope: exit %d: %s", code, errOut)
			}
			var doc struct {
				Schema string       `json:"schema"`
				By     string       `json:"by"`
				Units  []*scopeJSON `json:"units"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.Schema != "leakpath.usage/v1" || doc.By != "scope" {
				t.Errorf("schema %q by %q", doc.Schema, doc.By)
			}
			units := map[string]*scopeJSON{}
			for _, u := range doc.Units {
				units[u.Name] = u
			}
			checkScopeCounts(t, "report --by scope", units, scopesC)
			text, _, _ := e2e.Run(t, "report", "--by", "scope", trace)
			if !strings.Contains(text, "leakpath: heap use by scope") || !strings.Contains(text, "HELD by scope \"outer\"") {
				t.Errorf("report --by scope text:\n%s", text)
			}
			// Folding changes nothing inside scopes.
			unfolded := e2e.Leakpath(t, []string{"--fold=false"}, nil, bin)
			checkScopeCounts(t, "--fold=false", readScopes(t, unfolded.ReportJSON), scopesC)
		})
	}
}

// checkScopeMarkers reads the trace's scope markers: a begin and an end
// per entry, in order on each thread, the worker's on two threads.
func checkScopeMarkers(t *testing.T, path string) {
	t.Helper()
	depth := map[int32]int{}
	begins := map[string]map[int32]int{}
	ends := 0
	last := map[int32]uint64{} // per thread, the latest marker's time
	e2e.EachTraceEvent(t, path, func(ev *event.Event) {
		switch ev.Kind {
		case event.ScopeBegin:
			depth[ev.Thread]++
			if int(ev.Aux) != depth[ev.Thread] {
				t.Errorf("begin of %q at depth %d, thread has %d open", ev.Text(), ev.Aux, depth[ev.Thread])
			}
			if begins[ev.Text()] == nil {
				begins[ev.Text()] = map[int32]int{}
			}
			begins[ev.Text()][ev.Thread]++
		case event.ScopeEnd:
			if int(ev.Aux) != depth[ev.Thread] {
				t.Errorf("end at depth %d, thread has %d open", ev.Aux, depth[ev.Thread])
			}
			depth[ev.Thread]--
			ends++
		default:
			return
		}
		if ev.Time == 0 || ev.Time < last[ev.Thread] {
			t.Errorf("marker without a time, or before the thread's previous one (%d): %+v", last[ev.Thread], *ev)
		}
		last[ev.Thread] = ev.Time
	})
	if ends != 1009 || len(begins["loop"]) != 1 || len(begins["worker"]) != 2 {
		t.Errorf("%d ends (want 1009); loop began on %d threads (want 1), worker on %d (want 2)",
			ends, len(begins["loop"]), len(begins["worker"]))
	}
	for tid, d := range depth {
		if d != 0 {
			t.Errorf("thread %d ends with %d scopes open", tid, d)
		}
	}
}

// TestScopesCxx: LEAKPATH_SCOPE as an RAII guard: nested, recursive
// (counted once), left by an exception, with new and delete.
func TestScopesCxx(t *testing.T) {
	bin := e2e.Fixture(t, "scopes.cc", e2e.IncludeFlag())
	want := e2e.Native(t, nil, bin)
	if want.Code != 4 || string(want.Stdout) != "scopes.cc: start\ncaught 42\nscopes.cc: done\n" {
		t.Fatalf("without leakpath: exit %d, stdout %q", want.Code, want.Stdout)
	}
	r := e2e.Leakpath(t, nil, nil, bin)
	e2e.SameBehaviour(t, r, want)
	got := readScopes(t, r.ReportJSON)
	// throws: the exception object, allocated by the C++ runtime (its
	// size is the runtime's), held when the guard closed, freed after.
	th := got["throws"]
	if th == nil || th.Entered != 1 || th.Closed != 1 || th.AllocatedBlocks != 1 || th.HeldBlocks != 1 || th.HeldLiveBlocks != 0 {
		t.Errorf("throws: %+v; want entered and closed once, 1 block allocated, held at close, freed since", th)
	}
	if th != nil {
		delete(got, "throws")
	}
	checkScopeCounts(t, "run", got, map[string]scopeCounts{
		"cc_outer": {entered: 1, threads: 1, allocBytes: 48 + 160 + 32, allocBlocks: 1 + 4 + 4, freedBytes: 48 + 112 + 32, freedBlocks: 1 + 3 + 4,
			heldBytes: 48, heldBlocks: 1, heldLiveBytes: 48},
		"build": {entered: 1, threads: 1, allocBytes: 160, allocBlocks: 4, freedBytes: 112, freedBlocks: 3,
			heldBytes: 48, heldBlocks: 1, heldLiveBytes: 48},
		"recurse":   {entered: 4, recursive: 3, threads: 1, allocBytes: 32, allocBlocks: 4, freedBytes: 32, freedBlocks: 4},
		"frees_all": {entered: 1, threads: 1, allocBytes: 96, allocBlocks: 2, freedBytes: 96, freedBlocks: 2},
	})
	if c := got["build"].Calls; c["new"] != 3 || c["new_array"] != 1 || c["delete"] != 2 || c["delete_array"] != 1 {
		t.Errorf("build calls %v", c)
	}
}

// TestAskedSnapshots: the program asks for leak checks and a snapshot
// itself; each returns what was leaked by then, on any thread; each is
// written to --snapshot-dir and listed after the report. Without
// leakpath the calls return at once: 0 and -1.
func TestAskedSnapshots(t *testing.T) {
	bin := e2e.Fixture(t, "asked.c", e2e.IncludeFlag())
	without := e2e.Native(t, nil, bin)
	if string(without.Stdout) != "asked: start\ncheck 0\nsnapshot -1\ncheck 0\nthread check 0\n" || without.Code != 0 {
		t.Fatalf("without leakpath: exit %d, stdout %q", without.Code, without.Stdout)
	}
	dir := t.TempDir()
	r := e2e.Leakpath(t, []string{"--snapshot-dir", dir}, nil, bin)
	if string(r.Stdout) != "asked: start\ncheck 1\nsnapshot 0\ncheck 3\nthread check 3\n" || r.Code != 0 {
		t.Fatalf("under leakpath: exit %d, stdout %q\nstderr: %s\n%s", r.Code, r.Stdout, r.Stderr, r.Text)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "leakpath.snapshot.*.json"))
	sort.Slice(files, func(i, j int) bool { return len(files[i]) < len(files[j]) || files[i] < files[j] })
	if len(files) != 4 {
		t.Fatalf("%d snapshot files, want 4: %v", len(files), files)
	}
	for i, f := range files {
		doc := e2e.ReadSnapDoc(t, f)
		var head struct {
			Label     string `json:"label"`
			LeakCheck bool   `json:"leak_check"`
			AskedBy   int    `json:"asked_by_tid"`
		}
		b, _ := os.ReadFile(f)
		json.Unmarshal(b, &head)
		wantLabel, wantCheck := "", true
		if i == 1 {
			wantLabel, wantCheck = "after three", false
		}
		if !doc.Snapshot || head.Label != wantLabel || head.LeakCheck != wantCheck || head.AskedBy == 0 {
			t.Errorf("%s: snapshot %v, label %q, leak check %v, asked by %d", f, doc.Snapshot, head.Label, head.LeakCheck, head.AskedBy)
		}
		lost, kinds := doc.Site("lose")
		wantLost := uint64(3)
		if i == 0 {
			wantLost = 1
		}
		// (A stale word may point into a lost block: possible, which the
		// check counts too.)
		if lost != wantLost || kinds["definite"]+kinds["possible"] != wantLost {
			t.Errorf("%s: %d blocks lost (%v), want %d definite or possible", f, lost, kinds, wantLost)
		}
	}
	for _, want := range []string{"leak check asked by tid", `snapshot "after three" asked by tid`, "1 block (24 B) leaked", "3 blocks (104 B) leaked"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("the report does not say %q:\n%s", want, r.Text)
		}
	}
}
