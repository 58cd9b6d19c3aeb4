package symbolize

import (
	"bufio"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	// Its inflater is about 40 % faster than compress/zlib's on libc's
	// .debug_info (BenchmarkLoadDWARF).
	"github.com/klauspost/compress/zlib"

	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// fastDWARFLoad selects loadDWARF's own section reader; tests turn it off to
// compare with (*elf.File).DWARF.
var fastDWARFLoad = true

// dwarfSections are the sections debug/dwarf reads (dwarf.New and
// AddSection); (*elf.File).DWARF also inflates every other .debug_*
// section (loclists, aranges, frame, ...), which nothing here uses.
var dwarfSections = []string{
	".debug_abbrev", ".debug_info", ".debug_str", ".debug_line", ".debug_ranges",
	".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists",
}

// maxDWARFSection bounds the uncompressed size of one section, so that a
// corrupt ch_size cannot make us allocate without limit.
const maxDWARFSection = 4 << 30

// maxZlibRatio is the largest expansion deflate allows (258 bytes from
// 2 bits, rounded up); a larger claimed size is corrupt.
const maxZlibRatio = 1032

// loadDWARF returns f's DWARF, the same data as (*elf.File).DWARF, and
// its .debug_addr section (nil if none). It reads only the sections
// debug/dwarf uses, each with one read if uncompressed, inflating zlib ones
// from the file straight into a buffer of their exact size, all in
// parallel: (*elf.File).DWARF inflates every .debug_* section through
// growing buffers, one after the other. What it does not handle
// (relocations, GNU .zdebug_* sections, .debug_types) goes to
// (*elf.File).DWARF.
func loadDWARF(f *elfFile, cache string) (*dwarf.Data, []byte, error) {
	secs, ok := fastDWARFSections(f.File)
	if !ok || !fastDWARFLoad {
		d, err := f.DWARF()
		if err != nil {
			return nil, nil, err
		}
		return d, debugAddr(f.File), nil
	}
	var key dwarfKey
	keep := false
	if cache != "" {
		if key, keep = cacheKey(f, secs); keep {
			if data := readDWARFCache(cache, key); data != nil {
				return dwarfFromSections(data)
			}
		}
	}
	size := int64(-1)
	if st, err := f.osFile.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	data := make([][]byte, len(dwarfSections))
	errs := make([]error, len(dwarfSections))
	var wg sync.WaitGroup
	for i, s := range secs {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer guard(&errs[i], s.Name)
			data[i], errs[i] = readDWARFSection(f, s, size)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	d, addr, err := dwarfFromSections(data)
	if err == nil && keep && key.total() <= symcache.MaxBytes/2 {
		writeDWARFCache(cache, key, data)
	}
	return d, addr, err
}

// dwarfFromSections makes the DWARF of the sections named in
// dwarfSections, and returns it with its .debug_addr section.
func dwarfFromSections(data [][]byte) (*dwarf.Data, []byte, error) {
	d, err := dwarf.New(data[0], nil, nil, data[1], data[3], nil, data[4], data[2])
	if err != nil {
		return nil, nil, err
	}
	for i := 5; i < len(dwarfSections); i++ {
		if err := d.AddSection(dwarfSections[i], data[i]); err != nil {
			return nil, nil, err
		}
	}
	return d, data[5], nil
}

// fastDWARFSections returns f's sections named in dwarfSections (nil for
// those absent), or false if loadDWARF must leave f to (*elf.File).DWARF.
func fastDWARFSections(f *elf.File) ([]*elf.Section, bool) {
	if f.Type == elf.ET_REL {
		return nil, false
	}
	secs := make([]*elf.Section, len(dwarfSections))
	debug := map[int]bool{}
	for i, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".zdebug_") || s.Name == ".debug_types" {
			return nil, false
		}
		j := slices.Index(dwarfSections, s.Name)
		if j < 0 {
			continue
		}
		if secs[j] != nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC != 0 {
			// Duplicates, placeholders and loaded debug sections are odd
			// enough to leave to the standard library's rules.
			return nil, false
		}
		secs[j] = s
		debug[i] = true
	}
	if f.Type != elf.ET_EXEC {
		// (*elf.File).DWARF applies relocations aimed at debug sections
		// of anything but executables.
		for _, s := range f.Sections {
			if (s.Type == elf.SHT_REL || s.Type == elf.SHT_RELA) && debug[int(s.Info)] {
				return nil, false
			}
		}
	}
	return secs, true
}

