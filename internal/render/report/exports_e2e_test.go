package report_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	pprofile "github.com/google/pprof/profile"
	"golang.org/x/net/html"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// leakNames is a leak stack's frames as the exports name them, innermost
// first.
func leakNames(st []e2e.Frame) []string {
	var out []string
	for _, f := range st {
		name := f.Function
		if name == "" {
			off, _ := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
			name = fmt.Sprintf("%s+0x%x", filepath.Base(f.Module), off)
		}
		out = append(out, name)
	}
	return out
}

// pprofName is a function's name as go tool pprof shows C++ names: without
// their parameters.
func pprofName(s string) string {
	name, _, _ := strings.Cut(s, "(")
	return name
}

func TestExportPprof(t *testing.T) {
	trace, rep := e2e.ExportTrace(t)
	pb := filepath.Join(t.TempDir(), "leaks.pb.gz")
	e2e.LeakpathReport(t, e2e.Root, "--format", "pprof", "--output", pb, trace)
	f, err := os.Open(pb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof, err := pprofile.Parse(f)
	if err != nil {
		t.Fatalf("profile.Parse: %v", err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, st := range prof.SampleType {
		idx[st.Type] = i
	}
	for _, want := range []string{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"} {
		if _, ok := idx[want]; !ok {
			t.Fatalf("no sample type %s in %v", want, prof.SampleType)
		}
	}
	// Totals: what the run allocated, what it left.
	sum := map[string]int64{}
	inuse := map[string]int64{} // inuse_space per stack, innermost first
	inlined := false
	for _, s := range prof.Sample {
		for typ, i := range idx {
			sum[typ] += s.Value[i]
		}
		var names []string
		for _, l := range s.Location {
			if len(l.Line) > 1 {
				inlined = true
			}
			for _, ln := range l.Line {
				names = append(names, ln.Function.Name)
			}
		}
		inuse[strings.Join(names, ";")] += s.Value[idx["inuse_space"]]
	}
	tot := rep.Totals
	for _, c := range []struct {
		typ  string
		want uint64
	}{{"alloc_objects", tot.Allocations}, {"alloc_space", tot.AllocatedBytes}, {"inuse_objects", tot.LeakedBlocks}, {"inuse_space", tot.LeakedBytes}} {
		if sum[c.typ] != int64(c.want) {
			t.Errorf("%s sums to %d, the report says %d", c.typ, sum[c.typ], c.want)
		}
	}
	// Each leak group's stack holds its bytes.
	want := map[string]int64{}
	for _, l := range rep.Leaks {
		want[strings.Join(leakNames(l.Stack), ";")] += int64(l.Bytes)
	}
	for k, v := range inuse {
		if v == 0 {
			delete(inuse, k)
		}
	}
	if fmt.Sprint(inuse) != fmt.Sprint(want) {
		t.Errorf("inuse_space per stack:\n%v\nthe report's leaks:\n%v", inuse, want)
	}
	if !inlined {
		t.Errorf("no location with inlined lines (make_name is inlined into register_names)")
	}
	for _, m := range prof.Mapping {
		if m.File == "" || m.Limit <= m.Start {
			t.Errorf("mapping %+v: no file or range", m)
		}
	}

	// go tool pprof: the flat inuse_space of each function is what the
	// report's leaks allocated there, to the byte.
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool pprof: no go command:", err)
	}
	cmd := exec.Command("go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-unit=B",
		"-nodecount=100000", "-nodefraction=0", "-edgefraction=0", pb)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	flat := map[string]int64{}
	row := regexp.MustCompile(`^\s*(\d+)B?\s+[\d.]+%\s+[\d.]+%\s+(\d+)B?\s+[\d.]+%\s+(.+?)(?: \(inline\))?$`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if n != 0 {
			flat[pprofName(m[3])] += n
		}
	}
	wantFlat := map[string]int64{}
	for _, l := range rep.Leaks {
		if l.Bytes > 0 {
			wantFlat[pprofName(leakNames(l.Stack)[0])] += int64(l.Bytes)
		}
	}
	if fmt.Sprint(flat) != fmt.Sprint(wantFlat) {
		t.Errorf("go tool pprof -top flat inuse_space:\n%v\nthe report's leak sites:\n%v\n%s", flat, wantFlat, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("of %dB total", tot.LeakedBytes)) {
		t.Errorf("go tool pprof's total is not the report's %d B leaked:\n%s", tot.LeakedBytes, out)
	}
}

func TestExportCollapsed(t *testing.T) {
	trace, rep := e2e.ExportTrace(t)
	parse := func(value string) map[string]uint64 {
		args := []string{"--format", "collapsed"}
		if value != "" {
			args = append(args, "--value", value)
		}
		out := e2e.LeakpathReport(t, e2e.Root, append(args, trace)...)
		m := map[string]uint64{}
		for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				t.Fatalf("--value %s: line %q has no value", value, line)
			}
			n, err := strconv.ParseUint(line[i+1:], 10, 64)
			if err != nil || n == 0 {
				t.Fatalf("--value %s: line %q: value %q", value, line, line[i+1:])
			}
			if _, dup := m[line[:i]]; dup {
				t.Errorf("--value %s: stack %q twice", value, line[:i])
			}
			m[line[:i]] = n
		}
		return m
	}
	leakedBytes, leakedBlocks := map[string]uint64{}, map[string]uint64{}
	for _, l := range rep.Leaks {
		names := leakNames(l.Stack)
		slices.Reverse(names)
		k := strings.Join(names, ";")
		leakedBytes[k] += l.Bytes
		leakedBlocks[k] += l.Blocks
	}
	if got := parse(""); fmt.Sprint(got) != fmt.Sprint(leakedBytes) {
		t.Errorf("default (leaked-bytes):\n%v\nwant the report's leaks:\n%v", got, leakedBytes)
	}
	if got := parse("leaked-blocks"); fmt.Sprint(got) != fmt.Sprint(leakedBlocks) {
		t.Errorf("leaked-blocks:\n%v\nwant:\n%v", got, leakedBlocks)
	}
	total := func(m map[string]uint64) (n uint64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	tot := rep.Totals
	for _, c := range []struct {
		value string
		want  uint64
	}{{"leaked-bytes", tot.LeakedBytes}, {"leaked-blocks", tot.LeakedBlocks},
		{"allocated-bytes", tot.AllocatedBytes}, {"allocated-blocks", tot.Allocations}} {
		m := parse(c.value)
		if got := total(m); got != c.want {
			t.Errorf("--value %s sums to %d, the report says %d", c.value, got, c.want)
		}
		if c.value == "allocated-blocks" {
			// parse allocated 9 blocks, 3 of them leaked.
			found := false
			for k, v := range m {
				if strings.HasSuffix(k, ";main;parse(int);make_buf(unsigned long)") {
					found = v == 9
				}
			}
			if !found {
				t.Errorf("allocated-blocks: no stack main;parse(int);make_buf(unsigned long) with 9:\n%v", m)
			}
		}
	}
	// A value for another format, or an unknown one, is a usage error;
	// so is an export of several traces.
	for _, args := range [][]string{{"--format", "collapsed", "--value", "bytes"}, {"--format", "json", "--value", "leaked-bytes"}} {
		cmd := exec.Command(e2e.Bin, append(append([]string{"report"}, args...), trace)...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != e2e.ExitUsage || !strings.Contains(string(out), "--value") {
			t.Errorf("leakpath report %v: exit code %d, want %d with an error about --value:\n%s", args, code, e2e.ExitUsage, out)
		}
	}
	cmd := exec.Command(e2e.Bin, "report", "--format", "collapsed", trace, trace)
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != e2e.ExitUsage {
		t.Errorf("collapsed export of two traces: exit code %d, want %d:\n%s", cmd.ProcessState.ExitCode(), e2e.ExitUsage, out)
	}
}

// sarifDoc is what the test reads of a SARIF log.
type sarifDoc struct {
	Schema  string `json:"$schema"`
	Version string `json:"version"`
	Runs    []struct {
		Tool struct {
			Driver struct {
				Name  string `json:"name"`
				Rules []struct {
					ID string `json:"id"`
				} `json:"rules"`
			} `json:"driver"`
		} `json:"tool"`
		OriginalURIBaseIDs map[string]struct {
			URI string `json:"uri"`
		} `json:"originalUriBaseIds"`
		Results []struct {
			RuleID    string `json:"ruleId"`
			RuleIndex *int   `json:"ruleIndex"`
			Level     string `json:"level"`
			Message   struct {
				Text string `json:"text"`
			} `json:"message"`
			Locations []struct {
				PhysicalLocation *struct {
					ArtifactLocation struct {
						URI       string `json:"uri"`
						URIBaseID string `json:"uriBaseId"`
					} `json:"artifactLocation"`
					Region *struct {
						StartLine int `json:"startLine"`
					} `json:"region"`
				} `json:"physicalLocation"`
			} `json:"locations"`
			Properties struct {
				Bytes uint64 `json:"bytes"`
			} `json:"properties"`
			CodeFlows []struct {
				ThreadFlows []struct {
					Locations []json.RawMessage `json:"locations"`
				} `json:"threadFlows"`
			} `json:"codeFlows"`
		} `json:"results"`
	} `json:"runs"`
}

func TestExportSARIF(t *testing.T) {
	trace, rep := e2e.ExportTrace(t)
	// Run at the repository's root: the fixture's source is under it.
	out := e2e.LeakpathReport(t, e2e.Root, "--format", "sarif", trace)
	var doc sarifDoc
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("SARIF: %v\n%s", err, out)
	}
	if doc.Version != "2.1.0" || !strings.Contains(doc.Schema, "sarif-2.1.0") {
		t.Errorf("version %q, $schema %q", doc.Version, doc.Schema)
	}
	if len(doc.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(doc.Runs))
	}
	run := doc.Runs[0]
	if run.Tool.Driver.Name != "leakpath" {
		t.Errorf("tool.driver.name %q", run.Tool.Driver.Name)
	}
	if len(run.Results) != len(rep.Leaks)+len(rep.Errors) {
		t.Fatalf("%d results, the report has %d leak groups and %d improper uses", len(run.Results), len(rep.Leaks), len(rep.Errors))
	}
	abs, _ := filepath.Abs(e2e.Root)
	if u := run.OriginalURIBaseIDs["%SRCROOT%"].URI; u != "file://"+abs+"/" {
		t.Errorf("%%SRCROOT%% is %q, want file://%s/", u, abs)
	}
	rules := map[string]string{"definite": "leakpath/definite-leak", "possible": "leakpath/possible-leak",
		"indirect": "leakpath/indirect-leak", "reachable": "leakpath/reachable", "unclassified": "leakpath/leak",
		"mismatched_free": "leakpath/mismatched-free"}
	levels := map[string]string{"definite": "error", "possible": "warning", "indirect": "warning", "reachable": "note",
		"mismatched_free": "error"}
	type finding struct {
		kind  string
		stack []e2e.Frame
		bytes uint64
	}
	var want []finding
	for _, l := range rep.Leaks {
		want = append(want, finding{l.Kind, l.Stack, l.Bytes})
	}
	for _, e := range rep.Errors {
		want = append(want, finding{e.Kind, e.Stack, 0})
	}
	mismatched := false
	for i, res := range run.Results {
		w := want[i]
		if res.RuleID != rules[w.kind] {
			t.Errorf("result %d: ruleId %q for a %s", i, res.RuleID, w.kind)
		}
		if res.RuleIndex == nil || *res.RuleIndex >= len(run.Tool.Driver.Rules) || run.Tool.Driver.Rules[*res.RuleIndex].ID != res.RuleID {
			t.Errorf("result %d: ruleIndex does not name rule %s", i, res.RuleID)
		}
		if l, ok := levels[w.kind]; ok && res.Level != l {
			t.Errorf("result %d (%s): level %q, want %q", i, w.kind, res.Level, l)
		}
		if res.Message.Text == "" {
			t.Errorf("result %d: no message", i)
		}
		if w.bytes > 0 && !strings.HasPrefix(res.Message.Text, report.Bytes(w.bytes)+" in ") {
			t.Errorf("result %d: message %q does not start with %s", i, res.Message.Text, report.Bytes(w.bytes))
		}
		if w.bytes > 0 && res.Properties.Bytes != w.bytes {
			t.Errorf("result %d: properties.bytes %d, want %d", i, res.Properties.Bytes, w.bytes)
		}
		if w.kind == "mismatched_free" {
			mismatched = true
		}
		if len(res.Locations) != 1 {
			t.Errorf("result %d: %d locations", i, len(res.Locations))
			continue
		}
		// The fixture's own frames: the location is the innermost.
		var inner *e2e.Frame
		for j := range w.stack {
			if strings.HasSuffix(w.stack[j].File, "export.cc") {
				inner = &w.stack[j]
				break
			}
		}
		if inner == nil {
			continue // a leak of the C++ runtime's, before main
		}
		pl := res.Locations[0].PhysicalLocation
		if pl == nil || pl.Region == nil {
			t.Errorf("result %d: no physical location with a region", i)
			continue
		}
		if pl.ArtifactLocation.URI != "testdata/fixtures/export.cc" || pl.ArtifactLocation.URIBaseID != "%SRCROOT%" {
			t.Errorf("result %d: uri %q base %q, want testdata/fixtures/export.cc under %%SRCROOT%%",
				i, pl.ArtifactLocation.URI, pl.ArtifactLocation.URIBaseID)
		}
		if pl.Region.StartLine != inner.Line {
			t.Errorf("result %d: startLine %d, want %d (%s)", i, pl.Region.StartLine, inner.Line, inner.Function)
		}
		if len(res.CodeFlows) != 1 || len(res.CodeFlows[0].ThreadFlows) != 1 || len(res.CodeFlows[0].ThreadFlows[0].Locations) != len(w.stack) {
			t.Errorf("result %d: the code flow is not the %d frames of the stack", i, len(w.stack))
		}
	}
	if !mismatched {
		t.Errorf("no mismatched free among the results (the fixture deletes a malloc'd block)")
	}

	// The whole log against the SARIF 2.1.0 schema, when python3 has
	// jsonschema.
	schema := filepath.Join(e2e.Root, "testdata", "sarif", "sarif-schema-2.1.0.json")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("schema validation skipped: no python3")
	}
	if exec.Command(py, "-c", "import jsonschema").Run() != nil {
		t.Skip("schema validation skipped: python3 has no jsonschema module")
	}
	log := filepath.Join(t.TempDir(), "leaks.sarif")
	if err := os.WriteFile(log, out, 0o644); err != nil {
		t.Fatal(err)
	}
	check := `import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
errs = list(jsonschema.Draft7Validator(schema).iter_errors(json.load(open(sys.argv[2]))))
for e in errs[:10]:
    print(e.message, "at", "/".join(map(str, e.absolute_path)))
sys.exit(1 if errs else 0)
`
	if b, err := exec.Command(py, "-c", check, schema, log).CombinedOutput(); err != nil {
		t.Errorf("the SARIF log does not validate against the 2.1.0 schema: %v\n%s", err, b)
	}
}

