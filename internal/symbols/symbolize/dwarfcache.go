package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// The DWARF cache keeps the inflated DWARF sections of debug files whose
// sections are compressed (Debian's libc6-dbg among them), one file per
// build id, so that the next process maps them instead of inflating them
// again: libc's ~26 MB took ~120 ms to inflate on the 2-core test machine,
// and every report needs libc's frames (__libc_start_call_main is in every
// main thread's stack).
//
// A cache file is
//
//	magic "LPDWARF\x00", version u32, sections u32 (len(dwarfSections)),
//	source file size u64, source mtime (ns) i64, crc32c of the data u32,
//	build id length u32, build id, then per section its length u64
//	(dwarfAbsent: none), then the sections back to back.
//
// all little-endian. It is used only if every field matches the debug file
// as it is now (size, mtime, build id, each section's uncompressed size)
// and the checksum holds; anything else is a miss, and the sections are
// inflated (and the file written) again.
const (
	dwarfCacheMagic   = "LPDWARF\x00"
	dwarfCacheVersion = 1
	dwarfAbsent       = ^uint64(0)
)

// dwarfKey is what a cache file must match: the debug file's identity and
// the sizes of its sections once inflated (dwarfAbsent for a missing one).
type dwarfKey struct {
	size  int64
	mtime int64
	id    []byte
	lens  []uint64
}

// total is the size of the sections.
func (k dwarfKey) total() uint64 {
	var n uint64
	for _, l := range k.lens {
		if l != dwarfAbsent {
			n += l
		}
	}
	return n
}

// cacheKey returns f's key, or false if f is not worth caching (no build
// id, or no compressed section: those are read straight from the file).
func cacheKey(f *elfFile, secs []*elf.Section) (dwarfKey, bool) {
	st, err := f.osFile.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return dwarfKey{}, false
	}
	k := dwarfKey{size: st.Size(), mtime: st.ModTime().UnixNano(), id: buildID(f.File), lens: make([]uint64, len(secs))}
	if len(k.id) == 0 {
		return dwarfKey{}, false
	}
	compressed := false
	for i, s := range secs {
		switch {
		case s == nil:
			k.lens[i] = dwarfAbsent
		case s.Flags&elf.SHF_COMPRESSED == 0:
			k.lens[i] = s.FileSize
		default:
			var chdr [24]byte
			n, _ := f.osFile.ReadAt(chdr[:min(uint64(len(chdr)), s.FileSize)], int64(s.Offset))
			_, size, _, err := parseChdr(f.Class, f.ByteOrder, chdr[:n])
			if err != nil {
				return dwarfKey{}, false
			}
			k.lens[i] = size
			compressed = true
		}
	}
	return k, compressed
}

// dwarfCachePath is the cache file of build id id in dir.
func dwarfCachePath(dir string, id []byte) string {
	return filepath.Join(dir, hex.EncodeToString(id)+".dwarf")
}

// appendDWARFCacheHeader appends the header of a cache file of k whose
// data has checksum sum.
func appendDWARFCacheHeader(b []byte, k dwarfKey, sum uint32) []byte {
	le := binary.LittleEndian
	b = append(b, dwarfCacheMagic...)
	b = le.AppendUint32(b, dwarfCacheVersion)
	b = le.AppendUint32(b, uint32(len(k.lens)))
	b = le.AppendUint64(b, uint64(k.size))
	b = le.AppendUint64(b, uint64(k.mtime))
	b = le.AppendUint32(b, sum)
	b = le.AppendUint32(b, uint32(len(k.id)))
	b = append(b, k.id...)
	for _, n := range k.lens {
		b = le.AppendUint64(b, n)
	}
	return b
}

