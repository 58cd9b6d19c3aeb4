package tracefile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/leakpath/leakpath/internal/model/event"
)

// Reader reads the events of a trace in the order they were written,
// holding one chunk in memory at a time.
type Reader struct {
	path    string // "" for NewReader
	f       *os.File
	r       io.Reader
	meta    Meta
	version int
	off     int64 // file offset of the next byte of r

	zdec      *zstd.Decoder
	unpack    unpacker
	dec       *decoder
	comp, raw []byte
	inChunk   bool
	chunkOff  int64
	count     uint32 // events in the current chunk
	events    int64  // events returned so far
	err       error  // sticky
}

// Open opens the trace file path and reads its header. It fails with an
// error that wraps ErrNotTrace for an empty file or one that is not a
// trace, ErrNewerVersion for a trace of a newer format, or a
// *CorruptError.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.f = f
	return r, nil
}

// NewReader reads a trace from r, starting with its header. Close does not
// close r.
func NewReader(r io.Reader) (*Reader, error) {
	return newReader(r, "")
}

func (r *Reader) name() string {
	if r.path == "" {
		return "trace"
	}
	return r.path
}

func (r *Reader) corrupt(off int64, err error, format string, args ...any) *CorruptError {
	return &CorruptError{Path: r.path, Offset: off, Reason: fmt.Sprintf(format, args...), Err: err}
}

func newReader(rd io.Reader, path string) (*Reader, error) {
	r := &Reader{path: path, r: rd}
	var h [fileHeaderSize]byte
	n, err := io.ReadFull(rd, h[:])
	r.off = int64(n)
	switch {
	case n == 0 && err == io.EOF:
		return nil, fmt.Errorf("tracefile: %s: empty file: %w", r.name(), ErrNotTrace)
	case !bytes.HasPrefix([]byte(Magic), h[:min(n, len(Magic))]):
		return nil, fmt.Errorf("tracefile: %s: %w (it starts with %q, not %q)", r.name(), ErrNotTrace, h[:min(n, len(Magic))], Magic)
	case err == io.ErrUnexpectedEOF:
		return nil, r.corrupt(0, ErrTruncated, "file header cut short after %d bytes", n)
	case err != nil:
		return nil, fmt.Errorf("tracefile: %s: read header: %w", r.name(), err)
	}
	le := binary.LittleEndian
	r.version = int(le.Uint16(h[8:]))
	if r.version > Version {
		return nil, fmt.Errorf("tracefile: %s: %w: format version %d, this leakpath reads up to version %d; use a newer leakpath",
			r.name(), ErrNewerVersion, r.version, Version)
	}
	if r.version == 0 {
		return nil, r.corrupt(8, ErrCorrupt, "format version 0")
	}
	flags := le.Uint16(h[10:])
	if flags&^hdrShiftMask != 0 || flags&hdrShiftMask > maxTimeShift {
		return nil, r.corrupt(10, ErrCorrupt, "unknown header flags %#x", flags)
	}
	shift := uint8(flags & hdrShiftMask)
	mlen := le.Uint32(h[12:])
	if mlen > maxMeta {
		return nil, r.corrupt(12, ErrCorrupt, "header of %d bytes exceeds the limit %d", mlen, maxMeta)
	}
	rest, err := readN(rd, nil, int(mlen)+4)
	r.off += int64(len(rest))
	if err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, r.corrupt(0, ErrTruncated, "file header cut short after %d bytes", r.off)
		}
		return nil, fmt.Errorf("tracefile: %s: read header: %w", r.name(), err)
	}
	crc := crc32.Update(crc32.Checksum(h[:], castagnoli), castagnoli, rest[:mlen])
	if crc != le.Uint32(rest[mlen:]) {
		return nil, r.corrupt(0, ErrChecksum, "file header checksum mismatch")
	}
	if err := json.Unmarshal(rest[:mlen], &r.meta); err != nil {
		return nil, r.corrupt(fileHeaderSize, ErrCorrupt, "header: %v", err)
	}
	r.zdec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxChunk),
		zstd.WithDecoderMaxWindow(MaxChunk), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("tracefile: %s: %w", r.name(), err)
	}
	r.unpack.zdec = r.zdec
	r.dec = newDecoder()
	r.dec.shift = shift
	r.dec.version = r.version
	return r, nil
}

