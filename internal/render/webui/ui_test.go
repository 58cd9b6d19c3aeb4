package webui_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

type uiFlame struct {
	Kind string         `json:"kind"`
	Unit string         `json:"unit"`
	Peak *int           `json:"peak"`
	Root *e2e.FlameNode `json:"root"`
}

// TestUI serves the export fixture's trace and checks the API against
// leakpath's own JSON report, collapsed export and usage tables of the
// same trace.
func TestUI(t *testing.T) {
	trace, rep := e2e.ExportTrace(t)
	s := e2e.StartUI(t, trace)
	tot := rep.Totals

	var tl e2e.UITimeline
	s.Get(t, "/api/timeline", &tl)
	if tl.Unit != "s" || len(tl.Buckets) == 0 {
		t.Fatalf("timeline in %q with %d buckets", tl.Unit, len(tl.Buckets))
	}
	var alloc, allocs, frees, temp, leaked uint64
	var peak int64
	for _, b := range tl.Buckets {
		alloc += b.AllocBytes
		allocs += b.Allocs
		frees += b.Frees
		temp += b.Temporary
		leaked += b.LeakedBytes
		peak = max(peak, b.HeapMax)
	}
	for _, c := range []struct {
		what      string
		got, want uint64
	}{{"allocated bytes", alloc, tot.AllocatedBytes}, {"allocations", allocs, tot.Allocations}, {"frees", frees, tot.Frees},
		{"temporary allocations", temp, tot.Temporary}, {"leaked bytes", leaked, tot.LeakedBytes},
		{"heap in use at the end", uint64(tl.Buckets[len(tl.Buckets)-1].Heap), tot.LeakedBytes}} {
		if c.got != c.want {
			t.Errorf("timeline: %s %d, the JSON report says %d", c.what, c.got, c.want)
		}
	}
	// The model's peak is over events in the order they were applied; the
	// timeline's over time, which may count a block freed late but
	// allocated early. Neither is below the other's by more than that.
	if peak < int64(tot.PeakBytes) {
		t.Errorf("timeline peak %d below the report's %d", peak, tot.PeakBytes)
	}

	flames := map[string]*uiFlame{}
	for _, kind := range []string{"allocated", "leaked", "peak", "temporary"} {
		var f uiFlame
		s.Get(t, "/api/flame?kind="+kind, &f)
		flames[kind] = &f
	}
	for kind, want := range map[string]uint64{"allocated": tot.AllocatedBytes, "leaked": tot.LeakedBytes, "temporary": tot.Temporary} {
		if got := flames[kind].Root.Value; got != want {
			t.Errorf("%s flame graph totals %d, the JSON report says %d", kind, got, want)
		}
	}
	if f := flames["peak"]; f.Peak == nil || f.Root.Value != uint64(tl.Buckets[*f.Peak].Heap) {
		t.Errorf("peak flame graph: total %d at bucket %v; the timeline differs", f.Root.Value, f.Peak)
	}
	// Stack by stack, the leaked and allocated flame graphs are the
	// collapsed export's.
	for kind, value := range map[string]string{"leaked": "leaked-bytes", "allocated": "allocated-bytes"} {
		got := map[string]uint64{}
		e2e.FlameStacks(t, flames[kind].Root, nil, got)
		want := map[string]uint64{}
		out := e2e.LeakpathReport(t, e2e.Root, "--format", "collapsed", "--value", value, trace)
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			i := strings.LastIndexByte(line, ' ')
			var n uint64
			fmt.Sscan(line[i+1:], &n)
			want[line[:i]] += n
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s flame graph's stacks:\n%v\nthe collapsed export's:\n%v", kind, got, want)
		}
	}
	// A range: the first half's allocations and the second's add up.
	half := len(tl.Buckets) / 2
	var a, b uiFlame
	s.Get(t, fmt.Sprintf("/api/flame?kind=allocated&from=0&to=%d", half), &a)
	s.Get(t, fmt.Sprintf("/api/flame?kind=allocated&from=%d&to=%d", half+1, len(tl.Buckets)-1), &b)
	if a.Root.Value+b.Root.Value != tot.AllocatedBytes {
		t.Errorf("allocated in the two halves: %d + %d, want %d", a.Root.Value, b.Root.Value, tot.AllocatedBytes)
	}

	// Snapshot diff: over the whole run, what is left at the end; over
	// the second half, the change of the heap at its ends; growth is the
	// sum of the sites that grew.
	type diff struct {
		Change int64 `json:"change"`
		Rows   []struct {
			Stack                 []string
			Before, After, Change int64
		} `json:"rows"`
	}
	var all, second diff
	s.Get(t, "/api/diff", &all)
	if all.Change != int64(tot.LeakedBytes) {
		t.Errorf("diff over the run: %d, the report leaked %d", all.Change, tot.LeakedBytes)
	}
	s.Get(t, fmt.Sprintf("/api/diff?from=%d&to=%d", half+1, len(tl.Buckets)-1), &second)
	if want := tl.Buckets[len(tl.Buckets)-1].Heap - tl.Buckets[half].Heap; second.Change != want {
		t.Errorf("diff over the second half: %d, the timeline's heap changed by %d", second.Change, want)
	}
	var grew, rowsSum int64
	for _, r := range all.Rows {
		if r.Change != r.After-r.Before || r.Change == 0 {
			t.Errorf("diff row %+v", r)
		}
		if r.Change > 0 {
			grew += r.Change
		}
		rowsSum += r.Change
	}
	if rowsSum != all.Change {
		t.Errorf("diff rows sum to %d, the diff says %d", rowsSum, all.Change)
	}
	var growth uiFlame
	s.Get(t, "/api/flame?kind=growth", &growth)
	if int64(growth.Root.Value) != grew {
		t.Errorf("growth flame graph totals %d, the diff's growing sites %d", growth.Root.Value, grew)
	}

	// The leak list is the JSON report's.
	var got e2e.Report
	s.Get(t, "/api/report", &got)
	if fmt.Sprint(got.Totals) != fmt.Sprint(tot) || len(got.Leaks) != len(rep.Leaks) {
		t.Errorf("/api/report: totals %+v with %d leaks; the report: %+v with %d", got.Totals, len(got.Leaks), tot, len(rep.Leaks))
	}

	// Usage tables: as `leakpath report --by UNIT --format json`.
	for _, by := range []string{"library", "function", "thread"} {
		type units struct {
			Units []struct {
				Name           string `json:"name"`
				AllocatedBytes uint64 `json:"allocated_bytes"`
				CurrentBytes   int64  `json:"current_bytes"`
			} `json:"units"`
		}
		var ui, cli units
		s.Get(t, "/api/usage?by="+by, &ui)
		if err := json.Unmarshal(e2e.LeakpathReport(t, e2e.Root, "--by", by, "--format", "json", trace), &cli); err != nil {
			t.Fatal(err)
		}
		if len(ui.Units) == 0 || fmt.Sprint(ui.Units) != fmt.Sprint(cli.Units) {
			t.Errorf("usage by %s:\n%v\nleakpath report --by %s:\n%v", by, ui.Units, by, cli.Units)
		}
	}
	if code := s.GetCode(t, "/api/usage?by=nothing", nil); code != http.StatusBadRequest {
		t.Errorf("usage by nothing: status %d", code)
	}

	// Source lines: of the leaks' files only.
	var leakFile e2e.Frame
	for _, f := range rep.Leaks[0].Stack {
		if strings.HasSuffix(f.File, "export.cc") {
			leakFile = f
			break
		}
	}
	if leakFile.File == "" {
		t.Fatalf("the first leak has no frame in export.cc: %+v", rep.Leaks[0].Stack)
	}
	var lines []struct {
		N    int    `json:"n"`
		Text string `json:"text"`
	}
	s.Get(t, fmt.Sprintf("/api/source?file=%s&line=%d", url.QueryEscape(leakFile.File), leakFile.Line), &lines)
	src, err := os.ReadFile(leakFile.File)
	if err != nil {
		t.Fatal(err)
	}
	wantLine := strings.Split(string(src), "\n")[leakFile.Line-1]
	found := false
	for _, l := range lines {
		found = found || l.N == leakFile.Line && l.Text == wantLine
	}
	if !found {
		t.Errorf("source of %s:%d: %+v lacks %q", leakFile.File, leakFile.Line, lines, wantLine)
	}
	for _, bad := range []string{"/api/source?file=/etc/passwd&line=1", "/api/flame?kind=bogus", "/api/flame?from=x", "/api/flame?from=5&to=2", "/api/diff?to=-1"} {
		if code := s.GetCode(t, bad, nil); code != http.StatusBadRequest && code != http.StatusNotFound {
			t.Errorf("GET %s: status %d, want 400 or 404", bad, code)
		}
	}
	// The page and its scripts are served.
	for _, p := range []string{"/", "/app.js", "/flame.js", "/style.css"} {
		if code := s.GetCode(t, p, nil); code != http.StatusOK {
			t.Errorf("GET %s: status %d", p, code)
		}
	}
}

