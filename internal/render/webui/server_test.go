package webui

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// testUI serves a loaded trace whose report names files (its leaks'
// frames) behind its Access.
type testUI struct {
	ts   *httptest.Server
	acc  *Access
	host string // 127.0.0.1:PORT
}

func startTestUI(t *testing.T, files ...string) *testUI {
	t.Helper()
	type frame struct {
		Function string `json:"function"`
		File     string `json:"file"`
		Line     int    `json:"line"`
	}
	var stack []frame
	for _, f := range files {
		stack = append(stack, frame{"f", f, 1})
	}
	rep, err := json.Marshal(map[string]any{"schema": "leakpath.report/v1", "command": []string{"./secret-command-line"},
		"leaks": []any{map[string]any{"bytes": 8, "stack": stack}}})
	if err != nil {
		t.Fatal(err)
	}
	ix := NewIndex()
	ix.Finish()
	srv := NewServer()
	srv.Ready(&Data{Title: "t", Index: ix, ReportJSON: rep, Usage: map[string][]byte{}}, nil)
	ts := httptest.NewUnstartedServer(nil)
	acc, err := NewAccess("127.0.0.1:0", ts.Listener.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv.Handler(acc)
	ts.Start()
	t.Cleanup(ts.Close)
	return &testUI{ts: ts, acc: acc, host: ts.Listener.Addr().String()}
}

// do sends a GET of path (with the Host and headers given) and returns
// the status, body and headers; redirects are not followed.
func (u *testUI) do(t *testing.T, path, host string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u.ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (u *testUI) token(t *testing.T) string {
	t.Helper()
	p, err := url.Parse(u.acc.URL())
	if err != nil {
		t.Fatal(err)
	}
	return p.Query().Get("token")
}

// TestAccessToken: without the token nothing is answered, not the page,
// its scripts nor any API; with it, in a header, the query or the cookie
// its first visit sets, everything is.
func TestAccessToken(t *testing.T) {
	u := startTestUI(t)
	tok := u.token(t)
	if len(tok) < 32 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Fatalf("the printed address %s carries no token of at least 128 bits", u.acc.URL())
	}
	if want := "http://" + u.host + "/?token="; !strings.HasPrefix(u.acc.URL(), want) {
		t.Errorf("printed address %s, want %s...", u.acc.URL(), want)
	}
	if other := startTestUI(t); other.token(t) == tok {
		t.Errorf("two servers drew the same token")
	}
	wrong := strings.Repeat("0", len(tok))
	for _, p := range []string{"/", "/app.js", "/flame.js", "/style.css", "/api/status", "/api/report", "/api/timeline", "/api/flame", "/api/source?file=x&line=1"} {
		for _, hdr := range []map[string]string{nil, {"X-Leakpath-Token": wrong}, {"Authorization": "Bearer " + wrong}, {"Cookie": u.acc.cookie + "=" + wrong}, {"Authorization": "Basic " + tok}} {
			code, body, _ := u.do(t, p, "", hdr)
			if code != http.StatusForbidden || strings.Contains(body, "secret-command-line") || strings.Contains(body, "leakpath.report") || strings.Contains(body, "<html") {
				t.Errorf("GET %s with %v: status %d, %.80q; want 403 and no data", p, hdr, code, body)
			}
		}
		sep := "?"
		if strings.Contains(p, "?") {
			sep = "&"
		}
		if code, _, _ := u.do(t, p+sep+"token="+wrong, "", nil); code != http.StatusForbidden {
			t.Errorf("GET %s with a wrong ?token=: status %d", p, code)
		}
	}
	for _, hdr := range []map[string]string{{"X-Leakpath-Token": tok}, {"Authorization": "Bearer " + tok}, {"Authorization": "bearer " + tok}} {
		if code, body, _ := u.do(t, "/api/report", "", hdr); code != http.StatusOK || !strings.Contains(body, "secret-command-line") {
			t.Errorf("GET /api/report with %v: status %d", hdr, code)
		}
	}
	if code, body, _ := u.do(t, "/api/report?token="+tok, "", nil); code != http.StatusOK || !strings.Contains(body, "leakpath.report") {
		t.Errorf("GET /api/report?token=: status %d", code)
	}

	// The browser's way: the printed address sets the cookie and sends it
	// to the page without the token, where the cookie suffices.
	code, _, h := u.do(t, strings.TrimPrefix(u.acc.URL(), u.ts.URL), "", nil)
	loc := h.Get("Location")
	if code != http.StatusSeeOther || loc == "" || strings.Contains(loc, tok) || !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") {
		t.Fatalf("first visit: status %d, Location %q; want 303 to a path without the token", code, loc)
	}
	resp := &http.Response{Header: h}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == u.acc.cookie {
			ck = c
		}
	}
	_, port, _ := net.SplitHostPort(u.host)
	if ck == nil || ck.Value != tok || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || !strings.Contains(ck.Name, port) || ck.Path != loc {
		t.Fatalf("first visit's cookie %+v: want %s's token, HttpOnly, SameSite=Strict, its path the page's %s", ck, port, loc)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	r, err := c.Get(u.acc.URL())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.Contains(string(page), "<script src=\"app.js\">") || strings.Contains(r.Request.URL.String(), tok) {
		t.Fatalf("the printed address followed: status %d at %s: %.100q", r.StatusCode, r.Request.URL, page)
	}
	base := r.Request.URL.String()
	for _, p := range []string{"app.js", "flame.css", "api/status", "api/report"} {
		r, err := c.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || len(b) == 0 {
			t.Errorf("GET %s with the cookie: status %d", base+p, r.StatusCode)
		}
	}
	// The cookie goes to the page's secret path only (browsers do not
	// keep cookies apart by port): elsewhere nothing.
	if u, _ := url.Parse(u.ts.URL + "/api/report"); len(jar.Cookies(u)) != 0 {
		t.Errorf("the cookie goes to /api/report too: %v", jar.Cookies(u))
	}
}

