package tracefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
	"github.com/leakpath/leakpath/internal/model/event"
)

// Compression selects the zstd level of the chunks.
type Compression int

// The compression levels. The zero value is CompressFastest.
const (
	CompressFastest Compression = iota // zstd.SpeedFastest
	CompressDefault                    // zstd.SpeedDefault
	CompressBetter                     // zstd.SpeedBetterCompression
)

// Options tune a Writer. The zero value gives the defaults.
type Options struct {
	// ChunkSize is the uncompressed size at which Write closes a chunk;
	// 0: DefaultChunkSize. It is capped at 16 MiB.
	ChunkSize int
	// Compression is the zstd level.
	Compression Compression
	// Sync encodes, compresses and writes chunks on the goroutine that
	// calls Write or Flush. Otherwise a background goroutine compresses
	// and writes chunk N while chunk N+1 is encoded, where Encode says.
	Sync bool
	// Encode says where events are encoded when not Sync.
	Encode EncodeOn
	// TimeShift, when not 0, makes the trace lossy: every Event.Time is
	// stored as Time>>TimeShift and read back as (Time>>TimeShift)<<
	// TimeShift. Exact ticks are often the largest part of a trace; with
	// ticks of ~3 GHz, a shift of 10 keeps a resolution of ~0.3 µs. At
	// most 32. ClockInfo values are kept exactly.
	TimeShift uint
	// version, when not 0, codes the payload as this older format
	// version did (tests of readers of older traces; the header still
	// says Version).
	version int
}

// EncodeOn says where a Writer encodes events.
type EncodeOn int

// Where to encode. The zero value is EncodeAuto.
const (
	// EncodeAuto is EncodeAside when GOMAXPROCS is more than 2, else
	// EncodeInWrite: the copy for the encoder's goroutine and its reading
	// the events on another core cost about what compression does (8-10
	// ns an event), so it pays only where a core is free for it.
	EncodeAuto EncodeOn = iota
	// EncodeInWrite encodes on the goroutine that calls Write.
	EncodeInWrite
	// EncodeAside makes Write only check and copy the events, which a
	// goroutine of their own encodes: the caller's time per event drops
	// to a few ns.
	EncodeAside
)

// ErrClosed is returned by a Writer used after Close.
var ErrClosed = errors.New("tracefile: writer is closed")

// Writer appends events to a trace as they come: each chunk is written
// with one write call as soon as it is closed, so the file is readable up
// to the last whole chunk even if the recorder is killed. A Writer is not
// safe for concurrent use.
type Writer struct {
	path string
	f    *os.File // nil for NewWriter
	w    io.Writer
	enc  *encoder
	zenc *zstd.Encoder
	pack packer // owned by the goroutine that compresses
	// whole compresses the payload as one zstd frame, as format versions
	// before 9 did (tests of readers of older traces).
	whole     bool
	chunkSize int
	events    atomic.Int64
	written   atomic.Int64

	// The background pipeline: jobs is nil in Sync mode, evs unless the
	// events are encoded aside.
	evs     chan evBatch // events to encode, from Write
	evPool  chan []event.Event
	pend    []event.Event // events copied by Write, not yet sent to evs
	extra   bool          // some of pend have an Extra
	encDone chan struct{}
	jobs    chan *job // chunks to compress and write
	pool    chan *job
	done    chan struct{}

	mu  sync.Mutex
	err error // the first write error; sticky

	chunks int64  // chunks closed
	last   uint64 // the latest event time in the chunk being encoded
	// Of the chunks in the file (see Kept): their events and the latest
	// event time in them.
	keptEvents atomic.Int64
	keptTime   atomic.Uint64
	timeMode   atomic.Uint32 // the time coding chosen at the last probe, +1; 0: none yet
	probe      []byte        // owned by the goroutine that compresses

	closed   bool
	closeErr error
}

// evBatch is a run of events on their way to the encoder, or a flush
// marker.
type evBatch struct {
	evs   []event.Event
	extra bool // some of evs have an Extra
	flush chan struct{}
}

