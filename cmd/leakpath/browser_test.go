package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/leakpath/leakpath/internal/render/report"
)

// browser is a headless Chromium driven over the DevTools protocol: one
// page, its session flattened onto the browser's connection.
type browser struct {
	t       *testing.T
	ws      *websocket.Conn
	id      int
	session string
	shots   string // where screenshots go
}

// chromium returns the browser the tests drive, or skips the test saying
// so when there is none (call it before slow preparations).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (apt-get install chromium): the browser tests need it")
	return ""
}

// startBrowser starts Debian's chromium headless with a fresh profile
// (skipping the test if there is none) and opens a page at url.
func startBrowser(t *testing.T, url string) *browser {
	t.Helper()
	bin := chromium(t)
	// A fresh profile, removed once chromium and its helpers are gone
	// (t.TempDir's removal could race with them).
	profile, err := os.MkdirTemp("", "leakpath-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--remote-debugging-port=0", "--remote-allow-origins=*",
		"--window-size=1300,1600", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its helper processes too are stopped at the end
	errp, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		for i := 0; i < 50 && syscall.Kill(-cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		os.RemoveAll(profile)
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errp)
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	var wsURL string
	select {
	case wsURL = <-found:
	case <-time.After(hangGuard):
		t.Fatal("chromium did not say where its DevTools listen")
	}
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("DevTools: %v", err)
	}
	ws.MaxPayloadBytes = 64 << 20
	t.Cleanup(func() { ws.Close() })
	b := &browser{t: t, ws: ws}
	b.shots = os.Getenv("LEAKPATH_ARTIFACTS")
	if b.shots == "" {
		b.shots, _ = os.MkdirTemp("", "leakpath-ui-screenshots-")
	}
	os.MkdirAll(b.shots, 0o755)
	var target struct{ TargetID string }
	b.call("Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var att struct{ SessionID string }
	b.call("Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att)
	b.session = att.SessionID
	// Every page notes what its Content-Security-Policy refused.
	b.call("Page.enable", map[string]any{}, nil)
	b.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `window.cspViolations = [];
		document.addEventListener("securitypolicyviolation", function (e) { window.cspViolations.push(e.violatedDirective + " " + e.blockedURI); });`}, nil)
	if url != "about:blank" {
		b.call("Page.navigate", map[string]any{"url": url}, nil)
	}
	return b
}

// call sends a command and decodes its result into v (nil: ignored),
// skipping the events that come meanwhile.
func (b *browser) call(method string, params any, v any) {
	b.t.Helper()
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if b.session != "" {
		msg["sessionId"] = b.session
	}
	b.ws.SetDeadline(time.Now().Add(hangGuard))
	if err := websocket.JSON.Send(b.ws, msg); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
	for {
		var resp struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(b.ws, &resp); err != nil {
			b.t.Fatalf("%s: %v", method, err)
		}
		if resp.ID != b.id {
			continue
		}
		if resp.Error != nil {
			b.t.Fatalf("%s: %s", method, resp.Error.Message)
		}
		if v != nil {
			if err := json.Unmarshal(resp.Result, v); err != nil {
				b.t.Fatalf("%s: %v", method, err)
			}
		}
		return
	}
}

// eval evaluates a JavaScript expression in the page and decodes its
// value (JSON-able) into v.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		b.t.Fatalf("%s: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if v != nil {
		if err := json.Unmarshal(r.Result.Value, v); err != nil {
			b.t.Fatalf("%s: %v (%s)", expr, err, r.Result.Value)
		}
	}
}

// waitFor polls a JavaScript condition until it is true.
func (b *browser) waitFor(what, cond string) {
	b.t.Helper()
	for deadline := time.Now().Add(hangGuard); ; {
		var ok bool
		b.eval("!!("+cond+")", &ok)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("timeout")
			b.t.Fatalf("the page never showed %s (%s)", what, cond)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mouse presses the left button at (x0, y0), moves to (x1, y1) and
// releases it there: a click when they are equal, else a drag.
func (b *browser) mouse(x0, y0, x1, y1 float64) {
	b.t.Helper()
	ev := func(typ string, x, y float64, buttons int) {
		b.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1}, nil)
	}
	ev("mouseMoved", x0, y0, 0)
	ev("mousePressed", x0, y0, 1)
	if x1 != x0 || y1 != y0 {
		ev("mouseMoved", (x0+x1)/2, (y0+y1)/2, 1)
		ev("mouseMoved", x1, y1, 1)
	}
	ev("mouseReleased", x1, y1, 0)
}

