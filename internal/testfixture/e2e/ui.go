package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// UIServer is a `leakpath ui` process serving a trace.
type UIServer struct {
	Printed string       // the address leakpath printed, with its token
	URL     string       // the page's, where the printed address led (without the trailing slash)
	Client  *http.Client // has the cookie of the first visit
	Cmd     *exec.Cmd
	Stderr  *SyncBuilder
}

// UITimeout bounds a request to the UI: a guard against a hung server
// (one reading a FIFO, say), not a measure.
var UITimeout = 2 * time.Minute

// UIAddress finds the address leakpath prints: the page's on 127.0.0.1,
// with its token.
var UIAddress = regexp.MustCompile(`(http://127\.0\.0\.1:\d+/\S*)`)

// NewUIServer visits the printed address as a browser would, keeping the
// cookie it sets, and notes where it led.
func NewUIServer(t testing.TB, printed string, cmd *exec.Cmd, stderr *SyncBuilder) *UIServer {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &UIServer{Printed: printed, Client: &http.Client{Jar: jar, Timeout: UITimeout}, Cmd: cmd, Stderr: stderr}
	resp, err := s.Client.Get(printed)
	if err != nil {
		t.Fatalf("GET %s: %v", printed, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", printed, resp.StatusCode)
	}
	s.URL = strings.TrimSuffix(resp.Request.URL.String(), "/")
	return s
}

// StartUI starts `leakpath ui TRACE` (at the repository's root) on a free port, waits until the trace
// is loaded, and stops it (SIGINT) when the test ends, checking that it
// exits cleanly.
func StartUI(t testing.TB, trace string) *UIServer {
	t.Helper()
	s := StartUIAsync(t, trace)
	for deadline := time.Now().Add(testfixture.HangGuard); ; {
		var st struct{ State, Error string }
		s.Get(t, "/api/status", &st)
		if st.State == "ready" {
			break
		}
		if st.State == "error" || time.Now().After(deadline) {
			t.Fatalf("leakpath ui: state %q %s\n%s", st.State, st.Error, s.Stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// StartUIAsync is StartUI without waiting for the trace to load.
func StartUIAsync(t testing.TB, trace string) *UIServer {
	t.Helper()
	cmd := exec.Command(Bin, "ui", trace)
	cmd.Dir = Root // the fixtures' sources are named relative to it
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(SyncBuilder)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	first, err := lines.ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("leakpath ui printed no address: %v\n%s", err, stderr.String())
	}
	m := UIAddress.FindStringSubmatch(first)
	if m == nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("leakpath ui's first line names no address on 127.0.0.1: %q", first)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { io.Copy(io.Discard, lines); done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("leakpath ui after SIGINT: %v\n%s", err, stderr.String())
			}
		case <-time.After(testfixture.HangGuard):
			cmd.Process.Kill()
			t.Errorf("leakpath ui did not stop on SIGINT")
		}
	})
	return NewUIServer(t, m[1], cmd, stderr)
}

// SyncBuilder is a strings.Builder safe for a process's writes and the
// test's reads.
type SyncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Get fetches path and decodes its JSON into v; it fails the test unless
// the status is 200.
func (s *UIServer) Get(t testing.TB, path string, v any) {
	t.Helper()
	if code := s.GetCode(t, path, v); code != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, code)
	}
}

func (s *UIServer) GetCode(t testing.TB, path string, v any) int {
	t.Helper()
	resp, err := s.Client.Get(s.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v\n%.300s", path, err, b)
		}
	}
	return resp.StatusCode
}

// UITimeline is /api/timeline as the test reads it.
type UITimeline struct {
	Unit    string `json:"unit"`
	Buckets []struct {
		Heap        int64  `json:"heap"`
		HeapMax     int64  `json:"heap_max"`
		AllocBytes  uint64 `json:"alloc_bytes"`
		Allocs      uint64 `json:"allocs"`
		Frees       uint64 `json:"frees"`
		Temporary   uint64 `json:"temporary"`
		LeakedBytes uint64 `json:"leaked_bytes"`
	} `json:"buckets"`
}