// handOff is how many events Write gathers before it hands them to the
// encoder.
const handOff = 4096

// job is a closed chunk on its way to the file, or a flush marker.
type job struct {
	s     [numStreams][]byte
	alt   []byte
	mode  byte   // the time coding of s[sTime]
	dual  bool   // alt holds the other
	raw   []byte // the payload
	out   []byte // chunk header and zstd frame
	count uint32
	last  uint64 // the latest event time in it
	flush chan struct{}
}

// Create creates (or truncates) the file path and writes the trace header.
func Create(path string, meta Meta) (*Writer, error) {
	return CreateOptions(path, meta, Options{})
}

// CreateOptions is Create with options.
func CreateOptions(path string, meta Meta, opts Options) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	w, err := NewFileWriter(f, meta, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// NewFileWriter writes a trace to f, a file created for it, starting with
// the header. Close closes f.
func NewFileWriter(f *os.File, meta Meta, opts Options) (*Writer, error) {
	w, err := newWriter(f, f.Name(), meta, opts)
	if err != nil {
		return nil, err
	}
	w.f = f
	return w, nil
}

// NewWriter writes a trace to w, starting with the header. Close does not
// close w.
func NewWriter(w io.Writer, meta Meta) (*Writer, error) {
	return newWriter(w, "", meta, Options{})
}

// NewWriterOptions is NewWriter with options.
func NewWriterOptions(w io.Writer, meta Meta, opts Options) (*Writer, error) {
	return newWriter(w, "", meta, opts)
}

func newWriter(w io.Writer, path string, meta Meta, opts Options) (*Writer, error) {
	name := path
	if name == "" {
		name = "trace"
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("tracefile: %s: meta: %w", name, err)
	}
	if opts.TimeShift > maxTimeShift {
		return nil, fmt.Errorf("tracefile: %s: time shift %d exceeds %d", name, opts.TimeShift, maxTimeShift)
	}
	if len(m) > maxMeta {
		return nil, fmt.Errorf("tracefile: %s: meta of %d bytes exceeds the limit %d", name, len(m), maxMeta)
	}
	level := zstd.SpeedFastest
	switch opts.Compression {
	case CompressDefault:
		level = zstd.SpeedDefault
	case CompressBetter:
		level = zstd.SpeedBetterCompression
	}
	size := opts.ChunkSize
	if size <= 0 {
		size = DefaultChunkSize
	}
	size = min(size, maxChunkSize)
	// The streams are mostly literals: without entropy coding of all
	// literals SpeedFastest leaves them raw (15% larger traces).
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithWindowSize(windowFor(size)), zstd.WithAllLitEntropyCompression(true))
	if err != nil {
		return nil, fmt.Errorf("tracefile: %s: %w", name, err)
	}
	tw := &Writer{path: name, w: w, enc: newEncoder(), zenc: zenc, chunkSize: size,
		whole: opts.version != 0 && opts.version < 9}
	tw.pack = packer{zenc: zenc, zstdOnly: level != zstd.SpeedFastest}
	tw.enc.shift = uint8(opts.TimeShift)
	tw.enc.before7 = opts.version != 0 && opts.version < 7
	tw.enc.before8 = opts.version != 0 && opts.version < 8
	tw.enc.before10 = opts.version != 0 && opts.version < 10
	tw.enc.perThread = opts.version == 0 || opts.version >= 11
	tw.startChunk()
	hdr := appendFileHeader(nil, m, uint8(opts.TimeShift))
	if _, err := w.Write(hdr); err != nil {
		zenc.Close()
		return nil, fmt.Errorf("tracefile: %s: write header: %w", name, err)
	}
	tw.written.Store(int64(len(hdr)))
	if !opts.Sync {
		tw.jobs = make(chan *job, 1)
		tw.pool = make(chan *job, 3)
		tw.done = make(chan struct{})
		go tw.worker()
		if opts.Encode == EncodeAside || opts.Encode == EncodeAuto && runtime.GOMAXPROCS(0) > 2 {
			tw.evs = make(chan evBatch, 2)
			tw.evPool = make(chan []event.Event, 3)
			tw.encDone = make(chan struct{})
			tw.pend = make([]event.Event, 0, handOff)
			go tw.encodeLoop()
		}
	}
	return tw, nil
}