// readN reads exactly n bytes into buf[:0], growing buf as the bytes come
// rather than trusting n up front.
func readN(r io.Reader, buf []byte, n int) ([]byte, error) {
	buf = buf[:0]
	for len(buf) < n {
		step := min(n-len(buf), max(len(buf), 1<<16))
		if cap(buf)-len(buf) < step {
			nb := make([]byte, len(buf), len(buf)+step)
			copy(nb, buf)
			buf = nb
		}
		k, err := io.ReadFull(r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// Meta returns the run's description from the header.
func (r *Reader) Meta() Meta { return r.meta }

// Version returns the format version of the file.
func (r *Reader) Version() int { return r.version }

// TimeShift returns the writer's Options.TimeShift: the low TimeShift bits
// of every Event.Time were dropped. 0: times are exact.
func (r *Reader) TimeShift() uint { return uint(r.dec.shift) }

// Next returns the next batch of events, appended to buf[:0] (at most
// cap(buf) of them, or 4096 if cap(buf) is small), and io.EOF after the
// last one of a complete trace. The events' slices and pointers (Frames,
// Module, Process...) are fresh for each batch: the caller may keep them.
//
// If the file ends early or a chunk is bad, Next first returns every event
// of the good chunks, then a *CorruptError, which wraps ErrTruncated when
// the file simply stops (the normal case after a crash: the trailer that
// Close writes is missing). A chunk whose checksum fails yields no events;
// one that passes its checksum but does not decode (a crafted file or a
// writer bug) yields the events before the bad one. Once Next has returned
// an error it returns the same error.
func (r *Reader) Next(buf []event.Event) ([]event.Event, error) {
	out := buf[:0]
	if r.err != nil {
		return out, r.err
	}
	limit := cap(buf)
	if limit < 64 {
		limit = 4096
	}
	for len(out) < limit {
		if !r.inChunk {
			if err := r.loadChunk(); err != nil {
				r.err = err
				break
			}
			continue
		}
		before := len(out)
		out = r.dec.next(out, limit)
		r.events += int64(len(out) - before)
		if err := r.dec.err(); err != nil {
			r.err = r.corrupt(r.chunkOff, ErrCorrupt, "%v", err)
			break
		}
		if r.dec.done() {
			r.inChunk = false
			if err := r.dec.finish(); err != nil {
				r.err = r.corrupt(r.chunkOff, ErrCorrupt, "%v", err)
				break
			}
			if r.dec.n != int(r.count) {
				r.err = r.corrupt(r.chunkOff, ErrCorrupt, "chunk of %d events holds %d", r.count, r.dec.n)
				break
			}
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return out, r.err
}

// loadChunk reads, checks and decompresses the next chunk, or returns
// io.EOF after the trailer.
func (r *Reader) loadChunk() error {
	start := r.off
	var hb [chunkHeaderSize]byte
	n, err := io.ReadFull(r.r, hb[:])
	r.off += int64(n)
	switch {
	case n == 0 && err == io.EOF:
		return r.corrupt(start, ErrTruncated, "the trace stops after %d events without the end marker", r.events)
	case err == io.ErrUnexpectedEOF:
		return r.corrupt(start, ErrTruncated, "chunk header cut short after %d bytes", n)
	case err != nil:
		return fmt.Errorf("tracefile: %s: read at byte %d: %w", r.name(), start, err)
	}
	var h chunkHeader
	if reason, err := h.parse(hb[:]); err != nil {
		return r.corrupt(start, err, "%s", reason)
	}
	if h.magic == endMagic {
		total := int64(uint64(h.rawLen) | uint64(h.count)<<32)
		if total != r.events {
			return r.corrupt(start, ErrCorrupt, "end marker counts %d events, the chunks hold %d", total, r.events)
		}
		var b [1]byte
		if n, _ := io.ReadFull(r.r, b[:]); n != 0 {
			return r.corrupt(r.off, ErrCorrupt, "data after the end marker")
		}
		return io.EOF
	}
	r.comp, err = readN(r.r, r.comp, int(h.compLen))
	r.off += int64(len(r.comp))
	if err != nil {
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return r.corrupt(start, ErrTruncated, "chunk of %d bytes cut short after %d", h.compLen, len(r.comp))
		}
		return fmt.Errorf("tracefile: %s: read at byte %d: %w", r.name(), r.off, err)
	}
	if crc32.Checksum(r.comp, castagnoli) != h.crc {
		return r.corrupt(start, ErrChecksum, "chunk data checksum mismatch")
	}
	raw, err := r.decompress(h.rawLen)
	if err != nil {
		return r.corrupt(start, ErrCorrupt, "%v", err)
	}
	if err := r.dec.reset(raw); err != nil {
		return r.corrupt(start, ErrCorrupt, "%v", err)
	}
	r.inChunk, r.chunkOff, r.count = true, start, h.count
	return nil
}

// decompress decodes the chunk data in r.comp to its payload of rawLen
// bytes: sections since format version 9, one zstd frame before.
func (r *Reader) decompress(rawLen uint32) ([]byte, error) {
	if cap(r.raw) < int(rawLen) {
		r.raw = make([]byte, 0, rawLen)
	}
	if r.version >= 9 {
		return r.unpack.unpack(r.raw[:0:rawLen], r.comp, int(rawLen))
	}
	var zh zstd.Header
	if err := zh.Decode(r.comp); err != nil || zh.HasFCS && zh.FrameContentSize != uint64(rawLen) {
		return nil, fmt.Errorf("chunk data is not a zstd frame of %d bytes", rawLen)
	}
	raw, err := r.zdec.DecodeAll(r.comp, r.raw[:0:rawLen])
	if err != nil {
		return nil, fmt.Errorf("decompress: %v", err)
	}
	if len(raw) != int(rawLen) {
		return nil, fmt.Errorf("chunk decompresses to %d bytes, want %d", len(raw), rawLen)
	}
	return raw, nil
}

// Offset is how many bytes of the file the reader has read so far (for
// showing progress).
func (r *Reader) Offset() int64 { return r.off }

// Close releases the reader and closes the file if Open opened it.
func (r *Reader) Close() error {
	if r.zdec != nil {
		r.zdec.Close()
		r.zdec = nil
	}
	if r.err == nil {
		r.err = errors.New("tracefile: reader is closed")
	}
	if r.f != nil {
		f := r.f
		r.f = nil
		if err := f.Close(); err != nil {
			return fmt.Errorf("tracefile: %w", err)
		}
	}
	return nil
}