// TestUIBadInput: a missing file or one that is no trace is a clear error
// before anything is served.
func TestUIBadInput(t *testing.T) {
	junk := filepath.Join(t.TempDir(), "junk.lpt")
	os.WriteFile(junk, []byte("not a trace at all"), 0o644)
	for _, args := range [][]string{{"ui", filepath.Join(t.TempDir(), "none.lpt")}, {"ui", junk}, {"ui"}, {"ui", "--listen", "nowhere", junk}} {
		cmd := exec.Command(e2e.Bin, args...)
		out, _ := cmd.CombinedOutput()
		code := cmd.ProcessState.ExitCode()
		if code == 0 || !strings.HasPrefix(string(out), "leakpath") || strings.Contains(string(out), "panic") {
			t.Errorf("leakpath %v: exit %d:\n%s", args, code, out)
		}
	}
}

// TestRunUI: `leakpath run --ui` serves the running program's chart and
// flame graphs, then the finished run's whole page (its numbers those of
// the run's JSON report) until SIGINT, and exits with the program's code;
// the program's output is its own. The program runs until the live view
// has shown an allocation, however long that takes on a busy machine (2
// minutes at most: a hang guard).
func TestRunUI(t *testing.T) {
	bin := e2e.Fixture(t, "busy.c")
	dir := t.TempDir()
	js := filepath.Join(dir, "r.json")
	stop := filepath.Join(dir, "stop")
	cmd := exec.Command(e2e.Bin, "run", "--ui", "--json", js, "--", bin, "120000", stop)
	cmd.Env = e2e.TestEnv()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	defer os.WriteFile(stop, nil, 0o644) // a failed test's program ends too
	lines := bufio.NewScanner(errp)
	var s *e2e.UIServer
	for lines.Scan() {
		if strings.Contains(lines.Text(), "live view at") {
			if m := e2e.UIAddress.FindStringSubmatch(lines.Text()); m != nil {
				s = e2e.NewUIServer(t, m[1], cmd, nil)
				break
			}
		}
	}
	if s == nil {
		t.Fatal("leakpath run --ui printed no address on stderr")
	}
	ended := make(chan bool, 1)
	go func() {
		for lines.Scan() {
			if strings.Contains(lines.Text(), "the run is over") {
				ended <- true
			}
		}
	}()
	// While it runs: nothing without the token, even on the page's path.
	for _, p := range []string{"/api/status", "/api/timeline", "/api/flame?kind=allocated"} {
		resp, err := (&http.Client{Timeout: e2e.UITimeout}).Get(s.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(b), "{") {
			t.Errorf("live GET %s without the token: status %d, %.100q; want 403 and no data", p, resp.StatusCode, b)
		}
	}
	// The chart grows.
	var seen uint64
	for deadline := time.Now().Add(testfixture.HangGuard); ; {
		var st struct{ State string }
		s.Get(t, "/api/status", &st)
		if st.State != "running" {
			break
		}
		var tl e2e.UITimeline
		s.Get(t, "/api/timeline", &tl)
		var allocs uint64
		for _, b := range tl.Buckets {
			allocs += b.Allocs
		}
		if allocs < seen {
			t.Errorf("live allocations went down from %d to %d", seen, allocs)
		}
		var f uiFlame
		s.Get(t, "/api/flame?kind=allocated", &f)
		if allocs > 0 && f.Root.Value == 0 {
			t.Errorf("%d allocations so far, an empty flame graph", allocs)
		}
		seen = allocs
		if allocs > 0 {
			if err := os.WriteFile(stop, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after %v", testfixture.HangGuard)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if seen == 0 {
		t.Fatal("the live view never showed an allocation while the program ran")
	}
	select {
	case <-ended:
	case <-time.After(testfixture.HangGuard):
		t.Fatal("no word that the run is over")
	}
	// The end: the page of the finished run.
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep e2e.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var tl e2e.UITimeline
	s.Get(t, "/api/timeline", &tl)
	var alloc, allocs, leaked uint64
	for _, b := range tl.Buckets {
		alloc += b.AllocBytes
		allocs += b.Allocs
		leaked += b.LeakedBytes
	}
	if alloc != rep.Totals.AllocatedBytes || allocs != rep.Totals.Allocations || leaked != rep.Totals.LeakedBytes {
		t.Errorf("timeline: %d bytes in %d allocations, %d leaked; the run's report: %d, %d, %d",
			alloc, allocs, leaked, rep.Totals.AllocatedBytes, rep.Totals.Allocations, rep.Totals.LeakedBytes)
	}
	if allocs < seen {
		t.Errorf("the live view showed %d allocations, more than the run's %d", seen, allocs)
	}
	var f uiFlame
	s.Get(t, "/api/flame?kind=leaked", &f)
	if f.Root.Value != rep.Totals.LeakedBytes {
		t.Errorf("leaked flame graph %d, the report %d", f.Root.Value, rep.Totals.LeakedBytes)
	}
	var got e2e.Report
	s.Get(t, "/api/report", &got)
	if fmt.Sprint(got.Totals) != fmt.Sprint(rep.Totals) {
		t.Errorf("/api/report totals %+v, the run's %+v", got.Totals, rep.Totals)
	}
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := e2e.ExitCode(err, cmd.ProcessState); code != 0 {
			t.Errorf("leakpath run --ui exited %d after SIGINT, the program 0", code)
		}
	case <-time.After(testfixture.HangGuard):
		t.Fatal("leakpath run --ui did not stop on SIGINT")
	}
	if stdout.Len() != 0 {
		t.Errorf("the program's stdout has leakpath's words: %q", stdout.String())
	}
}

// TestUIOnSharedMachine serves a trace whose leaks' frames name files the
// program's author chose (#line, as a program could name /etc/shadow):
// without the printed token, from a Host not the server's, or from
// another user, nothing is answered; with it, /api/source shows a
// regular file a frame names and refuses a symbolic link, a FIFO, a file
// over 4 MiB and (as root) a file only another user may read.
func TestUIOnSharedMachine(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.c")
	os.WriteFile(good, []byte("int good_one;\nint good_two;\nint good_three;\n"), 0o644)
	link := filepath.Join(dir, "link.c")
	os.Symlink(good, link)
	fifo := filepath.Join(dir, "fifo.c")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.c")
	os.WriteFile(big, nil, 0o644)
	os.Truncate(big, 4<<20+1)
	secret := filepath.Join(dir, "shadow")
	os.WriteFile(secret, []byte("root:SECRET-HASH:19000::::::\n"), 0o600)
	nobody, lookupErr := user.Lookup("nobody")
	asRoot := os.Geteuid() == 0 && lookupErr == nil && os.Getenv("SUDO_UID") == ""
	if asRoot {
		uid, _ := strconv.Atoi(nobody.Uid)
		if err := os.Chown(secret, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	var defs []string
	for i, f := range []string{good, link, fifo, big, secret} {
		defs = append(defs, fmt.Sprintf("-DFILE_%c=%q", 'A'+i, f))
	}
	bin := e2e.Fixture(t, "linefiles.c", defs...)
	trace := filepath.Join(dir, "lf.lpt")
	if r := e2e.Leakpath(t, []string{"-o", trace}, nil, bin); r.Code != 0 {
		t.Fatalf("leakpath run exited %d: %s", r.Code, r.Stderr)
	}
	s := e2e.StartUI(t, trace)

	// The printed address carries a token of at least 128 bits, which
	// leakpath's command line does not show.
	m := regexp.MustCompile(`^http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]+)$`).FindStringSubmatch(s.Printed)
	if m == nil || len(m[2]) < 32 {
		t.Errorf("printed address %s carries no token of at least 128 bits", s.Printed)
	} else if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.Cmd.Process.Pid)); strings.Contains(string(cmdline), m[2]) {
		t.Errorf("the token is on leakpath's command line: %q", cmdline)
	}
	origin := regexp.MustCompile(`^http://[^/]+`).FindString(s.Printed)
	hasData := func(body string) bool {
		return strings.Contains(body, "leakpath.report") || strings.Contains(body, "linefiles") || strings.Contains(body, "<html") ||
			strings.Contains(body, "good_two") || strings.Contains(body, `"state"`)
	}
	// Without the token (a plain client, no cookie): nothing.
	plain := &http.Client{Timeout: e2e.UITimeout}
	for _, u := range []string{origin + "/", origin + "/api/report", origin + "/api/status", s.URL + "/", s.URL + "/api/report", s.URL + "/app.js",
		origin + "/api/source?line=1&file=" + url.QueryEscape(good)} {
		resp, err := plain.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || hasData(string(b)) {
			t.Errorf("GET %s without the token: status %d, %.100q; want 403 and no data", u, resp.StatusCode, b)
		}
	}
	// With the token's cookie but another Host (DNS rebinding): nothing.
	for _, p := range []string{"/", "/api/report"} {
		req, _ := http.NewRequest("GET", s.URL+p, nil)
		req.Host = "rebound.example:" + regexp.MustCompile(`:(\d+)`).FindStringSubmatch(origin)[1]
		resp, err := s.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || hasData(string(b)) {
			t.Errorf("GET %s with Host %s: status %d, %.100q; want 403 and no data", p, req.Host, resp.StatusCode, b)
		}
	}

	// Another user of the machine reaches 127.0.0.1 but has no token.
	t.Run("another user", func(t *testing.T) {
		if !asRoot {
			t.Skip("needs root (and no sudo) to ask as user nobody")
		}
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("no curl to ask as user nobody")
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		for _, u := range []string{origin + "/api/report", origin + "/", s.URL + "/api/report", s.URL + "/", origin + "/?token=0123456789abcdef0123456789abcdef"} {
			cmd := exec.Command(curl, "-s", "-m", fmt.Sprint(e2e.UITimeout.Seconds()), "-w", "\n%{http_code}", u)
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("curl %s as nobody: %v", u, err)
			}
			i := strings.LastIndexByte(string(out), '\n') // -w puts the status after the body
			body, code := string(out[:max(i, 0)]), string(out[i+1:])
			if code != "403" || hasData(body) {
				t.Errorf("GET %s as nobody: status %s, %.100q; want 403 and no data", u, code, body)
			}
		}
	})

	// Source lines: of the regular file only.
	source := func(file string) (int, string) {
		resp, err := s.Client.Get(s.URL + "/api/source?line=2&file=" + url.QueryEscape(file))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := source(good); code != http.StatusOK || !strings.Contains(body, "int good_two;") {
		t.Errorf("source of %s: status %d %s", good, code, body)
	}
	cases := []struct{ file, why string }{{link, "symbolic link"}, {big, "more than the 4194304 bytes"}}
	if asRoot {
		cases = append(cases, struct{ file, why string }{secret, "not readable by others nor owned by uid 0"})
	} else {
		t.Logf("not refusing a file of another user: only root could read one (euid %d, SUDO_UID %q, nobody: %v)", os.Geteuid(), os.Getenv("SUDO_UID"), lookupErr)
	}
	if code, _ := source("/etc/passwd"); code != http.StatusNotFound {
		t.Errorf("source of /etc/passwd, which no frame names: status %d", code)
	}
	// Last: a server reading the FIFO would hang.
	cases = append(cases, struct{ file, why string }{fifo, "not a regular file"})
	for _, c := range cases {
		if code, body := source(c.file); code != http.StatusForbidden || !strings.Contains(body, c.why) || strings.Contains(body, "SECRET") || strings.Contains(body, "good_two") {
			t.Errorf("source of %s: status %d %.200s; want 403 saying %q", filepath.Base(c.file), code, body, c.why)
		}
	}
}