// windowFor is a zstd window (a power of two) that covers a chunk.
func windowFor(size int) int {
	w := zstd.MinWindowSize
	for w < size && w < zstd.MaxWindowSize {
		w *= 2
	}
	return w
}

// Write appends events in order. It buffers at most a few chunks and
// never retains evs or any slice they refer to (it copies the events for
// the encoder's goroutine). An event beyond the format's limits (MaxFrames, MaxString...) is an
// error; the events before it are written.
func (w *Writer) Write(evs []event.Event) error {
	if w.closed {
		return ErrClosed
	}
	if err := w.failed(); err != nil {
		return err
	}
	if i, err := w.accept(evs); err != nil {
		return fmt.Errorf("tracefile: %s: event %d of the batch: %w", w.path, i, err)
	}
	return w.failed()
}

// accept takes the events before the first one beyond the format's
// limits, and returns its index and why: encodes them, or copies them for
// the encoder's goroutine, in one pass.
func (w *Writer) accept(evs []event.Event) (int, error) {
	if w.evs == nil {
		n, err := w.encode(evs)
		w.events.Add(int64(n))
		return n, err
	}
	for i := range evs {
		ev := &evs[i]
		if ev.Proc >= event.MaxImages || ev.X != nil {
			if err := checkLimits(ev); err != nil {
				w.events.Add(int64(i))
				return i, err
			}
		}
		w.pend = append(w.pend, *ev)
		if ev.X != nil {
			w.pend[len(w.pend)-1].X = detach(ev.X)
			w.extra = true
		}
		if len(w.pend) >= handOff {
			w.sendPending(nil)
		}
	}
	w.events.Add(int64(len(evs)))
	return 0, nil
}

// sendPending hands the events copied so far, and flush if not nil, to the
// encoder's goroutine.
func (w *Writer) sendPending(flush chan struct{}) {
	if len(w.pend) == 0 && flush == nil {
		return
	}
	w.evs <- evBatch{evs: w.pend, extra: w.extra, flush: flush}
	w.extra = false
	select {
	case w.pend = <-w.evPool:
	default:
		w.pend = make([]event.Event, 0, handOff)
	}
}

// encode adds events to the chunk, closing it when full, up to the first
// one beyond the format's limits: it returns how many it added and why it
// stopped.
func (w *Writer) encode(evs []event.Event) (int, error) {
	for i := range evs {
		if err := w.enc.add(&evs[i]); err != nil {
			return i, err
		}
		w.last = max(w.last, evs[i].Time)
		if w.enc.full(w.chunkSize) {
			w.closeChunk()
		}
	}
	return len(evs), nil
}

// encodeLoop encodes the events Write sends, and at a flush marker ends
// the chunk and passes the marker on to the compressing goroutine.
func (w *Writer) encodeLoop() {
	defer close(w.encDone)
	defer close(w.jobs)
	for b := range w.evs {
		if _, err := w.encode(b.evs); err != nil {
			// (accept checked the limits: not expected.)
			w.fail(fmt.Errorf("tracefile: %s: %w", w.path, err))
		}
		if b.extra {
			// Drop what the events point to (heap events point to
			// nothing: most batches need no pass).
			for i := range b.evs {
				b.evs[i].X = nil
			}
		}
		select {
		case w.evPool <- b.evs[:0]:
		default:
		}
		if b.flush != nil {
			w.closeChunk()
			w.jobs <- &job{flush: b.flush}
		}
	}
}

// Flush ends the current chunk and writes it out with one write call,
// waiting until it (and any chunk before it) is written.
func (w *Writer) Flush() error {
	if w.closed {
		return ErrClosed
	}
	if w.jobs == nil {
		w.closeChunk()
		return w.failed()
	}
	flush := make(chan struct{})
	if w.evs != nil {
		w.sendPending(flush)
	} else {
		w.closeChunk()
		w.jobs <- &job{flush: flush}
	}
	<-flush
	return w.failed()
}

