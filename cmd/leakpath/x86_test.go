package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// objdumpStarts returns the addresses where objdump decodes instructions
// to start in path's code.
func objdumpStarts(t *testing.T, path string) map[uint64]bool {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "-M", "att", path).Output()
	if err != nil {
		t.Skipf("objdump -d %s: %v (binutils is not installed?)", path, err)
	}
	starts := map[uint64]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		colon := strings.IndexByte(line, ':')
		if colon < 1 || !strings.HasPrefix(line, " ") || colon+1 >= len(line) || line[colon+1] != '\t' {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSpace(line[:colon]), 16, 64)
		if err == nil {
			starts[a] = true
		}
	}
	return starts
}

// TestX86Decoder: the agent's length decoder (agent/x86.h), which moves
// the first instructions of the allocator functions it patches, starts
// every instruction where objdump does, over the exported functions of
// the C library and of the allocators installed; what it cannot decode
// it refuses, and that stays rare.
func TestX86Decoder(t *testing.T) {
	bin := fixture(t, "x86dec.c", "-I"+filepath.Join(root, "agent"))
	files := []string{"/lib/x86_64-linux-gnu/libc.so.6"}
	for _, lib := range []string{"libjemalloc.so.2", "libtcmalloc.so.4", "libmimalloc.so.2"} {
		if p := filepath.Join("/usr/lib/x86_64-linux-gnu", lib); fileExists(p) {
			files = append(files, p)
		}
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			ef, err := elf.Open(path)
			if err != nil {
				t.Skipf("%s: %v", path, err)
			}
			defer ef.Close()
			syms, err := ef.DynamicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			var in strings.Builder
			seen := map[uint64]bool{}
			var funcs []elf.Symbol
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF || seen[s.Value] {
					continue
				}
				seen[s.Value] = true
				funcs = append(funcs, s)
			}
			sort.Slice(funcs, func(i, j int) bool { return funcs[i].Value < funcs[j].Value })
			for _, s := range funcs {
				for _, p := range ef.Progs {
					if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value+s.Size <= p.Vaddr+p.Filesz {
						fmt.Fprintf(&in, "%x %x %x\n", s.Value-p.Vaddr+p.Off, s.Size, s.Value)
						break
					}
				}
			}
			cmd := exec.Command(bin, path)
			cmd.Stdin = strings.NewReader(in.String())
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("x86dec: %v", err)
			}
			starts := objdumpStarts(t, path)
			var total, bad, wrong, patchable int
			var firstWrong string
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(make([]byte, 1<<22), 1<<22)
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "patchable ") {
					if line == "patchable 0" {
						patchable++
					}
					continue
				}
				total++
				fields := strings.Fields(line)
				for _, f := range fields[1:] {
					if f == "bad" {
						bad++
						break
					}
					a, _ := strconv.ParseUint(f, 16, 64)
					if !starts[a] {
						wrong++
						if firstWrong == "" {
							firstWrong = fmt.Sprintf("%s at %#x", fields[0], a)
						}
						break
					}
				}
			}
			t.Logf("%s: %d functions, %d not decoded whole, %d decoded unlike objdump, %d patchable", path, total, bad, wrong, patchable)
			if total == 0 {
				t.Fatalf("no functions decoded")
			}
			if wrong > 0 {
				t.Errorf("%d functions decoded unlike objdump (the first: %s)", wrong, firstWrong)
			}
			if bad*20 > total {
				t.Errorf("%d of %d functions not decoded whole: more than 5%%", bad, total)
			}
		})
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