// rect is an element's box in the viewport (scrolled into view first).
func (b *browser) rect(sel string) (x, y, w, h float64) {
	b.t.Helper()
	var r struct{ X, Y, W, H float64 }
	b.eval(fmt.Sprintf(`(function(){var e=document.querySelector(%q); e.scrollIntoView({block:"center"}); var r=e.getBoundingClientRect(); return {X:r.left,Y:r.top,W:r.width,H:r.height};})()`, sel), &r)
	return r.X, r.Y, r.W, r.H
}

// screenshot saves the page as NAME.png among the test's artifacts.
func (b *browser) screenshot(name string) {
	var r struct{ Data string }
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("screenshot: %v", err)
		return
	}
	b.t.Logf("screenshot: %s", path)
}

// rootCauseTrace runs seed.c (JP2009-217617's example) with --root-cause
// and returns its trace and JSON report, which has a leak with its root
// cause found.
func rootCauseTrace(t *testing.T) (string, *rootCauseDoc, *jsonReport) {
	t.Helper()
	fx := rootCauseFixtures[0]
	dir := t.TempDir()
	bin := buildRootCause(t, fx)
	trace := filepath.Join(dir, "rc.lpt")
	r := leakpath(t, []string{"--root-cause", "-o", trace}, nil, bin)
	if r.code != 0 {
		t.Fatalf("leakpath run --root-cause exited %d: %s", r.code, r.stderr)
	}
	out := exportReport(t, root, "--format", "json", trace)
	var d rootCauseDoc
	var rep jsonReport
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	return trace, &d, &rep
}

