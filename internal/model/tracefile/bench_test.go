package tracefile

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/leakpath/leakpath/internal/model/event"
)

var (
	synthOnce sync.Once
	synthEvs  []event.Event
)

// synth1M is the benchmark stream: 1M allocations (and their frees) from
// 5,000 stacks.
func synth1M() []event.Event {
	synthOnce.Do(func() { synthEvs = synthStream(1, 1_000_000, 5000) })
	return synthEvs
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

func benchWrite(b *testing.B, opts Options) { benchWriteEvents(b, synth1M(), opts) }

func benchWriteEvents(b *testing.B, evs []event.Event, opts Options) {
	var size int64
	runtime.GC()
	cpu := startCPU()
	b.ResetTimer()
	for b.Loop() {
		cw := &countWriter{}
		w, err := NewWriterOptions(cw, testMeta, opts)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < len(evs); i += 4096 {
			if err := w.Write(evs[i:min(i+4096, len(evs))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	n := float64(len(evs)) * float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/event")
	b.ReportMetric(n/b.Elapsed().Seconds()/1e6, "Mevents/s")
	b.ReportMetric(float64(size)/float64(len(evs)), "B/event")
	cpu.report(b, n)
}

func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"fastest", Options{}},
		{"fastest-sync", Options{Sync: true}},
		{"default", Options{Compression: CompressDefault}},
		{"default-sync", Options{Compression: CompressDefault, Sync: true}},
		{"better", Options{Compression: CompressBetter}},
	} {
		b.Run(c.name, func(b *testing.B) { benchWrite(b, c.opts) })
	}
}

// BenchmarkEncode is the event encoder alone, without zstd.
func BenchmarkEncode(b *testing.B) {
	evs := synth1M()
	e := newEncoder()
	runtime.GC()
	var raw int
	for b.Loop() {
		raw = 0
		for i := range evs {
			e.add(&evs[i])
			if e.size() >= DefaultChunkSize {
				raw += e.size()
				e.reset()
			}
		}
		raw += e.size()
		e.reset()
	}
	n := float64(len(evs)) * float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/event")
	b.ReportMetric(float64(raw)/float64(len(evs)), "rawB/event")
}

func BenchmarkRead(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"fastest", Options{}},
		{"default", Options{Compression: CompressDefault}},
	} {
		b.Run(c.name, func(b *testing.B) {
			evs := synth1M()
			data := writeTrace(b, evs, c.opts, 4096)
			benchRead(b, data, len(evs))
		})
	}
}

var report = flag.Bool("report", false, "report trace sizes of the synthetic stream (TestSynthSize, TestHeaptrackCompare)")

func benchRead(b *testing.B, data []byte, nevs int) {
	buf := make([]event.Event, 0, 4096)
	runtime.GC()
	cpu := startCPU()
	b.ResetTimer()
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			buf, err = r.Next(buf)
			n += len(buf)
			if err != nil {
				break
			}
		}
		if err != io.EOF || n != nevs {
			b.Fatal(err, n)
		}
		r.Close()
	}
	n := float64(nevs) * float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/event")
	b.ReportMetric(n/b.Elapsed().Seconds()/1e6, "Mevents/s")
	cpu.report(b, n)
}

// cpuClock measures CPU time, which on a busy machine says more than the
// wall clock: the benchmark goroutine's thread (locked to it) and the
// whole process (the compressing goroutine and the GC included).
type cpuClock struct{ thread, proc time.Duration }

func cpuNow() cpuClock {
	var t, p syscall.Rusage
	syscall.Getrusage(1, &t) // RUSAGE_THREAD
	syscall.Getrusage(syscall.RUSAGE_SELF, &p)
	d := func(r *syscall.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return cpuClock{d(&t), d(&p)}
}

func startCPU() cpuClock {
	runtime.LockOSThread()
	return cpuNow()
}

func (c cpuClock) report(b *testing.B, n float64) {
	now := cpuNow()
	runtime.UnlockOSThread()
	b.ReportMetric(float64(now.thread-c.thread)/n, "thread-cpu-ns/event")
	b.ReportMetric(float64(now.proc-c.proc)/n, "cpu-ns/event")
}

// TestSynthSize reports the size of the synthetic stream's trace per
// level (go test -run SynthSize -v -report).
func TestSynthSize(t *testing.T) {
	if !*report {
		t.Skip("needs -report")
	}
	evs := synth1M()
	kinds := map[event.Kind]int{}
	for _, ev := range evs {
		kinds[ev.Kind]++
	}
	t.Logf("%d events: %v", len(evs), kinds)
	for _, c := range []Compression{CompressFastest, CompressDefault, CompressBetter} {
		data := writeTrace(t, evs, Options{Compression: c}, 4096)
		t.Logf("compression %d: %d bytes, %.3f B/event", c, len(data), float64(len(data))/float64(len(evs)))
		if c == CompressFastest {
			got, err := readAll(t, data)
			if err != nil {
				t.Fatal(err)
			}
			diffEvents(t, got, normalize(evs))
		}
	}
	shiftReport(t, evs)
	streamReport(t, evs)
}

func newZstd(c Compression) *zstd.Encoder {
	l := zstd.SpeedFastest
	if c == CompressDefault {
		l = zstd.SpeedDefault
	}
	e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(l), zstd.WithEncoderConcurrency(1), zstd.WithAllLitEntropyCompression(true))
	return e
}

