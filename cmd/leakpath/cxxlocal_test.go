package main

import (
	"debug/elf"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestCxxPluginLocal: a C program (no C++ runtime in its global scope)
// dlopens C++ plugins RTLD_LOCAL, their runtime (libstdc++; libc++ and
// libc++abi where clang++-19 builds with them) coming as the plugin's own
// dependency. The plugins' operator new and delete and
// __cxa_allocate_exception bind to the agent's, which find no definition
// after their own in the global scope: they use the plugin's runtime.
// Before, the first operator new aborted the program. The program
// behaves as without leakpath (output, exit code, no error left for its
// dlerror), with a bad_alloc thrown and caught too; its leaks are its
// arithmetic's and memcheck's, and no free reads as an invalid one.
func TestCxxPluginLocal(t *testing.T) {
	const rounds, leaks = 10, 3
	bin := fixture(t, "cxxlocal.c", "-ldl")
	if libs := imported(t, bin); strings.Contains(libs, "c++") {
		t.Fatalf("the program imports %s: the C++ runtime would be in its global scope", libs)
	}
	cases := []struct {
		name     string
		runtimes []string // each plugin's: libstdc++ or libc++
	}{
		{"libstdc++", []string{"libstdc++"}},
		{"libc++", []string{"libc++"}},
		// Two runtimes at once, each call to its own caller's. In this
		// order only: natively, libstdc++'s unwinder loaded after LLVM's
		// libunwind binds some of its calls to libunwind and crashes.
		{"libstdc++-then-libc++", []string{"libstdc++", "libc++"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var plugins []string
			for _, rt := range c.runtimes {
				if rt == "libc++" {
					plugins = append(plugins, clangLibcxx(t, "cxxlocal_plugin.cc", "-shared", "-fPIC"))
				} else {
					plugins = append(plugins, fixture(t, "cxxlocal_plugin.cc", "-shared", "-fPIC"))
				}
			}
			for _, huge := range []string{"0", "1"} {
				args := append([]string{bin, fmt.Sprint(rounds), fmt.Sprint(leaks), huge}, plugins...)
				plain := native(t, nil, args...)
				var want strings.Builder
				for pass := 0; pass < 2; pass++ {
					for i := range plugins {
						sum := 725 // the plugin's arithmetic for 10 rounds
						if huge == "1" {
							sum += 1000
						}
						fmt.Fprintf(&want, "plugin %d pass %d: %d, dlerror none\n", i+1, pass, sum)
					}
				}
				if plain.code != 0 || string(plain.stdout) != want.String() {
					t.Fatalf("natively (HUGE %s) exit %d, output\n%s\nwant\n%s", huge, plain.code, plain.stdout, want.String())
				}
				r := leakpath(t, nil, nil, args...)
				sameBehaviour(t, r, plain)
				img := r.image(t, "cxxlocal")
				for _, e := range img.Errors {
					t.Errorf("HUGE %s: improper use %s at %v", huge, e.Kind, e.Stack)
				}
				// Per plugin, 10 rounds of two passes: an object, an int[],
				// a nothrow int[4] and an aligned object at least.
				n := uint64(len(plugins))
				if got := img.Totals.Calls["new"] + img.Totals.Calls["new_array"]; got < n*2*rounds*4 {
					t.Errorf("HUGE %s: %d operator new calls recorded, want %d or more: %v", huge, got, n*2*rounds*4, img.Totals.Calls)
				}
				kinds := map[string][2]uint64{}
				for _, l := range img.Leaks {
					s := kinds[l.Kind]
					kinds[l.Kind] = [2]uint64{s[0] + l.Bytes, s[1] + l.Blocks}
					if l.Kind == "definite" && !stackHas(l.Stack, "leak_one(int)") {
						t.Errorf("HUGE %s: a definite leak not the plugin's: %v", huge, l.Stack)
					}
				}
				// Each leak: an object of 32 B and an array of 48 B.
				if d, w := kinds["definite"], [2]uint64{n * leaks * 80, n * leaks * 2}; d != w {
					t.Errorf("HUGE %s: definitely lost %v (bytes, blocks), want %v; by kind %v", huge, d, w, kinds)
				}
				if huge == "1" {
					continue // memcheck's operator new cannot throw
				}
				if vg := memcheckLog(t, args...); vg != nil {
					var d [2]uint64
					for _, m := range vgKind.FindAllSubmatch(vg, -1) {
						if string(m[1]) == "definitely lost" {
							d = [2]uint64{atoi(string(m[2])), atoi(string(m[3]))}
						}
					}
					if d != kinds["definite"] {
						t.Errorf("definitely lost %v, memcheck %v:\n%s", kinds["definite"], d, vg)
					}
					// Each allocation recorded once: none missed, none of the
					// runtime's malloc calls under its operator new counted again.
					if m := vgTotal.FindSubmatch(vg); m == nil || atoi(string(m[1])) != img.Totals.Allocations {
						t.Errorf("%d allocations recorded, memcheck's total differs:\n%s", img.Totals.Allocations, vg)
					}
				}
			}
		})
	}
}

var vgTotal = regexp.MustCompile(`total heap usage: ([\d,]+) allocs`)

// imported lists the libraries an executable names in its DT_NEEDED.
func imported(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(libs, " ")
}