// TestUIBrowser loads the UI of a trace with a root cause in headless
// Chromium: the chart, the flame graph and the leak list show the JSON
// report's numbers; dragging a range on the chart narrows the flame
// graph to that range's allocations; clicking the leak shows its root
// cause, the culprit branch's source line highlighted.
func TestUIBrowser(t *testing.T) {
	chromium(t)
	trace, rc, rep := rootCauseTrace(t)
	culprit := -1
	for i, l := range rc.Leaks {
		if l.RootCause != nil && l.RootCause.Status == "found" {
			culprit = i
		}
	}
	if culprit < 0 {
		t.Fatalf("seed.c's trace has no leak with a root cause found: %+v", rc.Leaks)
	}
	tot := rep.Totals
	s := startUI(t, trace)
	var tl uiTimeline
	s.get(t, "/api/timeline", &tl)

	b := startBrowser(t, s.printed)
	b.waitFor("the chart, the flame graph and the leaks",
		`document.querySelector("#chart-svg") && document.querySelector("#flame .flame-frame") && document.querySelectorAll("#leaks tr.leak").length > 0 && document.querySelectorAll("#usage tr.unit").length > 0`)
	b.screenshot("ui-loaded")

	// The chart and the range's summary.
	var chart struct {
		Peak, Alloc, Buckets string
		Summary              []string
	}
	b.eval(`(function(){var s=document.querySelector("#chart-svg"); return {Peak: s.dataset.peakBytes, Alloc: s.dataset.allocBytes, Buckets: s.dataset.buckets,
		Summary: Array.from(document.querySelectorAll("#range-summary .stat")).map(function(e){return e.textContent})};})()`, &chart)
	if chart.Alloc != fmt.Sprint(tot.AllocatedBytes) || chart.Buckets != fmt.Sprint(len(tl.Buckets)) {
		t.Errorf("chart: %s bytes allocated over %s buckets; the report says %d, the timeline has %d", chart.Alloc, chart.Buckets, tot.AllocatedBytes, len(tl.Buckets))
	}
	for _, want := range []string{"allocated: " + report.Bytes(tot.AllocatedBytes), "allocations: " + report.Count(tot.Allocations),
		"temporary allocations: " + report.Count(tot.Temporary), "still leaked at the end: " + report.Bytes(tot.LeakedBytes)} {
		if !strings.Contains(strings.Join(chart.Summary, "|"), want) {
			t.Errorf("the range summary %q lacks %q", chart.Summary, want)
		}
	}

	// The flame graph of allocations, then of leaks.
	flame := func() (total string, names []string, status string) {
		var f struct {
			Total, Status string
			Names         []string
		}
		b.eval(`(function(){var f=document.querySelector("#flame"); return {Total: f.dataset.total, Status: f.querySelector(".flame-status").textContent,
			Names: Array.from(f.querySelectorAll(".flame-frame")).map(function(e){return e.dataset.name})};})()`, &f)
		return f.Total, f.Names, f.Status
	}
	total, names, status := flame()
	if total != fmt.Sprint(tot.AllocatedBytes) || status != "total "+report.Bytes(tot.AllocatedBytes) {
		t.Errorf("allocated flame graph: total %s, status %q; the report says %d", total, status, tot.AllocatedBytes)
	}
	if !strings.Contains(strings.Join(names, ","), ",funcA") || !strings.Contains(strings.Join(names, ","), ",funcB") {
		t.Errorf("the flame graph draws no funcA and funcB frames: %v", names)
	}
	x, y, w, h := b.rect(`#flame-tabs button[data-kind="leaked"]`)
	b.mouse(x+w/2, y+h/2, x+w/2, y+h/2)
	b.waitFor("the leaked flame graph", `document.querySelector("#flame").dataset.kind == "leaked"`)
	if total, _, _ := flame(); total != fmt.Sprint(tot.LeakedBytes) {
		t.Errorf("leaked flame graph: total %s; the report says %d", total, tot.LeakedBytes)
	}
	// Search: the leaked bytes under funcA.
	b.eval(`(function(){var i=document.querySelector("#flame .flame-search"); i.value="funcA"; i.dispatchEvent(new Event("input")); return true;})()`, nil)
	var funcA uint64
	for _, l := range rep.Leaks {
		for _, f := range l.Stack {
			if f.Function == "funcA" {
				funcA += l.Bytes
				break
			}
		}
	}
	if _, _, status := flame(); !strings.HasPrefix(status, "matched "+report.Bytes(funcA)+" (") {
		t.Errorf("search funcA: status %q, want matched %s", status, report.Bytes(funcA))
	}

	// Drag over the first third of the chart: the range's allocations.
	x, y, w, h = b.rect("#chart-svg")
	b.mouse(x+75, y+h/2, x+75+(w-145)/3, y+h/2)
	b.waitFor("a range", `/buckets/.test(document.querySelector("#range").textContent)`)
	var rng string
	b.eval(`document.querySelector("#range").textContent`, &rng)
	var from, to int
	if _, err := fmt.Sscanf(rng[strings.Index(rng, "(buckets ")+len("(buckets "):], "%d–%d", &from, &to); err != nil || from > to {
		t.Fatalf("range %q: %v", rng, err)
	}
	var inRange, leakedInRange uint64
	for _, bk := range tl.Buckets[from : to+1] {
		inRange += bk.AllocBytes
		leakedInRange += bk.LeakedBytes
	}
	b.waitFor("the flame graph of the range", fmt.Sprintf(`document.querySelector("#flame").dataset.total == "%d"`, leakedInRange))
	x, y, w, h = b.rect(`#flame-tabs button[data-kind="allocated"]`)
	b.mouse(x+w/2, y+h/2, x+w/2, y+h/2)
	b.waitFor("the allocated flame graph of the range", fmt.Sprintf(`document.querySelector("#flame").dataset.kind == "allocated" && document.querySelector("#flame").dataset.total == "%d"`, inRange))
	if inRange == tot.AllocatedBytes || inRange == 0 {
		t.Errorf("the first third of the run allocated %d of %d bytes: the range chose nothing", inRange, tot.AllocatedBytes)
	}
	// The snapshot diff of the range: the heap's change between its ends.
	wantChange := tl.Buckets[to].Heap
	if from > 0 {
		wantChange -= tl.Buckets[from-1].Heap
	}
	b.waitFor("the range's snapshot diff", fmt.Sprintf(`document.querySelector("#diff-summary").dataset.change == "%d"`, wantChange))
	b.screenshot("ui-range")

	// The leak list, in the report's order, with its numbers.
	var rows []struct{ Bytes, Blocks, Kind string }
	b.eval(`Array.from(document.querySelectorAll("#leaks tr.leak")).map(function(r){return {Bytes: r.dataset.bytes, Blocks: r.dataset.blocks, Kind: r.cells[0].textContent}})`, &rows)
	if len(rows) != len(rep.Leaks) {
		t.Fatalf("%d leak rows, the report has %d leaks", len(rows), len(rep.Leaks))
	}
	for i, r := range rows {
		l := rep.Leaks[i]
		if r.Bytes != fmt.Sprint(l.Bytes) || r.Blocks != fmt.Sprint(l.Blocks) || r.Kind != l.Kind {
			t.Errorf("leak row %d: %+v; the report: %s %d bytes %d blocks", i, r, l.Kind, l.Bytes, l.Blocks)
		}
	}
	// Click the leak with the root cause: the culprit, highlighted.
	x, y, w, h = b.rect(fmt.Sprintf(`#leaks tr.leak[data-index="%d"]`, culprit))
	b.mouse(x+w/2, y+h/2, x+w/2, y+h/2)
	b.waitFor("the root cause", `document.querySelector("#root-cause") && document.querySelector("#root-cause .src .hl")`)
	var detail struct {
		Status, Text, Highlighted string
		RCFrames                  []string
	}
	b.eval(`(function(){var r=document.querySelector("#root-cause"); return {Status: r.dataset.status, Text: r.textContent,
		Highlighted: r.querySelector(".src .hl").textContent,
		RCFrames: Array.from(document.querySelectorAll("#leak-detail .stack li.rc-frame")).map(function(e){return e.textContent})};})()`, &detail)
	want := rc.Leaks[culprit].RootCause
	if detail.Status != "found" || !strings.Contains(detail.Text, "Root cause: found") {
		t.Errorf("root cause box: status %q, text %q", detail.Status, detail.Text)
	}
	for _, f := range want.Functions {
		if !strings.Contains(detail.Text, f.Function) {
			t.Errorf("root cause box %q does not name %s", detail.Text, f.Function)
		}
	}
	for _, br := range want.Branches {
		place := fmt.Sprintf("%s:%d", filepath.Base(br.File), br.Line)
		if !strings.Contains(detail.Text, "leaks when the branch at ") || !strings.Contains(detail.Text, place) {
			t.Errorf("root cause box %q does not show the branch at %s", detail.Text, place)
		}
		src, err := os.ReadFile(filepath.Join(root, br.File))
		if err == nil && !strings.Contains(detail.Highlighted, strings.TrimSpace(strings.Split(string(src), "\n")[br.Line-1])) {
			t.Errorf("highlighted source %q is not line %d of %s", detail.Highlighted, br.Line, br.File)
		}
	}
	if len(detail.RCFrames) == 0 || !strings.HasPrefix(detail.RCFrames[0], want.Functions[0].Function) {
		t.Errorf("the stack highlights %v, not the culprit %s", detail.RCFrames, want.Functions[0].Function)
	}
	b.screenshot("ui-root-cause")

	// The page got everything it needed under its Content-Security-Policy;
	// the token left the address bar and no script can read the cookie.
	var sec struct {
		Watched    bool
		Violations []string
		Href       string
		Cookie     string
	}
	b.eval(`({Watched: Array.isArray(window.cspViolations), Violations: window.cspViolations, Href: location.href, Cookie: document.cookie})`, &sec)
	if !sec.Watched {
		t.Errorf("the page's violations of its Content-Security-Policy went unwatched")
	}
	if len(sec.Violations) != 0 {
		t.Errorf("the Content-Security-Policy refused %v", sec.Violations)
	}
	if strings.Contains(sec.Href, "token") || sec.Cookie != "" {
		t.Errorf("the page at %s sees the cookie %q", sec.Href, sec.Cookie)
	}
}

