package control

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAsk: a request and its answer travel whole; an answer's error
// becomes Ask's error.
func TestAsk(t *testing.T) {
	dir := privateTemp(t)
	sock := filepath.Join(dir, SocketName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			magic := make([]byte, len(Magic))
			br.Read(magic)
			var req Request
			if string(magic) != Magic || ReadMessage(br, &req, MaxRequest) != nil {
				c.Close()
				continue
			}
			resp := Response{Version: Version, Report: []byte(`{"pid":` + strconv.Itoa(req.PID) + `}`), Text: "hello"}
			if req.PID == 2 {
				resp = Response{Version: Version, Error: "pid 2 is not recorded"}
			}
			WriteMessage(c, nil, resp, MaxResponse)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	resp, err := Ask(ctx, Endpoint{Dir: dir}, Request{Op: "snapshot", PID: 1})
	if err != nil || string(resp.Report) != `{"pid":1}` || resp.Text != "hello" {
		t.Errorf("Ask: %+v, %v", resp, err)
	}
	if _, err := Ask(ctx, Endpoint{Dir: dir}, Request{Op: "snapshot", PID: 2}); err == nil || err.Error() != "pid 2 is not recorded" {
		t.Errorf("Ask of an unrecorded pid: %v", err)
	}
	if _, err := Ask(ctx, Endpoint{Dir: privateTemp(t)}, Request{}); err == nil || !strings.Contains(err.Error(), "connect to the collector") {
		t.Errorf("Ask of no socket: %v", err)
	}
}

// privateTemp is a temporary directory only we may enter, as a session's.
func privateTemp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFindErrors(t *testing.T) {
	for pid, want := range map[int]string{
		0:           "want a positive process id",
		1 << 30:     "no process with pid",
		os.Getpid(): "is not recorded by leakpath",
	} {
		if _, err := Find(pid); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Find(%d): %v; want %q", pid, err, want)
		}
	}
}

// FuzzReadMessage: whatever arrives on the socket is read without a panic.
func FuzzReadMessage(f *testing.F) {
	var b bytes.Buffer
	WriteMessage(&b, nil, Request{Version: 1, Op: "snapshot", PID: 42}, MaxRequest)
	f.Add(b.Bytes())
	f.Add([]byte("{\"version\":1,\"report\":{\"a\":[1,2]}}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var req Request
		ReadMessage(bytes.NewReader(in), &req, 64)
		var resp Response
		ReadMessage(bytes.NewReader(in), &resp, MaxResponse)
	})
}
