package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// lsanLeaked runs a program built with -fsanitize=leak and returns the
// allocations LeakSanitizer reports leaked (its SUMMARY line; none: 0);
// ok is false when LeakSanitizer cannot run here.
func lsanLeaked(t *testing.T, bin string, args ...string) (n int, ok bool) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, testEnv()
	cmd.Run()
	if strings.Contains(out.String(), "LeakSanitizer has encountered a fatal error") {
		t.Logf("LeakSanitizer cannot run here: not compared\n%s", out.String())
		return 0, false
	}
	m := regexp.MustCompile(`SUMMARY: LeakSanitizer: \d+ byte\(s\) leaked in (\d+) allocation\(s\)`).FindStringSubmatch(out.String())
	if m == nil {
		return 0, true
	}
	n, _ = strconv.Atoi(m[1])
	return n, true
}

// leakedBlocks counts the blocks of the leaks a report lists that no
// suppression hides, reachable ones aside: what LeakSanitizer calls
// leaked (it has no "possible" kind).
func leakedBlocks(t *testing.T, r result) int {
	t.Helper()
	var rep struct {
		Leaks []struct {
			Kind       string `json:"kind"`
			Blocks     int    `json:"blocks"`
			Suppressed string `json:"suppressed"`
		} `json:"leaks"`
		LeakCheckOff bool `json:"leak_check_off"`
	}
	if err := json.Unmarshal(r.reportJSON, &rep); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range rep.Leaks {
		if l.Kind != "reachable" && l.Suppressed == "" {
			n += l.Blocks
		}
	}
	return n
}

// TestLSanInterface: LeakSanitizer's interface for programs works under
// leakpath as under LSan: __lsan_ignore_object (interior pointers too,
// and what the object points to is reachable), __lsan_disable/enable,
// __lsan_register_root_region and its undoing, a __lsan_is_turned_off
// that returns 1 (no leak check, --check passes), and
// __lsan_default_suppressions, the last two defined in the executable but
// not exported (and exported, with -rdynamic). Each mode's leaked blocks
// are the fixture's (lsanapi.c), and gcc -fsanitize=leak's on the same
// source when it builds.
func TestLSanInterface(t *testing.T) {
	want := map[string]int{"base": 1, "ignore": 1, "disable": 2, "region": 2, "unregister": 3, "off": 0, "supp": 1}
	src := filepath.Join(root, "testdata", "fixtures", "lsanapi.c")
	lsanBin := filepath.Join(t.TempDir(), "lsanapi-lsan")
	if err := testfixture.Compile("cc", lsanBin, "-g", "-O0", "-fsanitize=leak", src); err != nil {
		t.Logf("no -fsanitize=leak build (%v): not compared with LeakSanitizer", err)
		lsanBin = ""
	}
	for _, exported := range []bool{false, true} {
		var flags []string
		if exported {
			flags = []string{"-rdynamic"}
		}
		bin := fixture(t, "lsanapi.c", flags...)
		for _, mode := range []string{"base", "ignore", "disable", "region", "unregister", "off", "supp"} {
			if exported && mode != "off" && mode != "supp" {
				continue // the same as not exported
			}
			name := mode
			if exported {
				name += "/exported"
			}
			t.Run(name, func(t *testing.T) {
				if lsanBin != "" && !exported {
					if got, ok := lsanLeaked(t, lsanBin, mode); ok && got != want[mode] {
						t.Errorf("LeakSanitizer: %d allocations leaked, the fixture says %d", got, want[mode])
					}
				}
				r := leakpath(t, []string{"--check"}, nil, bin, mode)
				if got := leakedBlocks(t, r); got != want[mode] {
					t.Errorf("leakpath: %d blocks leaked, want %d:\n%s", got, want[mode], r.text)
				}
				wantCode := exitLeaks
				if want[mode] == 0 {
					wantCode = 0
				}
				if r.code != wantCode {
					t.Errorf("leakpath --check exited %d, want %d:\n%s", r.code, wantCode, r.text)
				}
				if off := strings.Contains(r.text, "leak check turned off by the program"); off != (mode == "off") {
					t.Errorf("leakpath says the leak check was turned off: %v, want %v:\n%s", off, mode == "off", r.text)
				}
			})
		}
	}
}