// Close flushes, writes the trailer that marks a complete trace, stops the
// background goroutine and closes the file if Create opened it. Calling it
// again returns the first call's result.
func (w *Writer) Close() error {
	if w.closed {
		return w.closeErr
	}
	err := w.Flush()
	w.closed = true
	if w.evs != nil {
		close(w.evs) // encodeLoop closes jobs
		<-w.encDone
	} else if w.jobs != nil {
		close(w.jobs)
	}
	if w.jobs != nil {
		<-w.done
	}
	if err == nil {
		var b [chunkHeaderSize]byte
		n := uint64(w.events.Load())
		h := chunkHeader{magic: endMagic, rawLen: uint32(n), count: uint32(n >> 32)}
		h.put(b[:])
		err = w.write(b[:])
	}
	w.zenc.Close()
	if w.f != nil {
		if cerr := w.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("tracefile: %w", cerr)
		}
	}
	w.closeErr = err
	return err
}

// Stats returns the number of events accepted by Write and the number of
// bytes written to the file so far (chunks still being compressed are not
// counted). Unlike the other methods, it may be called from any goroutine.
func (w *Writer) Stats() (events, bytesWritten int64) {
	return w.events.Load(), w.written.Load()
}

// Kept tells what the file holds in whole chunks: after a write failed
// (a full disk), the trace it stays, cut there. bytes is the file's size,
// events the events in it, last the latest event time among them (0: none).
func (w *Writer) Kept() (events, bytes int64, last uint64) {
	return w.keptEvents.Load(), w.written.Load(), w.keptTime.Load()
}

// fail records the first error.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *Writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// closeChunk hands the current chunk, if any, to the compressor.
func (w *Writer) closeChunk() {
	if w.enc.n == 0 {
		return
	}
	var j *job
	select {
	case j = <-w.pool:
	default:
		j = new(job)
	}
	// The job takes the encoder's streams and leaves it its own, emptied
	// by reset.
	j.s, w.enc.s = w.enc.s, j.s
	j.alt, w.enc.alt = w.enc.alt, j.alt
	j.mode, j.dual = w.enc.timeMode, w.enc.dual
	j.count = uint32(w.enc.n)
	j.last, w.last = w.last, 0
	w.enc.reset()
	w.chunks++
	w.startChunk()
	if w.jobs == nil {
		w.compress(j)
		return
	}
	w.jobs <- j
}

// warmUpPayload is what the background goroutine compresses first: data
// that takes the encoder's match-finding path. (Zeros are coded as a run
// without touching its tables, which then faulted in page by page at the
// first chunk: 3-4 ms at the end of a short run on this VM.)
func warmUpPayload() []byte {
	b := make([]byte, 4<<10)
	x := uint32(1)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = "leakpath"[x>>29]
	}
	return b
}

func (w *Writer) worker() {
	defer close(w.done)
	// The encoder sets up its tables on its first use (~3 ms at the
	// default level): here, while the recording goes on, not when the
	// first chunk is due (a short run's only one, at its end).
	w.zenc.EncodeAll(warmUpPayload(), nil)
	for j := range w.jobs {
		if j.flush != nil {
			close(j.flush)
			continue
		}
		w.compress(j)
		select {
		case w.pool <- j:
		default:
		}
	}
}

// probeEvery is how often (in chunks) compress compares the two ways of
// coding times.
const probeEvery = 8

// startChunk sets how the encoder codes the times of the next chunk: as
// the last probe chose, and every probeEvery chunks both ways.
func (w *Writer) startChunk() {
	m := w.timeMode.Load()
	w.enc.timeMode = byte(max(m, 1) - 1)
	w.enc.dual = m == 0 || w.chunks%probeEvery == 0
}

