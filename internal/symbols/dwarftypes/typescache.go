package dwarftypes

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/symbols/symbolize"
	"github.com/leakpath/leakpath/internal/symbols/symcache"
)

// The types cache keeps, beside the DWARF and frame caches, what reading
// a module's DWARF types found (its type entries, complete structs by
// name, globals and allocation sites: the walk over every entry that
// takes glibc's debug file a quarter to one second), one file per module
// build id, under the frame cache's key (this leakpath binary, the module
// file, every place its debug file could be). The next process maps the
// file and decodes only the type entries its typing asks for (a few
// hundred of glibc's 244,000), through a sorted index.
//
// A file is typesCacheMagic, the crc32c (Castagnoli) of the rest (u32),
// the key (a string), the complete structs (uvarint count, then name and
// offset each), the globals (name, address, type offset), the allocation
// sites (pc, type offset), the count of type entries N (u32), N index
// entries (DWARF offset u32, ascending; position of its record from the
// records' start u32), then the records: tag, name, size+1, type, flags
// (1 has a type, 2 a declaration, 4 an array's subrange seen), count+1,
// file, line, members (count, then name, offset+1, type each), template
// arguments (count, then type each). A string is a uvarint length and
// its bytes, numbers uvarints but where u32 is said (little-endian);
// signed values are stored plus one (-1 is "none").
const typesCacheMagic = "LPTYPES2"

// maxCachedNodes bounds the type entries a types cache file may hold.
const maxCachedNodes = 1 << 24

var errBadTypesCache = errors.New("not a types cache file")

// lazyNodes is the type entries of a types cache file.
type lazyNodes struct {
	index   []byte // 8 bytes an entry
	records []byte
}

// find returns the record of the entry at off, or nil.
func (l *lazyNodes) find(off dwarf.Offset) []byte {
	le := binary.LittleEndian
	n := len(l.index) / 8
	k := sort.Search(n, func(k int) bool { return dwarf.Offset(le.Uint32(l.index[8*k:])) >= off })
	if k == n || dwarf.Offset(le.Uint32(l.index[8*k:])) != off {
		return nil
	}
	return l.records[le.Uint32(l.index[8*k+4:]):]
}

// node returns the type entry at off: read from DWARF, or decoded from
// the types cache file on first use; nil if there is none.
func (mt *Module) node(off dwarf.Offset) *dnode {
	if n, ok := mt.nodes[off]; ok || mt.lazy == nil {
		return n
	}
	var n *dnode
	if rec := mt.lazy.find(off); rec != nil {
		d := symcache.Decoder{B: rec}
		n = decodeNode(&d)
		if d.Err != nil {
			n = nil // a bad record: no entry
		}
	}
	mt.nodes[off] = n
	return n
}

// encodeTypes returns the types cache file of mt (read from DWARF,
// finished) under key.
func encodeTypes(mt *Module, key string) []byte {
	if l := mt.lazy; l != nil {
		for i := 0; i < len(l.index)/8; i++ {
			mt.node(dwarf.Offset(binary.LittleEndian.Uint32(l.index[8*i:])))
		}
	}
	var b []byte
	uv := func(v uint64) { b = binary.AppendUvarint(b, v) }
	str := func(s string) {
		uv(uint64(len(s)))
		b = append(b, s...)
	}
	str(key)
	names := make([]string, 0, len(mt.byName))
	for name := range mt.byName {
		names = append(names, name)
	}
	sort.Strings(names)
	uv(uint64(len(names)))
	for _, name := range names {
		str(name)
		uv(uint64(mt.byName[name]))
	}
	uv(uint64(len(mt.Globals)))
	for i, g := range mt.Globals {
		str(g.Name)
		uv(g.Addr)
		uv(uint64(mt.globalOffs[i]))
	}
	uv(uint64(len(mt.alloc)))
	for _, a := range mt.alloc {
		uv(a.pc)
		uv(uint64(a.off))
	}
	offs := make([]dwarf.Offset, 0, len(mt.nodes))
	for off, n := range mt.nodes {
		if n != nil && uint64(off) <= math.MaxUint32 {
			offs = append(offs, off)
		}
	}
	slices.Sort(offs)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(offs)))
	index := len(b)
	b = append(b, make([]byte, 8*len(offs))...)
	var rec []byte
	for i, off := range offs {
		binary.LittleEndian.PutUint32(b[index+8*i:], uint32(off))
		binary.LittleEndian.PutUint32(b[index+8*i+4:], uint32(len(rec)))
		rec = appendNode(rec, mt.nodes[off])
	}
	b = append(b, rec...)
	out := append([]byte(typesCacheMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(b, symcache.Castagnoli))...)
	return append(out, b...)
}

// appendNode appends the record of type entry n.
func appendNode(b []byte, n *dnode) []byte {
	uv := func(v uint64) { b = binary.AppendUvarint(b, v) }
	str := func(s string) {
		uv(uint64(len(s)))
		b = append(b, s...)
	}
	signed := func(v int64) { uv(uint64(max(v, -1) + 1)) }
	uv(uint64(n.tag))
	str(n.name)
	signed(n.size)
	uv(uint64(n.typ))
	flags := uint64(0)
	if n.hasTyp {
		flags |= 1
	}
	if n.decl {
		flags |= 2
	}
	if n.members != nil {
		flags |= 4
	}
	uv(flags)
	signed(n.count)
	str(n.file)
	uv(uint64(max(n.line, 0)))
	uv(uint64(len(n.members)))
	for _, m := range n.members {
		str(m.name)
		signed(m.off)
		uv(uint64(m.typ))
	}
	uv(uint64(len(n.tparams)))
	for _, t := range n.tparams {
		uv(uint64(t))
	}
	return b
}

