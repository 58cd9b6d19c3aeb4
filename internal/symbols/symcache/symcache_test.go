package symcache

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestTrim: the least recently used files (DWARF, frame and types
// caches) go first, down to the limit; temporary files go when older
// than an hour; other files stay.
func TestTrim(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	files := []struct {
		name string
		size int
		age  time.Duration
	}{
		{"a.dwarf", 100, 3 * time.Hour},
		{"b.dwarf", 100, 1 * time.Hour},
		{"c.dwarf", 100, 2 * time.Hour},
		{"d.dwarf", 100, 0},
		{"e.frames", 100, 4 * time.Hour}, // frame caches count too
		{".tmp-1.dwarf", 10, 2 * time.Hour},
		{".tmp-2.dwarf", 10, time.Minute},
		{"other", 1000, 5 * time.Hour},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, make([]byte, f.size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	Trim(dir, 250)
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{".tmp-2.dwarf", "b.dwarf", "d.dwarf", "other"}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

// TestDecoder: values decode in order; the first that does not (a
// truncated string) sets ErrCorrupt, and what follows reads as zero.
func TestDecoder(t *testing.T) {
	b := binary.AppendUvarint(nil, 300)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = append(b, 1)
	d := Decoder{B: b}
	if v, s, f := d.Uvarint(), d.Str(), d.Flag(); v != 300 || s != "abc" || !f || d.Err != nil || len(d.B) != 0 {
		t.Errorf("got %d %q %v, err %v, %d bytes left", v, s, f, d.Err, len(d.B))
	}
	d = Decoder{B: []byte{5, 'a', 'b', 7}}
	if s := d.Str(); s != "" || d.Err != ErrCorrupt {
		t.Errorf("a string longer than the input: %q, err %v", s, d.Err)
	}
	if v := d.Uvarint(); v != 0 {
		t.Errorf("after the error: %d, want 0", v)
	}
	d = Decoder{B: []byte{2}}
	if d.Flag() || d.Err != ErrCorrupt {
		t.Errorf("flag 2: err %v, want ErrCorrupt", d.Err)
	}
	d = Decoder{B: binary.AppendUvarint(nil, 1<<40)}
	if d.Int() != 0 || d.Err != ErrCorrupt {
		t.Errorf("an int past int32: err %v, want ErrCorrupt", d.Err)
	}
}
