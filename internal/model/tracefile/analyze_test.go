package tracefile

import (
	"os"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// TestAnalyzeFile re-encodes the trace named by $LPT_FILE and reports
// where its bytes go (go test -run AnalyzeFile -v -report).
func TestAnalyzeFile(t *testing.T) {
	path := os.Getenv("LPT_FILE")
	if !*report || path == "" {
		t.Skip("needs -report and LPT_FILE")
	}
	evs, err := readEvents(path)
	if err != nil {
		if evs == nil {
			t.Fatal(err)
		}
		t.Logf("read: %v", err)
	}
	kinds := map[event.Kind]int{}
	threads := map[int32]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
		threads[ev.Thread]++
	}
	fi, _ := os.Stat(path)
	t.Logf("%s: %d bytes, %d events (%.3f B/event): %v; %d threads", path, fi.Size(), len(evs), float64(fi.Size())/float64(len(evs)), kinds, len(threads))
	for _, c := range []Compression{CompressFastest, CompressDefault, CompressBetter} {
		data := writeTrace(t, evs, Options{Compression: c}, 4096)
		t.Logf("compression %d: %d bytes, %.3f B/event", c, len(data), float64(len(data))/float64(len(evs)))
	}
	shiftReport(t, evs)
	streamReport(t, evs)
}

// shiftReport logs the trace size with lossy times.
func shiftReport(t *testing.T, evs []event.Event) {
	for _, shift := range []uint{4, 8, 10, 12} {
		for _, c := range []Compression{CompressFastest, CompressDefault} {
			data := writeTrace(t, evs, Options{Compression: c, TimeShift: shift}, 4096)
			t.Logf("time shift %d, compression %d: %d bytes, %.3f B/event", shift, c, len(data), float64(len(data))/float64(len(evs)))
		}
	}
}

// streamReport logs each stream's size, compressed on its own.
func streamReport(t *testing.T, evs []event.Event) {
	e := newEncoder()
	var streams [numStreams][]byte
	for i := range evs {
		e.add(&evs[i])
		if e.size() >= DefaultChunkSize || i == len(evs)-1 {
			for s := range streams {
				streams[s] = append(streams[s], e.s[s]...)
			}
			e.reset()
		}
	}
	z := newZstd(CompressFastest)
	for s := range streams {
		c := 0
		for b := streams[s]; len(b) > 0; {
			k := min(len(b), DefaultChunkSize/4)
			c += len(z.EncodeAll(b[:k], nil))
			b = b[k:]
		}
		t.Logf("stream %-6s raw %9d  zstd %9d  (%.3f B/event)", streamNames[s], len(streams[s]), c, float64(c)/float64(len(evs)))
	}
}
