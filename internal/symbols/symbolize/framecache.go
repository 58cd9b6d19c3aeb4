package symbolize

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// The frame cache keeps, beside the DWARF cache (Options.DWARFCache), the
// frames of the addresses a process looked up, one file per module build
// id, for the next process: a report needs few addresses of libc (its
// start-up frames, in every stack), and with them cached libc's DWARF is
// not loaded at all (30-70 ms even from the DWARF cache: debug/dwarf parses
// every unit's abbreviations). A file is used only if its key, everything
// a lookup's result depends on, matches: this leakpath binary, the module
// file, and every place a debug file for it could be (present or not, with
// size and time); anything else is a miss, and the file is written again.

// frameCacheMagic starts a frame cache file; change it when the encoding
// changes. After it: the key and the warning (strings), a uvarint count of
// addresses, then per address (ascending): uvarint address, uvarint count
// of frames, and per frame Function and File (strings), uvarint Line and
// Column, a byte Inlined (0 or 1). A string is a uvarint length and its
// bytes. (Version 1 was encoding/gob's, whose package initialisation cost
// every run ~0.7 ms.)
const frameCacheMagic = "LPFRAMES2"

// frameCacheMax bounds the addresses kept per module.
const frameCacheMax = 100000

// frameFile is the frame cache of one module in this process.
type frameFile struct {
	path    string // of the cache file
	key     string
	frames  map[uint64][]Frame
	warning string // the module's, given again when its frames come from here
	warned  bool
	dirty   bool
}

// frameCacheFile is the encoding of a frame cache file (after the magic).
type frameCacheFile struct {
	Key     string
	Frames  map[uint64][]Frame
	Warning string
}

// self identifies this leakpath binary: a rebuilt one may symbolize
// differently.
var self = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	st, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %d %d", exe, st.Size(), st.ModTime().UnixNano())
})

// statKey describes the file at p for a key: its size and time, or that
// there is none.
func statKey(p string) string {
	st, err := os.Stat(p)
	if err != nil {
		return p + " -"
	}
	return fmt.Sprintf("%s %d %d", p, st.Size(), st.ModTime().UnixNano())
}