// TestAccessHost: a Host that is not one of the server's own addresses
// gets nothing, even with the token (a page served under a name rebound
// to 127.0.0.1 sends its own name); the loopback names, with any port as
// through an SSH tunnel, are allowed.
func TestAccessHost(t *testing.T) {
	u := startTestUI(t)
	tok := map[string]string{"X-Leakpath-Token": u.token(t)}
	_, port, _ := net.SplitHostPort(u.host)
	for _, h := range []string{"evil.example:" + port, "evil.example", "localhost.evil.example:" + port, "127.0.0.2:" + port, "127.0.0.1.evil.example:" + port, "[::2]:" + port} {
		code, body, _ := u.do(t, "/api/report", h, tok)
		if code != http.StatusForbidden || strings.Contains(body, "secret-command-line") {
			t.Errorf("Host %s: status %d, %.80q; want 403 and no data", h, code, body)
		}
	}
	for _, h := range []string{u.host, "localhost:" + port, "LocalHost:" + port, "[::1]:" + port, "localhost:8080", "127.0.0.1", "localhost", "[::1]"} {
		if code, _, _ := u.do(t, "/api/report", h, tok); code != http.StatusOK {
			t.Errorf("Host %s: status %d", h, code)
		}
	}
}

// TestAccessHeaders: every answer, refused or not, is neither cached nor
// sniffed and sends no Referer; the page may load only its own scripts.
func TestAccessHeaders(t *testing.T) {
	u := startTestUI(t)
	_, port, _ := net.SplitHostPort(u.host)
	for _, c := range []struct {
		path, host string
		hdr        map[string]string
	}{{"/", "", map[string]string{"X-Leakpath-Token": u.token(t)}}, {"/api/report", "", map[string]string{"X-Leakpath-Token": u.token(t)}},
		{"/api/report", "", nil}, {"/", "evil.example:" + port, nil}} {
		_, _, h := u.do(t, c.path, c.host, c.hdr)
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"} {
			if h.Get(k) != v {
				t.Errorf("GET %s (Host %q): %s %q, want %q", c.path, c.host, k, h.Get(k), v)
			}
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q", c.path, csp)
		}
	}
}

// TestNewAccessListen: a name or every address given to --listen is
// allowed in Host besides the loopback names.
func TestNewAccessListen(t *testing.T) {
	a, err := NewAccess("myhost.example:8080", &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"myhost.example:8080", "192.0.2.7:8080", "localhost:8080", "127.0.0.1:8080", "[::1]:8080"} {
		if !a.hostAllowed(h) {
			t.Errorf("listening as myhost.example at 192.0.2.7:8080: Host %s refused", h)
		}
	}
	for _, h := range []string{"evil.example:8080", "myhost.example", "myhost.example:80", "192.0.2.7:80", "192.0.2.7"} {
		if a.hostAllowed(h) {
			t.Errorf("listening as myhost.example at 192.0.2.7:8080: Host %s allowed", h)
		}
	}
	a, err = NewAccess(":80", &net.TCPAddr{IP: net.IPv4zero, Port: 80})
	if err != nil {
		t.Fatal(err)
	}
	name, _ := os.Hostname()
	for _, h := range []string{strings.ToLower(name) + ":80", strings.ToLower(name), "localhost", "127.0.0.1"} {
		if !a.hostAllowed(h) {
			t.Errorf("listening on every address at port 80: Host %s refused", h)
		}
	}
}