// compress compresses and writes one chunk.
func (w *Writer) compress(j *job) {
	if w.failed() != nil {
		return
	}
	flags := j.mode
	if j.dual {
		if w.codedTimeLen(j.alt) < w.codedTimeLen(j.s[sTime]) {
			flags ^= timeEMA
		}
		w.timeMode.Store(uint32(flags) + 1)
	}
	out := append(j.out[:0], make([]byte, chunkHeaderSize)...)
	var rawLen int
	if w.whole {
		j.raw = appendPayload(j.raw[:0], &j.s, j.alt, j.mode, flags)
		out = w.zenc.EncodeAll(j.raw, out)
		rawLen = len(j.raw)
	} else {
		st := j.s
		if flags != j.mode {
			st[sTime] = j.alt
		}
		// The methods are chosen again every packProbeEvery chunks: a
		// program's phases differ. (Trying them all costs twice what
		// coding a chunk does.)
		if w.pack.chunks%packProbeEvery == 0 && !w.pack.zstdOnly {
			w.pack.probe(&st)
		}
		w.pack.chunks++
		j.raw = appendHead(j.raw[:0], &st, flags)
		out, rawLen = w.pack.appendChunk(out, j.raw, &st)
	}
	h := chunkHeader{
		magic:   chunkMagic,
		compLen: uint32(len(out) - chunkHeaderSize),
		rawLen:  uint32(rawLen),
		count:   j.count,
		crc:     crc32.Checksum(out[chunkHeaderSize:], castagnoli),
	}
	h.put(out)
	j.out = out
	if err := w.write(out); err != nil {
		w.fail(err)
		return
	}
	w.keptEvents.Add(int64(j.count))
	if j.last > w.keptTime.Load() {
		w.keptTime.Store(j.last)
	}
}

// codedTimeLen is about how many bytes a time stream b codes into, to
// compare the two ways of coding times.
func (w *Writer) codedTimeLen(b []byte) int {
	if w.whole {
		w.probe = w.zenc.EncodeAll(b, w.probe[:0])
		return len(w.probe)
	}
	return min(w.pack.codedLen(b, packHuff), w.pack.codedLen(b, packS2))
}

// write writes b whole, or fails; a file is then cut back to where b
// started (the part of b written, a chunk cut short, would only be read
// as such), which also gives back the space.
func (w *Writer) write(b []byte) error {
	off := w.written.Load()
	n, err := w.w.Write(b)
	w.written.Add(int64(n))
	if err != nil {
		if w.f != nil && n > 0 && w.f.Truncate(off) == nil {
			if _, serr := w.f.Seek(off, io.SeekStart); serr == nil {
				w.written.Store(off)
			}
		}
		return fmt.Errorf("tracefile: %s: write at byte %d: %w", w.path, off, err)
	}
	return nil
}

// detach returns a copy of x that shares nothing a caller may change
// (strings aside): what Write keeps of an event until it is encoded.
func detach(x *event.Extra) *event.Extra {
	c := *x
	c.Frames = slices.Clone(x.Frames)
	c.Module = cloneWith(x.Module, func(m *event.Module) {
		m.BuildID, m.Segments = slices.Clone(m.BuildID), slices.Clone(m.Segments)
	})
	c.Process = cloneWith(x.Process, func(p *event.ProcessInfo) { p.Argv = slices.Clone(p.Argv) })
	c.Clock = cloneWith(x.Clock, func(*event.ClockInfo) {})
	c.Scan = cloneWith(x.Scan, func(s *event.ScanInfo) {
		s.Blocks, s.Types, s.Names = slices.Clone(s.Blocks), slices.Clone(s.Types), slices.Clone(s.Names)
	})
	c.RootCause = cloneWith(x.RootCause, func(r *event.RootCauseInfo) {
		r.Functions, r.Branches = slices.Clone(r.Functions), slices.Clone(r.Branches)
	})
	c.Stale = cloneWith(x.Stale, func(s *event.StaleInfo) { s.Referenced = slices.Clone(s.Referenced) })
	return &c
}

// cloneWith returns a copy of *p, its slices copied by deep, or nil.
func cloneWith[T any](p *T, deep func(*T)) *T {
	if p == nil {
		return nil
	}
	c := *p
	deep(&c)
	return &c
}