// parseDWARFCache checks that file b is a cache file of k and returns its
// sections (nil for absent ones), which alias b.
func parseDWARFCache(b []byte, k dwarfKey) ([][]byte, error) {
	le := binary.LittleEndian
	const fixed = 8 + 4 + 4 + 8 + 8 + 4 + 4
	if len(b) < fixed || string(b[:8]) != dwarfCacheMagic {
		return nil, errors.New("not a DWARF cache file")
	}
	if v := le.Uint32(b[8:]); v != dwarfCacheVersion {
		return nil, fmt.Errorf("version %d, not %d", v, dwarfCacheVersion)
	}
	if n := le.Uint32(b[12:]); int(n) != len(k.lens) {
		return nil, fmt.Errorf("%d sections, not %d", n, len(k.lens))
	}
	if int64(le.Uint64(b[16:])) != k.size || int64(le.Uint64(b[24:])) != k.mtime {
		return nil, errors.New("made from another version of the debug file")
	}
	sum := le.Uint32(b[32:])
	idLen := uint64(le.Uint32(b[36:]))
	off := uint64(fixed)
	if idLen > uint64(len(b))-off || !bytes.Equal(b[off:off+idLen], k.id) {
		return nil, errors.New("another build id")
	}
	off += idLen
	if uint64(len(k.lens))*8 > uint64(len(b))-off {
		return nil, errors.New("truncated header")
	}
	var total uint64
	for i, want := range k.lens {
		n := le.Uint64(b[off+uint64(i)*8:])
		if n != want {
			return nil, fmt.Errorf("section %s: %d bytes, not %d", dwarfSections[i], n, want)
		}
		if n != dwarfAbsent {
			total += n
		}
	}
	off += uint64(len(k.lens)) * 8
	if total != uint64(len(b))-off {
		return nil, fmt.Errorf("%d bytes of data, not %d", uint64(len(b))-off, total)
	}
	data := b[off:]
	if crc32.Checksum(data, symcache.Castagnoli) != sum {
		return nil, errors.New("checksum mismatch")
	}
	out := make([][]byte, len(k.lens))
	at := uint64(0)
	for i, n := range k.lens {
		if n == dwarfAbsent {
			continue
		}
		out[i] = data[at : at+n : at+n]
		at += n
	}
	return out, nil
}

// dwarfCacheMaps keeps each cache file mapped once per process: the
// sections of a loaded module alias the mapping, which is never unmapped.
var dwarfCacheMaps = struct {
	sync.Mutex
	m map[string][][]byte
}{m: map[string][][]byte{}}

// readDWARFCache returns the cached sections of k from dir, or nil.
func readDWARFCache(dir string, k dwarfKey) [][]byte {
	path := dwarfCachePath(dir, k.id)
	memo := fmt.Sprintf("%s|%d|%d", path, k.size, k.mtime)
	dwarfCacheMaps.Lock()
	defer dwarfCacheMaps.Unlock()
	if secs, ok := dwarfCacheMaps.m[memo]; ok {
		return secs
	}
	f, err := OpenCacheFile(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() <= 0 || st.Size() > int64(len(k.lens))*maxDWARFSection {
		return nil
	}
	// Private and writable: debug/dwarf only reads, but a write would
	// copy a page, not fault.
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	secs, err := parseDWARFCache(b, k)
	if err != nil {
		unix.Munmap(b)
		return nil
	}
	dwarfCacheMaps.m[memo] = secs
	symcache.Touch(f) // recently used: kept when the cache is trimmed
	return secs
}

// writeDWARFCache writes secs as the cache file of k in dir, atomically,
// then trims the directory to symcache.MaxBytes. The cache only saves
// time: failures are ignored.
func writeDWARFCache(dir string, k dwarfKey, secs [][]byte) {
	h := crc32.New(symcache.Castagnoli)
	for _, s := range secs {
		h.Write(s)
	}
	err := symcache.Write(dwarfCachePath(dir, k.id), func(w io.Writer) error {
		if _, err := w.Write(appendDWARFCacheHeader(nil, k, h.Sum32())); err != nil {
			return err
		}
		for _, s := range secs {
			if _, err := w.Write(s); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		symcache.Trim(dir, symcache.MaxBytes)
	}
}
