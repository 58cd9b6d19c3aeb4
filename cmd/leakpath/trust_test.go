package main

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/testfixture"
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

// warned reports whether the report of r carries a warning containing s,
// in the text report and in the JSON's warnings.
func warned(r result, s string) bool {
	inJSON := false
	for _, w := range r.report.Warnings {
		inJSON = inJSON || strings.Contains(w, s)
	}
	return inJSON && strings.Contains(r.text, s)
}

// TestStaticProgramUnmeasured: a statically linked program never loads
// the agent. leakpath says so, exits with the program's code, and --check
// fails with its own code (24, or --check-unmeasured-exit-code), not 0.
func TestStaticProgramUnmeasured(t *testing.T) {
	if !testfixture.StaticLibc() {
		t.Skip("no static C library (libc.a) to link a static program with: apt-get install libc6-dev")
	}
	bin := fixture(t, "ending.c", "-static")
	const msg = "did not load leakpath's agent (statically linked?"
	n := native(t, nil, bin, "_exit")
	if n.code != 3 {
		t.Fatalf("the fixture exited %d on its own, want 3", n.code)
	}
	r := leakpath(t, nil, nil, bin, "_exit")
	sameBehaviour(t, r, n)
	if !warned(r, msg) || !strings.Contains(r.text, "nothing was recorded") {
		t.Errorf("no warning %q:\n%s", msg, r.text)
	}
	for _, c := range []struct {
		flags []string
		want  int
	}{
		{[]string{"--check"}, 24},
		{[]string{"--check", "--check-unmeasured-exit-code", "7"}, 7},
	} {
		if r := leakpath(t, c.flags, nil, bin, "_exit"); r.code != c.want {
			t.Errorf("leakpath run %v: exit code %d, want %d", c.flags, r.code, c.want)
		}
	}
}

// TestSetuidProgramUnmeasured: the dynamic loader ignores LD_PRELOAD
// paths in a setuid program run by another user (secure-execution mode):
// as with a static program, leakpath warns and --check exits 24.
func TestSetuidProgramUnmeasured(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a program setuid to another user takes root")
	}
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Flags&unix.ST_NOSUID != 0 {
		t.Skipf("%s is on a nosuid file system (or statfs failed: %v)", dir, err)
	}
	bin := filepath.Join(dir, "ending-setuid")
	copyExec(t, fixture(t, "ending.c"), bin)
	if err := os.Chown(bin, 65534, -1); err != nil { // nobody
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	n := native(t, nil, bin, "_exit")
	r := leakpath(t, nil, nil, bin, "_exit")
	sameBehaviour(t, r, n)
	if n.code != 3 || !warned(r, "did not load leakpath's agent") {
		t.Errorf("exit code %d (want 3); no warning that the agent was not loaded:\n%s", r.code, r.text)
	}
	if r := leakpath(t, []string{"--check"}, nil, bin, "_exit"); r.code != 24 {
		t.Errorf("--check: exit code %d, want 24:\n%s", r.code, r.text)
	}
}

// TestOwnMallocUnmeasured: an executable that defines malloc, free, calloc
// and realloc itself takes every call (the C library's too) away from the
// agent's hooks. The agent patches their entries: its 100-byte leak is
// found and fails --check with 23. When malloc's first instruction cannot
// be moved (a jump), nothing of the family is patched: leakpath warns and
// --check fails with 24, not 0. Built as a wrapper that passes the calls
// on to the C library's, it is measured through the hooks: no warning.
func TestOwnMallocUnmeasured(t *testing.T) {
	const msg = "allocations through the program's own malloc are not traced"
	own := fixture(t, "ownmalloc.c", "-ldl")
	n := native(t, nil, own, "3")
	r := leakpath(t, nil, nil, own, "3")
	sameBehaviour(t, r, n)
	if n.code != 3 {
		t.Errorf("the fixture exited %d on its own, want 3", n.code)
	}
	if warned(r, msg) || !strings.Contains(r.text, "traced by patching the entries of malloc, calloc, realloc, free") {
		t.Errorf("the program's own malloc is not traced by its entries:\n%s", r.text)
	}
	if tot := r.image(t, "ownmalloc").Totals; tot.LeakedBytes != 100 {
		t.Errorf("own malloc: leaked %d B, want 100:\n%s", tot.LeakedBytes, r.text)
	}
	if r := leakpath(t, []string{"--check"}, nil, own, "0"); r.code != 23 {
		t.Errorf("--check: exit code %d, want 23", r.code)
	}

	unmovable := fixture(t, "ownmalloc.c", "-ldl", "-DUNMOVABLE")
	r = leakpath(t, nil, nil, unmovable, "3")
	sameBehaviour(t, r, n)
	if !warned(r, msg) || !strings.Contains(r.text, "defines its own malloc, free, calloc, realloc") ||
		!warned(r, "could not trace its allocator's malloc") {
		t.Errorf("no warning %q:\n%s", msg, r.text)
	}
	if r := leakpath(t, []string{"--check"}, nil, unmovable, "3"); r.code != 24 {
		t.Errorf("--check: exit code %d, want 24", r.code)
	}

	fwd := fixture(t, "ownmalloc.c", "-ldl", "-DFORWARD")
	r = leakpath(t, []string{"--check"}, nil, fwd, "0")
	if warned(r, msg) {
		t.Errorf("a wrapper passing calls on warned %q:\n%s", msg, r.text)
	}
	if tot := r.image(t, "ownmalloc").Totals; tot.LeakedBytes != 100 || r.code != 23 {
		t.Errorf("wrapper: leaked %d B (want 100), --check exit code %d (want 23):\n%s", tot.LeakedBytes, r.code, r.text)
	}
}

