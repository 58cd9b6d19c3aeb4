package tracefile

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Since format version 9 a chunk's data is not one zstd frame of the
// whole payload but a run of sections, each coded its own way, whose
// decoded bytes back to back are the payload:
//
//	section = u8 method | uvarint n (decoded bytes) | uvarint c (coded bytes; not for packStored, packRun) | c bytes
//
// The writer codes the payload's head (flags and stream lengths) stored
// and each stream with the method that suits it: most streams are close to
// order-0 entropy (op bytes, size bytes, addresses of random frees), which
// a Huffman code gets as well as zstd at a fraction of its cost; a few
// (times, stack ids) repeat in runs, which s2 or zstd find.
const (
	packStored = iota // the bytes as they are (c = n, not written)
	packZstd          // a zstd frame
	packHuff          // a huff0 4X stream with its table; n ≤ huffMax
	packS2            // an s2 block
	packRun           // one byte, n times (the byte is the data; c not written)
	numPack
)

var packNames = [numPack]string{"stored", "zstd", "huff0", "s2", "run"}

// huffMax is the largest section huff0 codes: its block limit. A longer
// stream is cut into sections of this size.
const huffMax = huff0.BlockSizeMax

// packer codes the streams of chunks (the Writer's compressing goroutine).
type packer struct {
	zenc   *zstd.Encoder
	huff   huff0.Scratch
	tmp    []byte           // sections coded to be measured (probe)
	coded  []byte           // what zstd or s2 coded
	method [numStreams]byte // per stream, the method the last probe chose
	chunks int              // chunks coded
	// zstdOnly codes every stream with zstd (CompressDefault and
	// CompressBetter: size before speed).
	zstdOnly bool
}

// zstdGain is how much smaller than what the cheap methods code (the
// Huffman code included where it is not worth its time) zstd's output
// must be for the packer to spend zstd's time on a stream: it costs
// several times as much per byte. huffGain is how much smaller than the
// stream a Huffman code must be to be worth decoding; bigGain, for a
// stream of more than a byte an event, to be worth its time too (about a
// ns a byte: on the addresses of random frees, two bytes an event, it
// saved 15 % for a tenth of all the trace's CPU).
const (
	zstdGain = 0.85
	huffGain = 0.97
	bigGain  = 0.8
)

// probe chooses, for each stream of a chunk, the method that codes it best
// for its cost and sets p.method. It measures the methods on the last
// probeSample bytes of each stream: trying them all on whole streams cost
// a tenth of all the coding of a run of a dozen chunks.
func (p *packer) probe(s *[numStreams][]byte) {
	for i := range s {
		if len(s[i]) == 0 {
			continue
		}
		b := s[i][max(0, len(s[i])-probeSample):]
		best, bestLen := byte(packStored), len(b)
		huff := p.codedLen(b, packHuff)
		gain := huffGain
		if len(s[i]) > len(s[sOps]) { // (an op byte an event)
			gain = bigGain
		}
		if float64(huff) < gain*float64(bestLen) {
			best, bestLen = packHuff, huff
		}
		if n := p.codedLen(b, packS2); n < bestLen {
			best, bestLen = packS2, n
		}
		// zstd's entropy coding of matches may win by far where neither
		// cheap method does well alone, so it is always measured.
		if n := p.codedLen(b, packZstd); float64(n) < zstdGain*float64(min(bestLen, huff)) {
			best = packZstd
		}
		p.method[i] = best
	}
}

// packProbeEvery is how often (in chunks) the packer chooses its methods
// again; probeSample is how much of each stream it measures them on.
const (
	packProbeEvery = 32
	probeSample    = 16 << 10
)

// codedLen is how many bytes method m codes b into.
func (p *packer) codedLen(b []byte, m byte) int {
	n := len(p.tmp)
	p.tmp = p.appendSections(p.tmp, b, m)
	c := len(p.tmp) - n
	p.tmp = p.tmp[:n]
	return c
}

// appendSections appends b, coded as sections of method m (or stored where
// m does not pay), to out.
func (p *packer) appendSections(out, b []byte, m byte) []byte {
	if m == packHuff {
		for len(b) > huffMax {
			out = p.appendSection(out, b[:huffMax], m)
			b = b[huffMax:]
		}
	}
	return p.appendSection(out, b, m)
}

