package symbolize

import (
	"debug/elf"
	"os"
	"testing"
	"time"
)

const systemLibc = "/lib/x86_64-linux-gnu/libc.so.6"

// libcWithDebug returns the path of the system libc if its separate debug
// file (libc6-dbg) is installed, else skips.
func libcWithDebug(t testing.TB) string {
	t.Helper()
	f, err := elf.Open(systemLibc)
	if err != nil {
		t.Skipf("no system libc at %s: %v", systemLibc, err)
	}
	id := buildID(f)
	f.Close()
	if id == nil {
		t.Skipf("%s has no build id", systemLibc)
	}
	if _, err := os.Stat(buildIDPath("/usr/lib/debug", id)); err != nil {
		t.Skipf("no debug file for %s (install libc6-dbg): %v", systemLibc, err)
	}
	return systemLibc
}

// textRange returns the address range of .text in path.
func textRange(t testing.TB, path string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".text")
	if sec == nil {
		t.Fatalf("%s has no .text", path)
	}
	return sec.Addr, sec.Addr + sec.Size
}

// TestSystemLibc compares Lookup with addr2line on call sites and
// instructions sampled across the system libc, symbolized through its
// build-id debug file.
func TestSystemLibc(t *testing.T) {
	path := libcWithDebug(t)
	ins := disassemble(t, path)
	calls := callSites(ins)
	var addrs []uint64
	// About 3,000 call sites and 1,000 other instructions, spread evenly.
	for i := 0; i < len(calls); i += max(1, len(calls)/3000) {
		addrs = append(addrs, calls[i])
	}
	for i := 0; i < len(ins); i += max(1, len(ins)/1000) {
		addrs = append(addrs, ins[i].addr)
	}
	var w warnings
	s := New(Options{Warn: w.warn})
	defer s.Close()
	c := compareWithAddr2line(t, s, path, path, addrs)
	t.Logf("%s: %v; warnings: %q", path, c, w.msgs)
	for i, m := range c.mismatches {
		if i == 20 && os.Getenv("SYMBOLIZE_ALL_MISMATCHES") == "" {
			t.Logf("... %d more", len(c.mismatches)-20)
			break
		}
		t.Logf("mismatch %s", m)
	}
	if len(w.msgs) > 0 {
		t.Errorf("unexpected warnings: %q", w.msgs)
	}
	if c.colAgree < c.colTotal*99/100 {
		t.Errorf("columns agree with llvm-symbolizer at only %d of %d addresses", c.colAgree, c.colTotal)
	}
	if c.rateEither() < 0.99 {
		t.Errorf("agreement with addr2line or llvm-symbolizer %.2f%% < 99%%", 100*c.rateEither())
	}
}

// TestMillionLookups times symbolizing one million distinct addresses of the
// system libc (every byte of the first 1M of .text) with a fresh
// Symbolizer, including loading and indexing the debug information.
func TestMillionLookups(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	path := libcWithDebug(t)
	lo, hi := textRange(t, path)
	n := uint64(1_000_000)
	if hi-lo < n {
		n = hi - lo
	}
	s := New(Options{})
	defer s.Close()
	start := time.Now()
	found, frames := 0, 0
	for a := lo; a < lo+n; a++ {
		fr, err := s.Lookup(path, nil, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(fr) > 0 && fr[0].Function != "" {
			found++
		}
		frames += len(fr)
	}
	el := time.Since(start)
	t.Logf("%d distinct lookups in %s: %v total, %v per lookup; %d with a function name, %d frames",
		n, path, el, el/time.Duration(n), found, frames)
	// Repeat lookups are served from the cache.
	start = time.Now()
	for a := lo; a < lo+n; a++ {
		s.Lookup(path, nil, a)
	}
	t.Logf("the same %d lookups again (cached): %v", n, time.Since(start))
	if found < int(n)*9/10 {
		t.Errorf("only %d of %d addresses in .text have a function name", found, n)
	}
}

// BenchmarkLookup measures lookups over 100,000 distinct libc addresses
// with warm caches.
func BenchmarkLookup(b *testing.B) {
	path := libcWithDebug(b)
	lo, hi := textRange(b, path)
	const n = 100_000
	stride := max(1, (hi-lo)/n)
	s := New(Options{})
	defer s.Close()
	for a := lo; a < hi; a += stride {
		s.Lookup(path, nil, a)
	}
	b.ResetTimer()
	a := lo
	for i := 0; i < b.N; i++ {
		if _, err := s.Lookup(path, nil, a); err != nil {
			b.Fatal(err)
		}
		if a += stride; a >= hi {
			a = lo
		}
	}
}

// BenchmarkLookupCold measures loading libc's debug information and
// symbolizing 10,000 spread addresses with a fresh Symbolizer.
func BenchmarkLookupCold(b *testing.B) {
	path := libcWithDebug(b)
	lo, hi := textRange(b, path)
	stride := max(1, (hi-lo)/10_000)
	for i := 0; i < b.N; i++ {
		s := New(Options{})
		for a := lo; a < hi; a += stride {
			if _, err := s.Lookup(path, nil, a); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
	}
}
