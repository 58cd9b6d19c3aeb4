package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// Run runs the leakpath binary with args and returns its stdout, stderr
// and exit code.
func Run(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(Bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("leakpath %v: %v", args, err)
	}
	return out.String(), errb.String(), ExitCode(err, cmd.ProcessState)
}

// ExportTrace runs the export fixture with its trace kept and returns the
// trace and leakpath's own JSON report of it.
func ExportTrace(t testing.TB) (string, *Report) {
	t.Helper()
	bin := Fixture(t, "export.cc")
	dir := t.TempDir()
	trace := filepath.Join(dir, "export.lpt")
	r := Leakpath(t, []string{"-o", trace}, nil, bin)
	if r.Code != 0 {
		t.Fatalf("leakpath run exited %d: %s", r.Code, r.Stderr)
	}
	out := LeakpathReport(t, Root, "--format", "json", trace)
	var rep Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("report --format json: %v", err)
	}
	if len(rep.Processes) > 1 {
		t.Fatalf("the fixture should be one image, the report has %d", len(rep.Processes))
	}
	return trace, &rep
}

// LeakpathReport runs `leakpath report ARGS` in dir and returns its stdout.
func LeakpathReport(t testing.TB, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(Bin, append([]string{"report"}, args...)...)
	cmd.Dir = dir
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("leakpath report %v: %v\n%s", args, err, errb.Bytes())
	}
	return out
}

// FlameNode is a node of the flame graph page's embedded data.
type FlameNode struct {
	Name     string       `json:"n"`
	Value    uint64       `json:"v"`
	Children []*FlameNode `json:"c"`
}

// FlameStacks is the tree's value per root-to-leaf stack (frames joined
// by ";"), as the collapsed export lists them: what a node holds beyond
// its callees ends a stack there. It checks that each node's value is at
// least its callees'.
func FlameStacks(t testing.TB, n *FlameNode, prefix []string, out map[string]uint64) {
	var sum uint64
	for _, c := range n.Children {
		sum += c.Value
		FlameStacks(t, c, append(slices.Clip(prefix), c.Name), out)
	}
	if sum > n.Value {
		t.Errorf("%v: callees sum to %d, more than the node's %d", prefix, sum, n.Value)
	} else if n.Value > sum {
		out[strings.Join(prefix, ";")] += n.Value - sum
	}
}

// EachTraceEvent calls each with every event of the trace at path, in
// the order they were written.
func EachTraceEvent(t testing.TB, path string, each func(ev *event.Event)) {
	t.Helper()
	rd, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var buf []event.Event
	for {
		buf, err = rd.Next(buf)
		for i := range buf {
			each(&buf[i])
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Types is the "types" section of leakpath.report/v1 as tests read it.
type Types struct {
	Seconds    float64           `json:"seconds"`
	TypedBytes uint64            `json:"typed_bytes"`
	TotalBytes uint64            `json:"total_bytes"`
	ByEvidence map[string]uint64 `json:"bytes_by_evidence"`
	Types      []struct {
		Name       string            `json:"name"`
		Unknown    bool              `json:"unknown"`
		File       string            `json:"file"`
		Line       int               `json:"line"`
		Blocks     uint64            `json:"blocks"`
		Bytes      uint64            `json:"bytes"`
		ByEvidence map[string]uint64 `json:"blocks_by_evidence"`
		Retains    uint64            `json:"largest_retained_bytes"`
		HeldBy     []struct {
			Holder string `json:"holder"`
			Blocks uint64 `json:"blocks"`
		} `json:"held_by"`
		Sites []struct {
			Blocks uint64  `json:"blocks"`
			Stack  []Frame `json:"stack"`
		} `json:"sites"`
	} `json:"types"`
	PathToRoot *struct {
		Type  string `json:"type"`
		Steps []struct {
			Via      string `json:"via"`
			Bytes    uint64 `json:"bytes"`
			Type     string `json:"type"`
			Retained uint64 `json:"retained_bytes"`
		} `json:"steps"`
	} `json:"path_to_root"`
}

// TypesOf reads the types section of a JSON report.
func TypesOf(t testing.TB, reportJSON []byte) *Types {
	t.Helper()
	var rep struct {
		Types *Types `json:"types"`
	}
	if err := json.Unmarshal(reportJSON, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Types == nil {
		t.Fatalf("the report has no types:\n%s", reportJSON)
	}
	return rep.Types
}

// SnapDoc is what the snapshot tests read of a snapshot or report.
type SnapDoc struct {
	Schema   string `json:"schema"`
	Snapshot bool   `json:"snapshot"`
	PID      int    `json:"pid"`
	Leaks    []Leak `json:"leaks"`
	Scan     *struct {
		PauseSeconds float64 `json:"pause_seconds"`
		HeapBytes    uint64  `json:"heap_bytes"`
	} `json:"scan"`
}

// Site sums the groups whose stack names fn, by kind.
func (d *SnapDoc) Site(fn string) (blocks uint64, byKind map[string]uint64) {
	byKind = map[string]uint64{}
	for _, l := range d.Leaks {
		if StackHas(l.Stack, fn) {
			blocks += l.Blocks
			byKind[l.Kind] += l.Blocks
		}
	}
	return blocks, byKind
}

// ReadSnapDoc reads a snapshot's JSON report at path.
func ReadSnapDoc(t testing.TB, path string) *SnapDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := new(SnapDoc)
	if err := json.Unmarshal(b, d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Schema != "leakpath.report/v1" {
		t.Fatalf("%s: schema %q", path, d.Schema)
	}
	return d
}
