package tracefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Version is the trace format version this package writes. Readers accept
// versions 1 to Version and reject newer ones with an error that wraps
// ErrNewerVersion.
const Version = 11

// Magic is the first 8 bytes of every trace file.
const Magic = "LEAKPATH"

// Sizes and limits of the format. A reader treats a value beyond a limit
// as corruption, so the allocation a corrupt length can cause is bounded.
const (
	fileHeaderSize  = 16 // magic, version, flags, meta length
	maxTimeShift    = 32
	hdrShiftMask    = 0x3f    // header flags: the time shift
	chunkHeaderSize = 24      // chunk magic, lengths, count, two checksums
	maxMeta         = 1 << 20 // bytes of Meta JSON
	// MaxFrames is the most frames a stack (Event.Frames) may have.
	MaxFrames = 1024
	// MaxString is the longest string or byte slice (Text, Module.Path,
	// Module.BuildID, ProcessInfo.Exe, one argument) an event may carry.
	MaxString = 1 << 20
	// MaxSegments is the most segments a Module may have.
	MaxSegments = 4096
	// MaxArgs is the most arguments a ProcessInfo may have; together they
	// may not exceed MaxString*4 bytes.
	MaxArgs = 1 << 16
	// MaxScanBlocks is the most blocks one Scan event may carry (the
	// collector splits bigger scans).
	MaxScanBlocks = 1 << 20
	// MaxRootCauseItems is the most functions, and branches, a RootCause
	// event may carry.
	MaxRootCauseItems = 1024
	// MaxStaleWords is the most bitset words a StaleEpoch event may
	// carry (pages of the slot pool / 64).
	MaxStaleWords = 1 << 14
	// MaxChunk is the largest chunk, compressed or not.
	MaxChunk = 64 << 20
	// DefaultChunkSize is the uncompressed size at which Write closes a
	// chunk.
	DefaultChunkSize = 1 << 20
	// maxChunkSize is the largest ChunkSize option accepted; with the
	// largest single event it keeps chunks below MaxChunk.
	maxChunkSize = 16 << 20
)

var (
	chunkMagic = [4]byte{'L', 'P', 'C', 'K'} // a chunk of events
	endMagic   = [4]byte{'L', 'P', 'N', 'D'} // the trailer Close writes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Meta describes the recorded run. It is stored as JSON in the file
// header; unknown fields in a file are ignored.
type Meta struct {
	Command []string  `json:"command"`
	Created time.Time `json:"created"`
	Tool    string    `json:"tool"` // e.g. "leakpath 0.1"
	Host    string    `json:"host,omitempty"`
	// Rank is the MPI rank of the recorded program, as its environment
	// said (OMPI_COMM_WORLD_RANK, PMI_RANK...); nil: not one of an MPI
	// job's ranks, or a trace written before ranks were recorded.
	Rank *int `json:"rank,omitempty"`
}

// Errors that a *CorruptError or an Open error may wrap; test for them with
// errors.Is.
var (
	// ErrTruncated: the file stops in the middle of the header or of a
	// chunk, or without the trailer Close writes: the recorder was killed
	// or the file was cut. Every whole chunk before that point was read.
	ErrTruncated = errors.New("trace ends early (the recording was interrupted)")
	// ErrNotTrace: the file is empty or does not start with Magic.
	ErrNotTrace = errors.New("not a leakpath trace")
	// ErrNewerVersion: the file was written by a newer format version.
	ErrNewerVersion = errors.New("trace format is newer than this leakpath")
	// ErrChecksum: a header or chunk does not match its CRC32-C.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrCorrupt: the bytes are not a valid trace (other than the cases
	// above).
	ErrCorrupt = errors.New("corrupt trace")
)

// CorruptError says where and why a trace cannot be read further. Offset
// is the byte offset in the file of the header or chunk at fault (for an
// event that does not decode: of its chunk). Err is ErrTruncated,
// ErrChecksum or ErrCorrupt.
type CorruptError struct {
	Path   string // the file; "" for a NewReader
	Offset int64
	Reason string
	Err    error
}

func (e *CorruptError) Error() string {
	what := "corrupt"
	if e.Err == ErrTruncated {
		what = "truncated"
	}
	p := e.Path
	if p == "" {
		p = "trace"
	}
	return fmt.Sprintf("tracefile: %s: %s at byte %d: %s", p, what, e.Offset, e.Reason)
}

// Unwrap returns Err.
func (e *CorruptError) Unwrap() error { return e.Err }

// appendFileHeader appends the file header for meta JSON m and time
// shift shift.
func appendFileHeader(b []byte, m []byte, shift uint8) []byte {
	start := len(b)
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint16(b, Version)
	b = binary.LittleEndian.AppendUint16(b, uint16(shift)) // flags: the time shift
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
	b = append(b, m...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// chunkHeader is the fixed header before each chunk's zstd frame.
type chunkHeader struct {
	magic   [4]byte
	compLen uint32 // bytes of the zstd frame that follows
	rawLen  uint32 // bytes of the payload it decompresses to
	count   uint32 // events in the chunk
	crc     uint32 // CRC32-C of the compressed bytes
}

func (h *chunkHeader) put(b []byte) {
	_ = b[chunkHeaderSize-1]
	copy(b, h.magic[:])
	le := binary.LittleEndian
	le.PutUint32(b[4:], h.compLen)
	le.PutUint32(b[8:], h.rawLen)
	le.PutUint32(b[12:], h.count)
	le.PutUint32(b[16:], h.crc)
	le.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
}

// parse reads a chunk header, reporting a reason when its checksum or
// magic is wrong.
func (h *chunkHeader) parse(b []byte) (reason string, err error) {
	le := binary.LittleEndian
	if crc32.Checksum(b[:20], castagnoli) != le.Uint32(b[20:]) {
		if [4]byte(b[:4]) != chunkMagic && [4]byte(b[:4]) != endMagic {
			return fmt.Sprintf("no chunk header (found % x)", b[:4]), ErrCorrupt
		}
		return "chunk header checksum mismatch", ErrChecksum
	}
	h.magic = [4]byte(b[:4])
	h.compLen = le.Uint32(b[4:])
	h.rawLen = le.Uint32(b[8:])
	h.count = le.Uint32(b[12:])
	h.crc = le.Uint32(b[16:])
	switch h.magic {
	case chunkMagic:
		if h.compLen > MaxChunk || h.rawLen > MaxChunk {
			return fmt.Sprintf("chunk of %d bytes (%d uncompressed) exceeds the limit %d", h.compLen, h.rawLen, MaxChunk), ErrCorrupt
		}
		if h.count > h.rawLen {
			return fmt.Sprintf("chunk of %d events in %d bytes", h.count, h.rawLen), ErrCorrupt
		}
	case endMagic:
		if h.compLen != 0 {
			return "trailer with data", ErrCorrupt
		}
	default:
		return fmt.Sprintf("unknown chunk type %q", h.magic[:]), ErrCorrupt
	}
	return "", nil
}