// TestFlamegraphBrowser opens the exported flame graph page in headless
// Chromium: it draws the report's total, zooms on a click and searches.
func TestFlamegraphBrowser(t *testing.T) {
	chromium(t)
	trace, rep := exportTrace(t)
	page := filepath.Join(t.TempDir(), "flame.html")
	exportReport(t, root, "--format", "flamegraph", "--value", "allocated-bytes", "--output", page, trace)
	b := startBrowser(t, "file://"+page)
	b.waitFor("the flame graph", `document.querySelector("#flame .flame-frame")`)
	var got struct {
		Root, Status string
	}
	b.eval(`({Root: document.querySelector("#flame .flame-frame").dataset.value, Status: document.querySelector(".flame-status").textContent})`, &got)
	if got.Root != fmt.Sprint(rep.Totals.AllocatedBytes) || got.Status != "total "+report.Bytes(rep.Totals.AllocatedBytes) {
		t.Errorf("root frame %s, status %q; the report allocated %d", got.Root, got.Status, rep.Totals.AllocatedBytes)
	}
	// Click main: zoomed on it, its callers dimmed above.
	x, y, w, h := b.rect(`#flame .flame-frame[data-name="main"]`)
	b.mouse(x+min(w/2, 40), y+h/2, x+min(w/2, 40), y+h/2)
	b.waitFor("the zoom", `/zoomed on main/.test(document.querySelector(".flame-status").textContent)`)
	var width string
	b.eval(`document.querySelector('#flame .flame-frame[data-name="main"]:not(.flame-ancestor)').style.width`, &width)
	if width != "100%" {
		t.Errorf("zoomed on main, its width is %s", width)
	}
	b.screenshot("flamegraph-zoomed")
}

