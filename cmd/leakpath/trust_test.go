package main

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// copyExec copies the executable or library src to dst.
func copyExec(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// frameOffset is a frame's module-relative address, as the report prints it.
func frameOffset(t *testing.T, f jsonFrame) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("frame offset %q: %v", f.Offset, err)
	}
	return v
}

// covering returns the name of the sized function symbol of syms whose
// extent holds addr, or "".
func covering(syms []elf.Symbol, addr uint64) string {
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value <= addr && addr < s.Value+s.Size {
			return s.Name
		}
	}
	return ""
}

// TestStrippedExecutableFrames: in an executable stripped to its .dynsym,
// a frame in an exported function is named after it, and a frame in a
// static function (whose symbol is gone) is module+offset, not named
// after the exported function below it.
func TestStrippedExecutableFrames(t *testing.T) {
	orig := fixture(t, "stripped.c", "-rdynamic")
	bin := filepath.Join(t.TempDir(), "stripped")
	copyExec(t, orig, bin)
	if out, err := exec.Command("strip", "--strip-all", bin).CombinedOutput(); err != nil {
		t.Skipf("strip (binutils) is needed to strip the fixture: %v\n%s", err, out)
	}
	full, dyn := elfSymbols(t, orig, false), elfSymbols(t, bin, true)
	r := leakpath(t, nil, nil, bin)
	sameBehaviour(t, r, native(t, nil, bin))
	im := r.image(t, "stripped")
	checked, hidden, exported := 0, 0, 0
	for _, l := range im.Leaks {
		for i, f := range l.Stack {
			if f.Module != bin {
				continue
			}
			at := frameOffset(t, f) - 1
			in := covering(full, at)
			want := covering(dyn, at)
			if f.Function != want {
				t.Errorf("leak of %d B, frame #%d at %s+%#x (in %s): named %q, want %q", l.Bytes, i, f.Module, at, in, f.Function, want)
			}
			checked++
			if i == 0 && in == "hidden_make" && l.Bytes == 64 {
				hidden++
			}
			if i == 0 && in == "exported_make" && l.Bytes == 32 && f.Function == "exported_make" {
				exported++
			}
		}
	}
	if hidden != 1 || exported != 1 {
		t.Errorf("leaks allocated in hidden_make: %d, in exported_make: %d; want 1 each:\n%s", hidden, exported, r.text)
	}
	if !strings.Contains(r.text, bin+"+0x") {
		t.Errorf("no frame shown as %s+OFFSET:\n%s", bin, r.text)
	}
	t.Logf("%d frames in the stripped executable checked", checked)
}

// elfSymbols reads the .symtab of path, or its .dynsym if dynamic.
func elfSymbols(t *testing.T, path string, dynamic bool) []elf.Symbol {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := f.Symbols
	if dynamic {
		read = f.DynamicSymbols
		if _, err := f.Symbols(); err == nil {
			t.Fatalf("%s still has a .symtab", path)
		}
	}
	syms, err := read()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return syms
}

// TestRelativeDlopen: a library opened by a path relative to the working
// directory (dlopen("./lib.so")) is symbolized like any other: the frames
// inside it name the function and its source line, and the module is the
// absolute path of the file mapped.
func TestRelativeDlopen(t *testing.T) {
	lib := fixture(t, "plugin.c", "-shared", "-fPIC")
	bin := fixture(t, "dlopener.c", "-ldl")
	dir := t.TempDir()
	copyExec(t, lib, filepath.Join(dir, "lib.so"))
	abs, err := filepath.EvalSymlinks(filepath.Join(dir, "lib.so"))
	if err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(dir, "report.json")
	cmd := exec.Command(lpBin, "run", "--json", jsonPath, "--", bin, "./lib.so")
	cmd.Dir, cmd.Env = dir, testEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("leakpath run -- dlopener ./lib.so: %v\n%s", err, out)
	}
	r := readReport(t, jsonPath)
	found := 0
	for _, l := range r.Leaks {
		f := l.Stack[0]
		if l.Bytes != 48 || !strings.HasSuffix(f.Module, "lib.so") {
			continue
		}
		found++
		if f.Module != abs || f.Function != "plugin_make" || filepath.Base(f.File) != "plugin.c" || f.Line == 0 {
			t.Errorf("frame in the library: %+v, want plugin_make (plugin.c:LINE) in %s", f, abs)
		}
	}
	if found != 2 {
		t.Errorf("%d leaks of 48 B allocated in lib.so, want 2: %+v", found, r.Leaks)
	}
}

// readReport reads a JSON report written by leakpath run --json.
func readReport(t *testing.T, path string) jsonImage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r jsonReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return r.jsonImage
}