// offsetOf reads a DWARF offset of a types cache file.
func offsetOf(d *symcache.Decoder) dwarf.Offset {
	v := d.Uvarint()
	if v > math.MaxUint32 {
		d.Fail()
		return 0
	}
	return dwarf.Offset(v)
}

func signedOf(d *symcache.Decoder) int64 {
	v := d.Uvarint()
	if v > math.MaxInt64 {
		d.Fail()
		return 0
	}
	return int64(v) - 1
}

// decodeNode decodes a type entry's record.
func decodeNode(d *symcache.Decoder) *dnode {
	n := &dnode{tag: dwarf.Tag(d.Uvarint()), name: d.Str(), size: signedOf(d), typ: offsetOf(d)}
	flags := d.Uvarint()
	n.hasTyp, n.decl = flags&1 != 0, flags&2 != 0
	n.count, n.file, n.line = signedOf(d), d.Str(), d.Int()
	if k := d.Count(3); k > 0 || flags&4 != 0 {
		n.members = make([]dmember, k)
		for j := range n.members {
			n.members[j] = dmember{name: d.Str(), off: signedOf(d), typ: offsetOf(d)}
		}
	}
	if k := d.Count(1); k > 0 {
		n.tparams = make([]dwarf.Offset, k)
		for j := range n.tparams {
			n.tparams[j] = offsetOf(d)
		}
	}
	return n
}

// decodeTypes fills mt (with its vtables only) from types cache file b of
// key; the type entries stay in b, decoded on use.
func decodeTypes(mt *Module, b []byte, key string) error {
	le := binary.LittleEndian
	if len(b) < len(typesCacheMagic)+4 || string(b[:len(typesCacheMagic)]) != typesCacheMagic {
		return errBadTypesCache
	}
	sum, rest := le.Uint32(b[len(typesCacheMagic):]), b[len(typesCacheMagic)+4:]
	if crc32.Checksum(rest, symcache.Castagnoli) != sum {
		return errBadTypesCache
	}
	d := symcache.Decoder{B: rest}
	if d.Str() != key || d.Err != nil {
		return errBadTypesCache
	}
	n := d.Count(2)
	mt.byName = make(map[string]dwarf.Offset, n)
	for i := uint64(0); i < n && d.Err == nil; i++ {
		name := d.Str()
		mt.byName[name] = offsetOf(&d)
	}
	n = d.Count(3)
	for i := uint64(0); i < n && d.Err == nil; i++ {
		mt.Globals = append(mt.Globals, Global{Name: d.Str(), Addr: d.Uvarint()})
		mt.globalOffs = append(mt.globalOffs, offsetOf(&d))
	}
	n = d.Count(2)
	for i := uint64(0); i < n && d.Err == nil; i++ {
		mt.alloc = append(mt.alloc, allocSite{pc: d.Uvarint(), off: offsetOf(&d)})
	}
	if d.Err != nil || len(d.B) < 4 {
		return errBadTypesCache
	}
	nodes := uint64(le.Uint32(d.B))
	d.B = d.B[4:]
	if nodes > maxCachedNodes || nodes*8 > uint64(len(d.B)) {
		return errBadTypesCache
	}
	l := &lazyNodes{index: d.B[:8*nodes], records: d.B[8*nodes:]}
	for i := uint64(0); i < nodes; i++ {
		off, pos := le.Uint32(l.index[8*i:]), le.Uint32(l.index[8*i+4:])
		if (i > 0 && off <= le.Uint32(l.index[8*(i-1):])) || uint64(pos) >= uint64(len(l.records)) {
			return errBadTypesCache
		}
	}
	mt.lazy = l
	mt.nodes = map[dwarf.Offset]*dnode{}
	mt.byOff = map[dwarf.Offset]ID{}
	mt.finish()
	return nil
}

// typesCacheMaps keeps each types cache file mapped once per process:
// the type entries of the modules read from it alias the mapping, which
// is never unmapped.
var typesCacheMaps = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

// mapTypesCache returns the bytes of the file at path, mapped.
func mapTypesCache(path string) []byte {
	f, err := symbolize.OpenCacheFile(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() <= 0 || st.Size() > maxTypesCacheFile {
		return nil
	}
	memo := fmt.Sprintf("%s|%d|%d", path, st.Size(), st.ModTime().UnixNano())
	typesCacheMaps.Lock()
	defer typesCacheMaps.Unlock()
	if b, ok := typesCacheMaps.m[memo]; ok {
		return b
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	typesCacheMaps.m[memo] = b
	symcache.Touch(f) // recently used: kept when the cache is trimmed
	return b
}

// maxTypesCacheFile bounds a types cache file.
const maxTypesCacheFile = 1 << 30

// readTypesCache fills mt from the types cache file at path of key;
// false when there is none that matches (mt is then as it was).
func readTypesCache(mt *Module, path, key string) (ok bool) {
	defer func() {
		// A file that decodes into nonsense is a miss, like one that
		// does not decode.
		if recover() != nil {
			ok = false
		}
	}()
	b := mapTypesCache(path)
	if b == nil {
		return false
	}
	c := &Module{Vtables: mt.Vtables}
	if decodeTypes(c, b, key) != nil {
		return false
	}
	*mt = *c
	return true
}

// writeTypesCache writes mt's types cache file; failures are ignored
// (the cache only saves time).
func writeTypesCache(mt *Module, path, key string) {
	b := encodeTypes(mt, key)
	if symcache.Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}) == nil {
		symcache.Trim(filepath.Dir(path), symcache.MaxBytes)
	}
}