// appendSection appends one section holding b, coded with method m if it
// makes it smaller, else stored (or as a run).
func (p *packer) appendSection(out, b []byte, m byte) []byte {
	if len(b) == 0 {
		return out
	}
	var coded []byte
	switch m {
	case packZstd:
		p.coded = p.zenc.EncodeAll(b, p.coded[:0])
		coded = p.coded
	case packS2:
		p.coded = s2.Encode(p.coded[:cap(p.coded)], b)
		coded = p.coded
	case packHuff:
		// Each section carries its own table: sections decode alone.
		p.huff.Reuse = huff0.ReusePolicyNone
		c, _, err := huff0.Compress4X(b, &p.huff)
		switch {
		case errors.Is(err, huff0.ErrUseRLE):
			out = append(out, packRun)
			out = binary.AppendUvarint(out, uint64(len(b)))
			return append(out, b[0])
		case err == nil:
			coded = c
		}
	}
	if coded == nil || len(coded) >= len(b) {
		out = append(out, packStored)
		out = binary.AppendUvarint(out, uint64(len(b)))
		return append(out, b...)
	}
	out = append(out, m)
	out = binary.AppendUvarint(out, uint64(len(b)))
	out = binary.AppendUvarint(out, uint64(len(coded)))
	return append(out, coded...)
}

// appendChunk appends the chunk data of a payload whose head (flags and
// stream lengths) is head and whose streams are s, and returns it with the
// payload's length.
func (p *packer) appendChunk(out, head []byte, s *[numStreams][]byte) ([]byte, int) {
	if p.zstdOnly {
		p.method = [numStreams]byte{}
		for i := range p.method {
			p.method[i] = packZstd
		}
	}
	out = p.appendSection(out, head, packStored)
	n := len(head)
	for i := range s {
		out = p.appendSections(out, s[i], p.method[i])
		n += len(s[i])
	}
	return out, n
}

// unpacker decodes the sections of a chunk (version 9).
type unpacker struct {
	zdec *zstd.Decoder
	huff *huff0.Scratch
}

// unpack decodes chunk data b into raw[:0], which must have room for its
// rawLen bytes, and returns the payload.
func (u *unpacker) unpack(raw, b []byte, rawLen int) ([]byte, error) {
	raw = raw[:0]
	for len(b) > 0 {
		m := b[0]
		n, k := binary.Uvarint(b[1:])
		if k <= 0 {
			return nil, errors.New("bad section length")
		}
		b = b[1+k:]
		if n > uint64(rawLen-len(raw)) {
			return nil, fmt.Errorf("sections hold more than the chunk's %d bytes", rawLen)
		}
		var c uint64
		switch m {
		case packStored:
			c = n
		case packRun:
			c = 1
		case packZstd, packHuff, packS2:
			c, k = binary.Uvarint(b)
			if k <= 0 {
				return nil, errors.New("bad section length")
			}
			b = b[k:]
		default:
			return nil, fmt.Errorf("unknown section method %d", m)
		}
		if c > uint64(len(b)) {
			return nil, fmt.Errorf("%s section of %d bytes past the chunk's end", packNames[m], c)
		}
		data := b[:c]
		b = b[c:]
		// (The decoders must not write past the section: cap is its end.)
		dst := raw[len(raw) : len(raw)+int(n) : len(raw)+int(n)]
		switch m {
		case packStored:
			copy(dst, data)
		case packRun:
			for i := range dst {
				dst[i] = data[0]
			}
		case packZstd:
			got, err := u.zdec.DecodeAll(data, dst[:0])
			if err != nil {
				return nil, fmt.Errorf("zstd section: %w", err)
			}
			if len(got) != int(n) || n > 0 && &got[0] != &dst[0] {
				return nil, fmt.Errorf("zstd section decodes to %d bytes, want %d", len(got), n)
			}
		case packS2:
			if l, err := s2.DecodedLen(data); err != nil || l != int(n) {
				return nil, fmt.Errorf("s2 section does not decode to %d bytes", n)
			}
			got, err := s2.Decode(dst, data)
			if err != nil {
				return nil, fmt.Errorf("s2 section: %w", err)
			}
			if n > 0 && &got[0] != &dst[0] {
				copy(dst, got)
			}
		case packHuff:
			if n > huffMax {
				return nil, fmt.Errorf("huff0 section of %d bytes", n)
			}
			s, rest, err := huff0.ReadTable(data, u.huff)
			if err != nil {
				return nil, fmt.Errorf("huff0 section: %w", err)
			}
			u.huff = s
			got, err := s.Decoder().Decompress4X(dst[:0], rest)
			if err != nil {
				return nil, fmt.Errorf("huff0 section: %w", err)
			}
			if len(got) != int(n) || n > 0 && &got[0] != &dst[0] {
				return nil, fmt.Errorf("huff0 section decodes to %d bytes, want %d", len(got), n)
			}
		}
		raw = raw[:len(raw)+int(n)]
	}
	if len(raw) != rawLen {
		return nil, fmt.Errorf("sections hold %d bytes, the chunk %d", len(raw), rawLen)
	}
	return raw, nil
}