// TestSource: /api/source shows lines of a regular file a leak's frame
// names and of no other: not a file no frame names, a symbolic link, a
// FIFO, a directory, a file over MaxSourceBytes, nor (as root) one the
// invoking user could not read.
func TestSource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.c")
	os.WriteFile(good, []byte("one\ntwo\nthree\n"), 0o644)
	unnamed := filepath.Join(dir, "unnamed.c")
	os.WriteFile(unnamed, []byte("unnamed\n"), 0o644)
	link := filepath.Join(dir, "link.c")
	os.Symlink(good, link)
	fifo := filepath.Join(dir, "fifo.c")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.c")
	os.WriteFile(big, nil, 0o644)
	os.Truncate(big, MaxSourceBytes+1)
	missing := filepath.Join(dir, "missing.c")
	u := startTestUI(t, good, link, fifo, dir, big, missing)
	tok := map[string]string{"X-Leakpath-Token": u.token(t)}
	get := func(file string) (int, string) {
		code, body, _ := u.do(t, "/api/source?line=1&file="+url.QueryEscape(file), "", tok)
		return code, body
	}
	if code, body := get(good); code != http.StatusOK || !strings.Contains(body, `"text":"two"`) {
		t.Errorf("good.c: status %d %s", code, body)
	}
	for _, c := range []struct {
		file, why string
		code      int
	}{{unnamed, "not a source file of the report", 404}, {"/etc/passwd", "not a source file of the report", 404},
		{link, "symbolic link", 403}, {fifo, "not a regular file", 403}, {dir, "not a regular file", 403},
		{big, "more than the 4194304", 403}, {missing, "no such file", 404}} {
		code, body := get(c.file)
		if code != c.code || !strings.Contains(body, c.why) {
			t.Errorf("%s: status %d %s; want %d saying %q", filepath.Base(c.file), code, body, c.code, c.why)
		}
	}
	t.Run("another user's file", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root: only as root could leakpath read a file its user cannot")
		}
		if os.Getenv("SUDO_UID") != "" {
			t.Skip("under sudo the invoking user is SUDO_UID's; this test wants root itself")
		}
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("no user nobody to own the file: %v", err)
		}
		uid, _ := strconv.Atoi(nobody.Uid)
		secret := filepath.Join(dir, "shadow")
		os.WriteFile(secret, []byte("root:SECRET-HASH:19000::::::\n"), 0o600)
		if err := os.Chown(secret, uid, -1); err != nil {
			t.Fatal(err)
		}
		// Readable by others, but in a directory only nobody may search.
		hidden := filepath.Join(dir, "private")
		os.Mkdir(hidden, 0o700)
		inHidden := filepath.Join(hidden, "open.c")
		os.WriteFile(inHidden, []byte("IN-PRIVATE-DIR\n"), 0o644)
		os.Chown(hidden, uid, -1)
		mine := filepath.Join(dir, "mine.c")
		os.WriteFile(mine, []byte("MINE\n"), 0o600)
		u := startTestUI(t, secret, inHidden, mine)
		tok := map[string]string{"X-Leakpath-Token": u.token(t)}
		for _, f := range []string{secret, inHidden} {
			code, body, _ := u.do(t, "/api/source?line=1&file="+url.QueryEscape(f), "", tok)
			if code != http.StatusForbidden || strings.Contains(body, "SECRET") || strings.Contains(body, "IN-PRIVATE") || !strings.Contains(body, fmt.Sprint("uid 0")) {
				t.Errorf("%s: status %d %s; want 403 naming uid 0", f, code, body)
			}
		}
		if code, body, _ := u.do(t, "/api/source?line=1&file="+url.QueryEscape(mine), "", tok); code != http.StatusOK || !strings.Contains(body, "MINE") {
			t.Errorf("root's own 0600 file: status %d %s", code, body)
		}
	})
}

// TestSourceUnderSudo: as root under sudo, the invoking user is SUDO_UID:
// its own file is shown, root's private file is not.
func TestSourceUnderSudo(t *testing.T) {
	if os.Geteuid() != 0 || os.Getuid() != 0 {
		t.Skip("needs root: only as root could leakpath read a file its user cannot")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to be the invoking user: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	t.Setenv("SUDO_UID", nobody.Uid)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		os.Chmod(d, 0o755) // searchable by nobody
	}
	theirs := filepath.Join(dir, "theirs.c")
	os.WriteFile(theirs, []byte("THEIRS\n"), 0o600)
	os.Chown(theirs, uid, -1)
	roots := filepath.Join(dir, "roots.c")
	os.WriteFile(roots, []byte("ROOTS\n"), 0o600)
	open := filepath.Join(dir, "open.c")
	os.WriteFile(open, []byte("OPEN\n"), 0o644)
	u := startTestUI(t, theirs, roots, open)
	tok := map[string]string{"X-Leakpath-Token": u.token(t)}
	for f, want := range map[string]string{theirs: "THEIRS", open: "OPEN"} {
		if code, body, _ := u.do(t, "/api/source?line=1&file="+url.QueryEscape(f), "", tok); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("%s: status %d %s", filepath.Base(f), code, body)
		}
	}
	if code, body, _ := u.do(t, "/api/source?line=1&file="+url.QueryEscape(roots), "", tok); code != http.StatusForbidden || strings.Contains(body, "ROOTS") || !strings.Contains(body, "uid "+nobody.Uid) {
		t.Errorf("root's 0600 file under sudo by nobody: status %d %s", code, body)
	}
}