// parseFlamePage parses a flame graph page as a browser would and returns
// its embedded tree; the page must load nothing from elsewhere.
func parseFlamePage(t *testing.T, page []byte) *e2e.FlameNode {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	var data string
	scripts := 0
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		for _, a := range n.Attr {
			if (a.Key == "src" || a.Key == "href") && a.Val != "" {
				t.Errorf("<%s %s=%q>: the page loads something", n.Data, a.Key, a.Val)
			}
			if n.Data == "script" && a.Key == "id" && a.Val == "flame-data" && n.FirstChild != nil {
				data = n.FirstChild.Data
			}
		}
		if n.Data == "script" && n.FirstChild != nil && strings.Contains(n.FirstChild.Data, "function flameGraph(") {
			scripts++
		}
	}
	if scripts != 1 {
		t.Errorf("%d inline scripts define flameGraph, want 1", scripts)
	}
	var root e2e.FlameNode
	if err := json.Unmarshal([]byte(data), &root); err != nil {
		t.Fatalf("the page's flame-data: %v\n%.200s", err, data)
	}
	return &root
}

func TestExportFlamegraph(t *testing.T) {
	trace, rep := e2e.ExportTrace(t)
	tot := rep.Totals
	for _, c := range []struct {
		value string
		want  uint64
	}{{"", tot.LeakedBytes}, {"allocated-bytes", tot.AllocatedBytes}, {"leaked-blocks", tot.LeakedBlocks}, {"allocated-blocks", tot.Allocations}} {
		args := []string{"--format", "flamegraph"}
		if c.value != "" {
			args = append(args, "--value", c.value)
		}
		out := filepath.Join(t.TempDir(), "flame.html")
		e2e.LeakpathReport(t, e2e.Root, append(args, "--output", out, trace)...)
		page, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		tree := parseFlamePage(t, page)
		if tree.Value != c.want {
			t.Errorf("--value %q: the flame graph's total is %d, the JSON report says %d", c.value, tree.Value, c.want)
		}
		// Stack by stack, the tree holds what the collapsed export lists.
		collapsed := e2e.LeakpathReport(t, e2e.Root, append([]string{"--format", "collapsed"}, append(args[2:], trace)...)...)
		want := map[string]uint64{}
		for _, line := range strings.Split(strings.TrimSpace(string(collapsed)), "\n") {
			i := strings.LastIndexByte(line, ' ')
			n, _ := strconv.ParseUint(line[i+1:], 10, 64)
			want[line[:i]] += n
		}
		got := map[string]uint64{}
		e2e.FlameStacks(t, tree, nil, got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("--value %q: the flame graph's stacks:\n%v\nthe collapsed export's:\n%v", c.value, got, want)
		}
		if c.value == "" {
			// The leaks' stacks are there, innermost frame last.
			for _, l := range rep.Leaks {
				names := leakNames(l.Stack)
				slices.Reverse(names)
				if got[strings.Join(names, ";")] == 0 {
					t.Errorf("leak %v not in the flame graph", names)
				}
			}
		}
	}
}
