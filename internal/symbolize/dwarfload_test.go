package symbolize

import (
	"debug/elf"
	"testing"
)

// libcDebugFile returns the path of the system libc's build-id debug file,
// or skips.
func libcDebugFile(t testing.TB) string {
	t.Helper()
	f, err := elf.Open(libcWithDebug(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return buildIDPath("/usr/lib/debug", buildID(f))
}

// BenchmarkLoadDWARF loads the DWARF of libc's debug file with
// (*elf.File).DWARF ("stdlib") and with loadDWARF ("fast").
func BenchmarkLoadDWARF(b *testing.B) {
	path := libcDebugFile(b)
	for _, fast := range []bool{false, true} {
		name := "stdlib"
		if fast {
			name = "fast"
		}
		b.Run(name, func(b *testing.B) {
			defer func(old bool) { fastDWARFLoad = old }(fastDWARFLoad)
			fastDWARFLoad = fast
			f, err := openELF(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := loadDWARF(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
