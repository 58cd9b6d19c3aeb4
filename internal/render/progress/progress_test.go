package progress

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	if b := OnTerminal(&buf, "x"); b != nil {
		t.Errorf("a buffer got a bar")
	}
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := OnTerminal(f, "x")
	if b != nil {
		t.Errorf("a file got a bar")
	}
	b.Set(1, 2) // a nil bar does nothing
	b.Done()
}

func TestBar(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "loading")
	now := time.Unix(0, 0)
	b.now = func() time.Time { return now }
	b.Set(0, 4_000_000)
	b.Set(1_000_000, 4_000_000) // within 100 ms: not drawn
	now = now.Add(200 * time.Millisecond)
	b.Set(2_000_000, 4_000_000)
	b.Set(4_000_000, 4_000_000) // the end is always drawn
	b.Done()
	out := buf.String()
	draws := strings.Split(out, "\r")[1:]
	if len(draws) != 4 {
		t.Fatalf("%d draws, want 3 and the erase: %q", len(draws), out)
	}
	for i, want := range []string{"  0% 0.0 MB / 4.0 MB", " 50% 2.0 MB / 4.0 MB", "100% 4.0 MB / 4.0 MB"} {
		if !strings.Contains(draws[i], want) {
			t.Errorf("draw %d %q lacks %q", i, draws[i], want)
		}
	}
	if draws[1][:9] != "loading [" || strings.Count(draws[1], "#") != 15 {
		t.Errorf("half way: %q", draws[1])
	}
	if draws[3] != "\x1b[K" {
		t.Errorf("Done wrote %q", draws[3])
	}
}