// frameKey returns the build id under which the frames of module path
// (loaded with build id want, or its own if want is empty) are cached, and
// the key they must match; nil if they are not cached (no build id, no
// readable file, no identity of this binary).
func (s *Symbolizer) frameKey(path string, want []byte) ([]byte, string) {
	me := self()
	if me == "" {
		return nil, ""
	}
	f, err := openELF(path)
	if err != nil {
		return nil, ""
	}
	defer f.Close()
	own := buildID(f.File)
	id := want
	if len(id) == 0 {
		id = own
	}
	if len(id) < 2 {
		return nil, ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\nown %x\n", me, statKey(path), own)
	for _, dir := range s.opts.DebugDirs {
		fmt.Fprintf(&b, "%s\n", statKey(buildIDPath(dir, id)))
		if len(own) >= 2 && !bytes.Equal(own, id) {
			fmt.Fprintf(&b, "%s\n", statKey(buildIDPath(dir, own)))
		}
	}
	if name, crc, ok := debugLink(f.File); ok {
		fmt.Fprintf(&b, "link %s %08x\n", name, crc)
		for _, c := range s.debugLinkCandidates(path, name) {
			fmt.Fprintf(&b, "%s\n", statKey(c))
		}
	}
	return id, b.String()
}

// frameFileOf returns the frame cache of module k, reading it on first use;
// nil when the module's frames are not cached.
func (s *Symbolizer) frameFileOf(k moduleKey) *frameFile {
	if ff, ok := s.frameFiles[k]; ok {
		return ff
	}
	var ff *frameFile
	if id, key := s.frameKey(k.path, []byte(k.buildID)); key != "" {
		ff = &frameFile{path: filepath.Join(s.opts.DWARFCache, hex.EncodeToString(id)+".frames"), key: key}
		if c := readFrameCache(ff.path, key); c != nil {
			ff.frames, ff.warning = c.Frames, c.Warning
		}
		if ff.frames == nil {
			ff.frames = map[uint64][]Frame{}
		}
	}
	s.frameFiles[k] = ff
	return ff
}

// readFrameCache returns the frame cache file at path if it is one of
// key, else nil.
func readFrameCache(path, key string) *frameCacheFile {
	f, err := OpenCacheFile(path)
	if err != nil {
		return nil
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil
	}
	if c, err := decodeFrameCache(b); err == nil && c.Key == key {
		return c
	}
	return nil
}

// errBadFrameCache: a frame cache file that does not decode.
var errBadFrameCache = errors.New("not a frame cache file")

// decodeFrameCache decodes a frame cache file.
func decodeFrameCache(b []byte) (*frameCacheFile, error) {
	rest, ok := bytes.CutPrefix(b, []byte(frameCacheMagic))
	if !ok {
		return nil, errBadFrameCache
	}
	d := symcache.Decoder{B: rest}
	c := &frameCacheFile{Key: d.Str(), Warning: d.Str()}
	n := d.Count(2) // an address and its count of frames: 2 bytes at least
	c.Frames = make(map[uint64][]Frame, n)
	for i := uint64(0); i < n && d.Err == nil; i++ {
		addr := d.Uvarint()
		var fr []Frame
		if k := d.Count(5); k > 0 {
			fr = make([]Frame, k)
			for j := range fr {
				fr[j] = Frame{Function: d.Str(), File: d.Str(), Line: d.Int(), Column: d.Int(), Inlined: d.Flag()}
			}
		}
		c.Frames[addr] = fr
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = errBadFrameCache
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return c, nil
}

// encodeFrameCache writes c as a frame cache file to w.
func encodeFrameCache(w io.Writer, c *frameCacheFile) error {
	b := []byte(frameCacheMagic)
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(c.Key)
	str(c.Warning)
	b = binary.AppendUvarint(b, uint64(len(c.Frames)))
	for _, addr := range slices.Sorted(maps.Keys(c.Frames)) {
		fr := c.Frames[addr]
		b = binary.AppendUvarint(b, addr)
		b = binary.AppendUvarint(b, uint64(len(fr)))
		for _, f := range fr {
			str(f.Function)
			str(f.File)
			b = binary.AppendUvarint(b, uint64(max(f.Line, 0)))
			b = binary.AppendUvarint(b, uint64(max(f.Column, 0)))
			inl := byte(0)
			if f.Inlined {
				inl = 1
			}
			b = append(b, inl)
		}
	}
	_, err := w.Write(b)
	return err
}

// saveFrames writes the frame caches that gained addresses, with what
// other processes added meanwhile. Failures are ignored: the cache only
// saves time.
func (s *Symbolizer) saveFrames() {
	for _, ff := range s.frameFiles {
		if ff == nil || !ff.dirty {
			continue
		}
		ff.dirty = false
		frames := maps.Clone(ff.frames)
		if c := readFrameCache(ff.path, ff.key); c != nil {
			for a, fr := range c.Frames {
				if _, ok := frames[a]; !ok && len(frames) < frameCacheMax {
					frames[a] = fr
				}
			}
		}
		symcache.Write(ff.path, func(w io.Writer) error {
			return encodeFrameCache(w, &frameCacheFile{Key: ff.key, Frames: frames, Warning: ff.warning})
		})
	}
}

// cachedFrames returns addr's frames in module k from the frame cache.
func (s *Symbolizer) cachedFrames(k moduleKey, addr uint64) ([]Frame, bool) {
	ff := s.frameFileOf(k)
	if ff == nil {
		return nil, false
	}
	fr, ok := ff.frames[addr]
	if ok && ff.warning != "" && !ff.warned {
		// As the module's load would have.
		ff.warned = true
		if s.opts.Warn != nil {
			s.opts.Warn(ff.warning)
		}
	}
	return slices.Clone(fr), ok
}

// keepFrames adds addr's frames in module k, which warned about warning
// (if not ""), to its frame cache.
func (s *Symbolizer) keepFrames(k moduleKey, addr uint64, fr []Frame, warning string) {
	ff := s.frameFileOf(k)
	if ff == nil || len(ff.frames) >= frameCacheMax {
		return
	}
	ff.frames[addr] = slices.Clone(fr)
	if warning != "" {
		ff.warning, ff.warned = warning, true
	}
	ff.dirty = true
}