// TestUIBigTrace measures `leakpath ui` on the trace $LEAKPATH_BIG_TRACE
// (write one with TestWriteSyntheticTrace in internal/model/tracefile): the time
// from its start to the page's first paint and to the chart of the loaded
// trace, and the collector's peak resident set (VmHWM). It logs the
// figures; it asserts only that the page shows the report's totals.
func TestUIBigTrace(t *testing.T) {
	trace := os.Getenv("LEAKPATH_BIG_TRACE")
	if trace == "" {
		t.Skip("measures a big trace only when LEAKPATH_BIG_TRACE names one")
	}
	chromium(t)
	b := startBrowser(t, "about:blank")
	b.call("Page.enable", map[string]any{}, nil)
	start := time.Now()
	s := startUIAsync(t, trace)
	urlAt := time.Since(start)
	b.call("Page.navigate", map[string]any{"url": s.printed}, nil)
	navAt := time.Since(start)
	b.waitFor("the first paint", `performance.getEntriesByType("paint").some(function(e){return e.name=="first-contentful-paint"})`)
	var fcp float64
	b.eval(`performance.getEntriesByType("paint").filter(function(e){return e.name=="first-contentful-paint"})[0].startTime`, &fcp)
	b.screenshot("big-first-paint")
	for deadline := time.Now().Add(20 * time.Minute); ; {
		var ok bool
		b.eval(`!!(document.querySelector("#chart-svg") && document.querySelector("#flame .flame-frame") && document.querySelectorAll("#leaks tr.leak").length)`, &ok)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the page did not show the loaded trace in 20 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	readyAt := time.Since(start)
	hwmLoaded := vmHWM(t, s.cmd.Process.Pid)
	b.screenshot("big-loaded")
	// A range and every flame graph of it.
	x, y, w, h := b.rect("#chart-svg")
	rangeStart := time.Now()
	b.mouse(x+75+(w-145)/4, y+h/2, x+75+(w-145)/2, y+h/2)
	b.waitFor("a range", `/buckets/.test(document.querySelector("#range").textContent)`)
	b.waitFor("its flame graph", `document.querySelector("#flame").dataset.kind == "allocated" && document.querySelector("#flame .flame-frame")`)
	rangeTook := time.Since(rangeStart)
	for _, kind := range []string{"leaked", "peak", "temporary", "allocated"} {
		x, y, w, h := b.rect(fmt.Sprintf(`#flame-tabs button[data-kind=%q]`, kind))
		b.mouse(x+w/2, y+h/2, x+w/2, y+h/2)
		b.waitFor("the "+kind+" flame graph", fmt.Sprintf(`document.querySelector("#flame").dataset.kind == %q`, kind))
	}
	hwm := vmHWM(t, s.cmd.Process.Pid)
	b.screenshot("big-range")
	var chartAlloc string
	b.eval(`document.querySelector("#chart-svg").dataset.allocBytes`, &chartAlloc)
	var rep jsonReport
	s.get(t, "/api/report", &rep)
	if chartAlloc != fmt.Sprint(rep.Totals.AllocatedBytes) {
		t.Errorf("chart: %s bytes allocated, the report %d", chartAlloc, rep.Totals.AllocatedBytes)
	}
	fi, _ := os.Stat(trace)
	t.Logf("trace %s: %.1f MB, %d allocations, %d frees", trace, float64(fi.Size())/1e6, rep.Totals.Allocations, rep.Totals.Frees)
	t.Logf("address printed after %v; page asked for at %v; first contentful paint %.0f ms after that (%v after start)",
		urlAt.Round(time.Millisecond), navAt.Round(time.Millisecond), fcp, (navAt + time.Duration(fcp*float64(time.Millisecond))).Round(time.Millisecond))
	t.Logf("chart, flame graph and leaks of the loaded trace shown %v after start", readyAt.Round(time.Millisecond))
	t.Logf("a range's flame graph %v after the drag", rangeTook.Round(time.Millisecond))
	t.Logf("collector peak RSS (VmHWM): %.1f MB once loaded, %.1f MB after the range and its flame graphs", float64(hwmLoaded)/1024, float64(hwm)/1024)
}

// vmHWM is the peak resident set of process pid, in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			var n int64
			fmt.Sscan(f[1], &n)
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}
