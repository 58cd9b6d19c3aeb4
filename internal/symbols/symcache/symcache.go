// Package symcache is the symbol cache directory's plumbing, shared by
// its writers (internal/symbols/symbolize's DWARF and frame caches,
// internal/symbols/dwarftypes' types cache): a private directory, files
// written whole through a rename, trimming to a bound, and a decoder of
// the uvarint encoding their files use.
//
// What a file holds and when it is valid (its key) is its writer's
// business; everything read back is untrusted.
package symcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// MaxBytes bounds the cache directory: past it, the least recently used
// files go.
const MaxBytes = 1 << 30

// Castagnoli is the crc32c table the cache files' checksums use.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Exts are the name extensions of the cache's files, the ones Trim
// counts and removes.
var Exts = []string{".dwarf", ".frames", ".types"}

// PrivateDir makes the cache directory dir (mode 0700) if missing and
// checks that it is a directory of ours, not a symbolic link, in which
// nobody else may create, remove or rename a file. leakpath often runs as
// root: a cache another user could plant files in would have it print
// their names for the program's frames, or open what they link to.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to leakpath's uid %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %#o: others may write in it", dir, st.Mode&0o7777)
	}
	return nil
}

// Write writes path (a file of the cache directory, made if missing)
// with write, through a temporary file renamed over it: readers see the
// old file or the new one whole, and a file they map is never truncated
// under them.
func Write(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*"+filepath.Ext(path))
	if err != nil {
		return err
	}
	err = write(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// Touch marks the open cache file f as used now, so that Trim keeps it:
// through its descriptor, never a name another could have relinked.
func Touch(f *os.File) {
	now := unix.NsecToTimeval(time.Now().UnixNano())
	unix.Futimes(int(f.Fd()), []unix.Timeval{now, now})
}

// Trim removes the least recently used cache files of dir (those named
// with one of Exts, and temporary files a killed writer left over an
// hour ago) until the rest take at most max bytes.
func Trim(dir string, max int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type file struct {
		path string
		size int64
		used time.Time
	}
	var files []file
	var total int64
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if !slices.Contains(Exts, filepath.Ext(p)) {
			continue
		}
		if e.Name()[0] == '.' {
			if time.Since(info.ModTime()) > time.Hour {
				os.Remove(p)
			}
			continue
		}
		files = append(files, file{p, info.Size(), info.ModTime()})
		total += info.Size()
	}
	slices.SortFunc(files, func(a, b file) int { return a.used.Compare(b.used) })
	for _, f := range files {
		if total <= max {
			break
		}
		if os.Remove(f.path) == nil {
			total -= f.size
		}
	}
}

// ErrCorrupt is the error of a Decoder that met a value that does not
// decode.
var ErrCorrupt = errors.New("cache file does not decode")

// Decoder reads the values of a cache file: uvarints, and strings as a
// uvarint length and their bytes. The first value that does not decode
// sets Err to ErrCorrupt, and the rest read as zero.
type Decoder struct {
	B   []byte // what is left to read
	Err error
}

// Uvarint reads a uvarint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.B)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.B = d.B[n:]
	return v
}

// Count reads a count of items of at least min bytes each: no more than
// the bytes left could hold.
func (d *Decoder) Count(min int) uint64 {
	n := d.Uvarint()
	if n > uint64(len(d.B)/min) {
		d.Fail()
		return 0
	}
	return n
}

// Int reads a uvarint that must fit an int32.
func (d *Decoder) Int() int {
	v := d.Uvarint()
	if v > math.MaxInt32 {
		d.Fail()
		return 0
	}
	return int(v)
}

// Str reads a string (not String: a Decoder is no fmt.Stringer).
func (d *Decoder) Str() string {
	n := d.Count(1)
	s := string(d.B[:n])
	d.B = d.B[n:]
	return s
}

// Flag reads a byte that must be 0 or 1.
func (d *Decoder) Flag() bool {
	if len(d.B) == 0 || d.B[0] > 1 {
		d.Fail()
		return false
	}
	v := d.B[0] == 1
	d.B = d.B[1:]
	return v
}

// Fail marks the input as not decoding: Err is set, nothing is left.
func (d *Decoder) Fail() {
	if d.Err == nil {
		d.Err = ErrCorrupt
	}
	d.B = nil
}
