package tracefile

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func testPacker(t testing.TB) (*packer, *unpacker) {
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	zdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { zenc.Close(); zdec.Close() })
	return &packer{zenc: zenc}, &unpacker{zdec: zdec}
}

// packStreams are streams of every shape the methods meet: empty, one
// byte repeated, random bytes, skewed bytes, repeating runs, and one
// longer than a Huffman section.
func packStreams() [numStreams][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	var s [numStreams][]byte
	s[1] = bytes.Repeat([]byte{7}, 5000)
	for range 3000 {
		s[2] = append(s[2], byte(r.Uint32()))
		s[3] = append(s[3], byte(r.ExpFloat64()*3))
	}
	s[4] = bytes.Repeat([]byte("leakpath"), 700)
	s[5] = []byte{1}
	for range huffMax + 5000 {
		s[6] = append(s[6], byte(r.NormFloat64()*4))
	}
	s[8] = []byte{3, 1, 4, 1, 5}
	return s
}

// TestPackRoundTrip: every method, on every stream, decodes to the bytes
// it coded, and the probe picks a method that shrinks what can shrink.
func TestPackRoundTrip(t *testing.T) {
	p, u := testPacker(t)
	s := packStreams()
	var want []byte
	want = appendPayload(want, &s, nil, 0, 0)
	head := appendHead(nil, &s, 0)
	for m := range byte(numPack) {
		for i := range p.method {
			p.method[i] = m
		}
		data, n := p.appendChunk(nil, head, &s)
		if n != len(want) {
			t.Fatalf("%s: payload of %d bytes, want %d", packNames[m], n, len(want))
		}
		got, err := u.unpack(make([]byte, 0, n), data, n)
		if err != nil {
			t.Fatalf("%s: %v", packNames[m], err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the payload does not read back", packNames[m])
		}
	}
	p.probe(&s)
	data, n := p.appendChunk(nil, head, &s)
	if len(data)*2 > n {
		t.Errorf("probed methods %v coded %d bytes in %d", p.method, n, len(data))
	}
	if p.method[2] != packStored {
		t.Errorf("random bytes coded with %s, want stored", packNames[p.method[2]])
	}
	if got, err := u.unpack(make([]byte, 0, n), data, n); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("probed methods: %v", err)
	}
}

// TestProbeNearBest: for every stream, the method the probe picks codes
// it within a quarter of the smallest any method gives. Among them two
// that a Huffman code or s2 shrink some and zstd's matches with its
// entropy coding far more (16 two- or three-byte words in skewed random
// order, as a C++ program's sizes and stacks come): they went to the
// cheap method, and C++ traces grew by a third.
func TestProbeNearBest(t *testing.T) {
	p, _ := testPacker(t)
	s := packStreams()
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range [][2]int{{0, 2}, {7, 3}} { // stream, word length
		i, wl := c[0], c[1]
		words := make([][]byte, 16)
		for w := range words {
			for range wl {
				words[w] = append(words[w], byte(r.NormFloat64()*20))
			}
		}
		for range 20000 / wl {
			s[i] = append(s[i], words[int(r.ExpFloat64()*4)%len(words)]...)
		}
	}
	p.probe(&s)
	for i, b := range s {
		if len(b) < 64 {
			continue // a few bytes: any method will do
		}
		best := len(b)
		for m := range byte(numPack) {
			if m != packRun {
				best = min(best, p.codedLen(b, m))
			}
		}
		if got := p.codedLen(b, p.method[i]); 4*got > 5*best {
			t.Errorf("stream %d: %s codes it in %d bytes, the best method in %d", i, packNames[p.method[i]], got, best)
		}
	}
}

// TestUnpackRefuses: sections that do not add up to the chunk's length,
// or name an unknown method, are errors.
func TestUnpackRefuses(t *testing.T) {
	p, u := testPacker(t)
	s := packStreams()
	head := appendHead(nil, &s, 0)
	p.method = [numStreams]byte{packHuff, packHuff, packHuff, packS2, packZstd, packRun, packHuff, packS2, packZstd}
	data, n := p.appendChunk(nil, head, &s)
	raw := make([]byte, 0, n+10)
	for _, c := range []struct {
		name string
		data []byte
		n    int
	}{
		{"longer", data, n + 10},
		{"shorter", data, n - 1},
		{"cut", data[:len(data)-3], n},
		{"method", append([]byte{numPack, 1, 0}, data...), n + 1},
	} {
		if _, err := u.unpack(raw, c.data, c.n); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func FuzzUnpack(f *testing.F) {
	p, u := testPacker(f)
	s := packStreams()
	head := appendHead(nil, &s, 0)
	for m := range byte(numPack) {
		for i := range p.method {
			p.method[i] = m
		}
		data, n := p.appendChunk(nil, head, &s)
		f.Add(data, n)
	}
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		if n < 0 || n > 1<<20 {
			return
		}
		raw := make([]byte, 0, n)
		got, err := u.unpack(raw, data, n)
		if err == nil && len(got) != n {
			t.Fatalf("unpacked %d bytes, want %d", len(got), n)
		}
	})
}
