package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Access guards a server: only requests naming one of its own addresses
// in Host (which defeats DNS rebinding) and carrying its per-run token
// are answered. A browser gets the token once, in the printed address;
// the answer sets it as a cookie and sends the browser to the page's
// secret path, where the cookie alone goes along.
type Access struct {
	token  string
	prefix string          // "/SECRET/": the page's path, to which the cookie is limited
	cookie string          // the cookie's name, with the port (two servers' cookies stay apart)
	hosts  map[string]bool // host:port (and host for port 80) besides the loopback names
	url    string
}

// loopback are the names of this machine that only a browser on it (or
// behind an SSH tunnel to it) sends: any port, or none, is allowed with
// them, as a tunnel's local port is not the server's.
var loopback = map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}

// hostAllowed says whether Host h names this server.
func (a *Access) hostAllowed(h string) bool {
	h = strings.ToLower(h)
	if a.hosts[h] {
		return true
	}
	name, _, err := net.SplitHostPort(h)
	if err != nil {
		name = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return loopback[name]
}

// NewAccess draws the token of a server listening at addr, asked for as
// listen (the --listen value: a host name given there is allowed in Host
// too).
func NewAccess(listen string, addr net.Addr) (*Access, error) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("web UI: want a TCP address, not %s", addr)
	}
	token, err := randomHex(32)
	if err != nil {
		return nil, err
	}
	secret, err := randomHex(16)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ta.Port)
	a := &Access{token: token, prefix: "/" + secret + "/", cookie: "leakpath-token-" + port, hosts: map[string]bool{}}
	allow := func(host string) {
		if host == "" {
			return
		}
		host = strings.ToLower(host)
		a.hosts[net.JoinHostPort(host, port)] = true
		if port == "80" { // a browser leaves the default port out of Host
			a.hosts[strings.Trim(host, "[]")] = true
			if strings.Contains(host, ":") {
				a.hosts["["+host+"]"] = true
			}
		}
	}
	allow(ta.IP.String())
	if h, _, err := net.SplitHostPort(listen); err == nil && net.ParseIP(h) == nil {
		allow(h) // a name the user chose to listen on
	}
	if ta.IP.IsUnspecified() {
		// Every address: the machine's names and addresses as a browser
		// elsewhere would write them.
		if name, err := os.Hostname(); err == nil {
			allow(name)
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, ia := range addrs {
				if n, ok := ia.(*net.IPNet); ok {
					allow(n.IP.String())
				}
			}
		}
	}
	a.url = "http://" + net.JoinHostPort(ta.IP.String(), port) + "/?token=" + token
	return a, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("web UI token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// URL is the address to print: the only place the token is shown.
func (a *Access) URL() string { return a.url }

// valid says whether s is the token, in constant time.
func (a *Access) valid(s string) bool {
	return s != "" && subtle.ConstantTimeCompare([]byte(s), []byte(a.token)) == 1
}

// authorized says whether r carries the token: in its cookie, a header or
// the query.
func (a *Access) authorized(r *http.Request) bool {
	if c, err := r.Cookie(a.cookie); err == nil && a.valid(c.Value) {
		return true
	}
	if a.valid(r.Header.Get("X-Leakpath-Token")) {
		return true
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && a.valid(strings.TrimSpace(tok)) {
		return true
	}
	return a.valid(r.URL.Query().Get("token"))
}

// securityHeaders go with every answer: nothing is cached or sniffed, no
// Referer carries an address away, and the page runs only its own
// scripts and styles, in no frame of another page.
func securityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// Wrap guards h. Pages under the secret path are h's at the root; API
// clients may also ask at the root with the token in a header.
func (a *Access) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if !a.hostAllowed(r.Host) {
			http.Error(w, "leakpath: forbidden: Host "+strconv.Quote(r.Host)+" is not this server's address", http.StatusForbidden)
			return
		}
		if !a.authorized(r) {
			http.Error(w, "leakpath: forbidden: open the address leakpath printed (it carries the token)", http.StatusForbidden)
			return
		}
		rest, under := strings.CutPrefix(r.URL.Path, a.prefix)
		q := r.URL.Query()
		if q.Has("token") && (r.Method == http.MethodGet || r.Method == http.MethodHead) && !strings.HasPrefix(r.URL.Path, "/api/") {
			// A browser's first visit: the cookie, and the address
			// without the token.
			http.SetCookie(w, &http.Cookie{Name: a.cookie, Value: a.token, Path: a.prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			if !under {
				rest = strings.TrimLeft(r.URL.Path, "/")
			}
			q.Del("token")
			to := url.URL{Path: a.prefix + rest, RawQuery: q.Encode()}
			http.Redirect(w, r, to.RequestURI(), http.StatusSeeOther)
			return
		}
		if under {
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = "/"+rest, ""
			r = r2
		}
		h.ServeHTTP(w, r)
	})
}