// readDWARFSection returns the contents of s, inflated if compressed.
// fileSize is the size of f's file, or -1 if unknown.
func readDWARFSection(f *elfFile, s *elf.Section, fileSize int64) ([]byte, error) {
	if s.FileSize > math.MaxInt64-s.Offset || (fileSize >= 0 && s.Offset+s.FileSize > uint64(fileSize)) {
		return nil, fmt.Errorf("section %s: bytes %d+%d past the end of the file (%d bytes)", s.Name, s.Offset, s.FileSize, fileSize)
	}
	if s.FileSize > maxDWARFSection {
		return nil, fmt.Errorf("section %s: %d bytes, more than the limit of %d", s.Name, s.FileSize, maxDWARFSection)
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		b := make([]byte, s.FileSize)
		if _, err := f.osFile.ReadAt(b, int64(s.Offset)); err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		return b, nil
	}
	var chdr [24]byte
	n, _ := f.osFile.ReadAt(chdr[:min(uint64(len(chdr)), s.FileSize)], int64(s.Offset))
	typ, size, hdr, err := parseChdr(f.Class, f.ByteOrder, chdr[:n])
	if err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	switch typ {
	case elf.COMPRESS_ZLIB:
		zlen := int64(s.FileSize) - int64(hdr)
		z := bufio.NewReaderSize(io.NewSectionReader(f.osFile, int64(s.Offset)+int64(hdr), zlen), zlibReadBuf)
		b, err := inflateExact(z, zlen, size)
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		return b, nil
	case elf.COMPRESS_ZSTD:
		if size > maxDWARFSection {
			return nil, fmt.Errorf("section %s: uncompressed size %d is more than the limit of %d", s.Name, size, maxDWARFSection)
		}
		// Rare in practice: the standard library's reader will do.
		b, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("section %s: unknown compression type %d", s.Name, typ)
	}
}

// parseChdr decodes the compression header at the start of a
// SHF_COMPRESSED section and returns the type, the uncompressed size and
// the header's length.
func parseChdr(class elf.Class, bo binary.ByteOrder, b []byte) (elf.CompressionType, uint64, int, error) {
	switch class {
	case elf.ELFCLASS32:
		// Elf32_Chdr: ch_type, ch_size, ch_addralign, 4 bytes each.
		if len(b) < 12 {
			return 0, 0, 0, errors.New("compression header truncated")
		}
		return elf.CompressionType(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), 12, nil
	case elf.ELFCLASS64:
		// Elf64_Chdr: ch_type, ch_reserved (4 bytes each), ch_size,
		// ch_addralign (8 bytes each).
		if len(b) < 24 {
			return 0, 0, 0, errors.New("compression header truncated")
		}
		return elf.CompressionType(bo.Uint32(b)), bo.Uint64(b[8:]), 24, nil
	default:
		return 0, 0, 0, fmt.Errorf("unknown ELF class %v", class)
	}
}

// zlibReadBuf is the buffer between the file and the inflater: a few reads
// per megabyte, and no copy of the whole compressed section.
const zlibReadBuf = 64 << 10

// inflateExact inflates the zlib stream z of zlen bytes, which must
// decode to exactly size bytes.
func inflateExact(z io.Reader, zlen int64, size uint64) ([]byte, error) {
	if size > maxDWARFSection || size > uint64(zlen)*maxZlibRatio {
		return nil, fmt.Errorf("uncompressed size %d is impossible for %d compressed bytes (limit %d)", size, zlen, maxDWARFSection)
	}
	zr, err := zlib.NewReader(z)
	if err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(zr, out); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("zlib stream shorter than the %d bytes of the header", size)
		}
		return nil, fmt.Errorf("zlib: %w", err)
	}
	// Reading on checks that the stream ends here and its checksum.
	var one [1]byte
	switch _, err := io.ReadAtLeast(zr, one[:], 1); err {
	case nil:
		return nil, fmt.Errorf("zlib stream longer than the %d bytes of the header", size)
	case io.EOF:
	default:
		return nil, fmt.Errorf("zlib: %w", err)
	}
	return out, nil
}