// TestCheckAfterSignal: a program killed by a signal exits 128+N under
// leakpath even with --check and leaks that fail it (the crash matters
// more than the leak count); one that exits with those leaks fails with
// 23.
func TestCheckAfterSignal(t *testing.T) {
	bin := fixture(t, "ending.c")
	for _, c := range []struct {
		how  string
		want int
	}{
		{"segv", 128 + 11},
		{"abort", 128 + 6},
		{"kill", 128 + 9},
		{"_exit", 23},
	} {
		// Every kind fails --check: blocks _exit leaves on the stack
		// are reachable.
		r := leakpath(t, []string{"--check", "--check-kinds", "definite,indirect,possible,reachable"}, nil, bin, c.how)
		if c.how != "_exit" {
			if n := native(t, nil, bin, c.how); n.code != c.want {
				t.Errorf("%s: the fixture exited %d on its own, want %d", c.how, n.code, c.want)
			}
		}
		tot := r.image(t, "ending").Totals
		if r.code != c.want || tot.LeakedBytes != 500 {
			t.Errorf("%s: leakpath run --check exited %d (want %d), leaked %d B (want 500)", c.how, r.code, c.want, tot.LeakedBytes)
		}
	}
}

// TestAttachRelativeDlopen: after an attach the agent opens no /proc file
// (a seccomp filter may kill for it), so a library the program opened by
// a relative path is named by the collector, from the maps of the program
// still running at the detach: its frames name the function and line.
func TestAttachRelativeDlopen(t *testing.T) {
	lib := fixture(t, "plugin.c", "-shared", "-fPIC")
	dir := t.TempDir()
	copyExec(t, lib, filepath.Join(dir, "lib.so"))
	abs, err := filepath.EvalSymlinks(filepath.Join(dir, "lib.so"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "reldl.c")
	os.WriteFile(src, []byte(`#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
	void *h = dlopen("./lib.so", RTLD_NOW);
	if (!h) return 3;
	void *(*make)(void) = (void *(*)(void))dlsym(h, "plugin_make");
	void *volatile keep;
	char c;
	puts("ready");
	fflush(stdout);
	while (read(0, &c, 1) == 1) { /* a block per byte, the last one kept */
		keep = make();
		puts("made");
		fflush(stdout);
	}
	(void)keep;
	return 0;
}
`), 0o644)
	bin := filepath.Join(dir, "reldl")
	compileTo(t, "cc", bin, "-g", src, "-ldl")
	cmd := exec.Command(bin)
	cmd.Dir, cmd.Env = dir, testEnv()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewReader(outPipe)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("the program printed %q (%v), want %q", line, err, want)
		}
	}
	expect("ready")
	pid := cmd.Process.Pid
	a := startAttach(t, pid)
	for i := 0; i < 3; i++ {
		in.Write([]byte{'x'})
		expect("made")
	}
	if b, err := exec.Command(lpBin, "detach", strconv.Itoa(pid)).CombinedOutput(); err != nil {
		t.Fatalf("detach: %v\n%s", err, b)
	}
	r, text := a.wait(t)
	blocks := uint64(0)
	for _, l := range r.Leaks {
		f := l.Stack[0]
		if l.Bytes/l.Blocks != 48 || !strings.HasSuffix(f.Module, "lib.so") {
			continue
		}
		blocks += l.Blocks
		if f.Module != abs || f.Function != "plugin_make" || filepath.Base(f.File) != "plugin.c" || f.Line == 0 {
			t.Errorf("frame in the library: %+v, want plugin_make (plugin.c:LINE) in %s", f, abs)
		}
	}
	if blocks != 3 {
		t.Errorf("%d blocks of 48 B allocated in lib.so live at detach, want 3:\n%s", blocks, text)
	}
}
