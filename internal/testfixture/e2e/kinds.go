package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// KindsImage is the part of a report's image the tests of leak kinds read.
type KindsImage struct {
	Totals struct {
		ByKind     map[string]struct{ Bytes, Blocks uint64 } `json:"by_kind"`
		Suppressed *struct{ Bytes, Blocks uint64 }           `json:"suppressed"`
	} `json:"totals"`
	Leaks []struct {
		Kind           string  `json:"kind"`
		Bytes          uint64  `json:"bytes"`
		Blocks         uint64  `json:"blocks"`
		IndirectBytes  uint64  `json:"indirect_bytes"`
		IndirectBlocks uint64  `json:"indirect_blocks"`
		Owner          []Frame `json:"owner"`
		Suppressed     string  `json:"suppressed"`
		Stack          []Frame `json:"stack"`
	} `json:"leaks"`
	Scan      *struct{ PauseSeconds float64 } `json:"scan"`
	ScanError string                          `json:"scan_error"`
}

// RunKinds runs leakpath on argv and returns the first image's kinds part
// of the JSON report.
func RunKinds(t *testing.T, flags []string, argv ...string) (Result, KindsImage) {
	t.Helper()
	r := Leakpath(t, flags, nil, argv...)
	var k KindsImage
	if err := json.Unmarshal(r.ReportJSON, &k); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	if k.ScanError != "" {
		t.Fatalf("the exit scan failed: %s\n%s", k.ScanError, r.Text)
	}
	if k.Scan == nil || k.Totals.ByKind == nil {
		t.Fatalf("no scan in the report:\n%s", r.Text)
	}
	return r, k
}

// VGKind and VGPossible read memcheck's LEAK SUMMARY and its possibly
// lost records.
var (
	VGKind     = regexp.MustCompile(`(definitely lost|indirectly lost|possibly lost|still reachable): ([\d,]+) bytes in ([\d,]+) blocks`)
	VGPossible = regexp.MustCompile(`([\d,]+) bytes in ([\d,]+) blocks are possibly lost in loss record[^\n]*\n((?:==\d+==\s+(?:at|by) [^\n]*\n)*)`)
)

// MemcheckSums runs argv under memcheck and returns its LEAK SUMMARY by
// kind (bytes, blocks) and its log; nil (and the test log says so) when
// valgrind is not installed, so no caller passes a comparison silently.
func MemcheckSums(t testing.TB, argv ...string) (map[string][2]uint64, []byte) {
	t.Helper()
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Log("valgrind is not installed: not compared with memcheck's LEAK SUMMARY (apt-get install valgrind)")
		return nil, nil
	}
	logf := filepath.Join(t.TempDir(), "vg.log")
	cmd := exec.Command(vg, append([]string{"--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no",
		"--run-cxx-freeres=no", "--log-file=" + logf}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, TestEnv()
	cmd.Run()
	log, err := os.ReadFile(logf)
	if err != nil {
		t.Fatalf("valgrind log: %v", err)
	}
	names := map[string]string{"definitely lost": "definite", "indirectly lost": "indirect",
		"possibly lost": "possible", "still reachable": "reachable"}
	sums := map[string][2]uint64{}
	for _, m := range VGKind.FindAllSubmatch(log, -1) {
		sums[names[string(m[1])]] = [2]uint64{Atoi(string(m[2])), Atoi(string(m[3]))}
	}
	if len(sums) == 0 {
		t.Fatalf("no LEAK SUMMARY in valgrind's log:\n%s", log)
	}
	return sums, log
}

// CompareLeakSummary compares leakpath's sums by kind with memcheck's LEAK
// SUMMARY on the same program. Where they differ by design: memcheck
// calls some of the dynamic loader's blocks "possibly lost" (glibc's DTV
// of a live thread, whose TCB points inside it; dlopen's find-object
// table); leakpath knows they are the C runtime's and calls them
// reachable. And the agent's own thread-local storage makes every DTV 16
// bytes bigger.
func CompareLeakSummary(t *testing.T, k KindsImage, argv ...string) {
	t.Helper()
	vgSums, log := MemcheckSums(t, argv...)
	if vgSums == nil {
		return // MemcheckSums logged why
	}
	var dtvBytes, dtvBlocks, grown uint64
	for _, m := range VGPossible.FindAllSubmatch(log, -1) {
		stack := string(m[3])
		if !strings.Contains(stack, "(rtld-malloc.h:") {
			continue // not the loader's own
		}
		dtvBytes += Atoi(string(m[1]))
		dtvBlocks += Atoi(string(m[2]))
		if strings.Contains(stack, "allocate_dtv") || strings.Contains(stack, "_dl_allocate_tls") {
			grown += 16 * Atoi(string(m[2]))
		}
	}
	p := vgSums["possible"]
	vgSums["possible"] = [2]uint64{p[0] - dtvBytes, p[1] - dtvBlocks}
	r := vgSums["reachable"]
	vgSums["reachable"] = [2]uint64{r[0] + dtvBytes + grown, r[1] + dtvBlocks}
	for _, kind := range []string{"definite", "indirect", "possible", "reachable"} {
		got := k.Totals.ByKind[kind]
		want := vgSums[kind]
		t.Logf("%s: leakpath %d bytes in %d blocks; valgrind %d in %d (the loader's moved to reachable: %d bytes in %d blocks)",
			kind, got.Bytes, got.Blocks, want[0], want[1], dtvBytes, dtvBlocks)
		if got.Bytes != want[0] || got.Blocks != want[1] {
			t.Errorf("%s: leakpath %d bytes in %d blocks, valgrind %d in %d", kind, got.Bytes, got.Blocks, want[0], want[1])
		}
	}
}

// Atoi reads a count as valgrind prints it, with thousands separated by
// commas.
func Atoi(s string) uint64 {
	n, _ := strconv.ParseUint(strings.ReplaceAll(s, ",", ""), 10, 64)
	return n
}

// MemcheckLog runs argv under memcheck and returns its log, or nil (and
// says so) when valgrind is not installed.
func MemcheckLog(t testing.TB, argv ...string) []byte {
	t.Helper()
	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Log("valgrind is not installed: not compared with memcheck")
		return nil
	}
	logf := filepath.Join(t.TempDir(), "vg.log")
	cmd := exec.Command(vg, append([]string{"--run-libc-freeres=no", "--run-cxx-freeres=no", "--log-file=" + logf}, argv...)...)
	cmd.Env = TestEnv()
	cmd.Run()
	log, err := os.ReadFile(logf)
	if err != nil {
		t.Fatalf("valgrind log: %v", err)
	}
	return log
}