// BenchmarkEncodeHot encodes batches that are in the cache, as a
// collector's freshly decoded batch would be.
func BenchmarkEncodeHot(b *testing.B) {
	evs := synth1M()
	e := newEncoder()
	batch := make([]event.Event, 4096)
	runtime.GC()
	var ns time.Duration
	n := 0
	for b.Loop() {
		for i := 0; i+len(batch) <= len(evs); i += len(batch) {
			copy(batch, evs[i:])
			for j := range batch {
				if x := batch[j].X; x != nil && x.Frames != nil {
					c := *x
					c.Frames = nil
					batch[j].X = &c
				}
			}
			start := time.Now()
			for j := range batch {
				e.add(&batch[j])
				if e.size() >= DefaultChunkSize {
					e.reset()
				}
			}
			ns += time.Since(start)
			n += len(batch)
		}
	}
	b.ReportMetric(float64(ns.Nanoseconds())/float64(n), "ns/event")
}

// BenchmarkEncodeFile is BenchmarkEncodeHot on a real trace's events
// (LPT_FILE=x.lpt), in batches as Writer.encode takes them, with the raw
// payload size per event.
func BenchmarkEncodeFile(b *testing.B) {
	evs := fileEvents(b)
	e := newEncoder()
	batch := make([]event.Event, 1024)
	var ns time.Duration
	cpu := startCPU()
	n, raw := 0, 0
	for b.Loop() {
		for i := 0; i < len(evs); i += len(batch) {
			k := copy(batch, evs[i:])
			start := time.Now()
			for j := range k {
				e.add(&batch[j])
				if e.full(DefaultChunkSize) {
					raw += e.size()
					e.reset()
				}
			}
			ns += time.Since(start)
			n += k
		}
	}
	b.ReportMetric(float64(ns.Nanoseconds())/float64(n), "ns/event")
	cpu.report(b, float64(n))
	b.ReportMetric(float64(raw)/float64(n), "rawB/event")
}

// fileEvents returns the events of the trace named by $LPT_FILE, or skips.
func fileEvents(b *testing.B) []event.Event {
	path := os.Getenv("LPT_FILE")
	if path == "" {
		b.Skip("needs LPT_FILE")
	}
	evs, err := readEvents(path)
	if err != nil && evs == nil {
		b.Fatal(err)
	}
	if err != nil {
		b.Logf("%s: measured on the %d events read before: %v", path, len(evs), err)
	}
	return evs
}

// readEvents returns the events of the trace at path and the error that
// ended the reading early (nil at the trace's end), so a caller can still
// measure a trace whose tail is damaged but says so.
func readEvents(path string) ([]event.Event, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var evs []event.Event
	buf := make([]event.Event, 0, 4096)
	for {
		buf, err = r.Next(buf)
		evs = append(evs, buf...)
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
	}
}

// BenchmarkWriteFile and BenchmarkReadFile use a real trace:
// LPT_FILE=x.lpt go test -bench File.
func BenchmarkWriteFile(b *testing.B) {
	evs := fileEvents(b)
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"fastest", Options{}},
		{"fastest-sync", Options{Sync: true}},
		{"default", Options{Compression: CompressDefault}},
		{"fastest-shift10", Options{TimeShift: 10}},
	} {
		b.Run(c.name, func(b *testing.B) { benchWriteEvents(b, evs, c.opts) })
	}
}

func BenchmarkReadFile(b *testing.B) {
	evs := fileEvents(b)
	data := writeTrace(b, evs, Options{}, 4096)
	benchRead(b, data, len(evs))
}

// BenchmarkDecode is the event decoder alone, without zstd.
func BenchmarkDecode(b *testing.B) {
	evs := synth1M()
	e := newEncoder()
	var payloads [][]byte
	for i := range evs {
		e.add(&evs[i])
		if e.size() >= DefaultChunkSize || i == len(evs)-1 {
			payloads = append(payloads, e.payload(nil))
			e.reset()
		}
	}
	d := newDecoder()
	buf := make([]event.Event, 0, 4096)
	runtime.GC()
	cpu := startCPU()
	b.ResetTimer()
	for b.Loop() {
		for _, p := range payloads {
			if err := d.reset(p); err != nil {
				b.Fatal(err)
			}
			for !d.done() {
				buf = d.next(buf[:0], 4096)
				if err := d.err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	n := float64(len(evs)) * float64(b.N)
	b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/event")
	cpu.report(b, n)
}
