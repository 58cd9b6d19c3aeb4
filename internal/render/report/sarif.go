package report

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// SARIF 2.1.0 (OASIS), the subset leakpath writes.
const (
	SARIFSchema  = "https://json.schemastore.org/sarif-2.1.0.json"
	SARIFVersion = "2.1.0"
	// sarifRoot is the uriBaseId of paths relative to the source root.
	sarifRoot = "%SRCROOT%"
)

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool              sarifTool                   `json:"tool"`
	OriginalURIBaseID map[string]sarifArtifactLoc `json:"originalUriBaseIds,omitempty"`
	Results           []sarifResult               `json:"results"`
	Invocations       []sarifInvocation           `json:"invocations,omitempty"`
}

type sarifInvocation struct {
	CommandLine         string `json:"commandLine,omitempty"`
	ExecutionSuccessful bool   `json:"executionSuccessful"`
	ExitCode            *int32 `json:"exitCode,omitempty"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri,omitempty"`
	Rules          []sarifRule `json:"rules"`
}

type sarifRule struct {
	ID               string        `json:"id"`
	Name             string        `json:"name"`
	ShortDescription sarifMessage  `json:"shortDescription"`
	DefaultConfig    sarifRuleConf `json:"defaultConfiguration"`
}

type sarifRuleConf struct {
	Level string `json:"level"`
}

type sarifMessage struct {
	Text string `json:"text"`
}

type sarifResult struct {
	RuleID              string             `json:"ruleId"`
	RuleIndex           int                `json:"ruleIndex"`
	Level               string             `json:"level"`
	Message             sarifMessage       `json:"message"`
	Locations           []sarifLocation    `json:"locations"`
	CodeFlows           []sarifCodeFlow    `json:"codeFlows,omitempty"`
	RelatedLocations    []sarifLocation    `json:"relatedLocations,omitempty"`
	PartialFingerprints map[string]string  `json:"partialFingerprints,omitempty"`
	Suppressions        []sarifSuppression `json:"suppressions,omitempty"`
	Properties          map[string]any     `json:"properties,omitempty"`
}

type sarifSuppression struct {
	Kind          string `json:"kind"`
	Justification string `json:"justification,omitempty"`
}

type sarifLocation struct {
	ID               *int           `json:"id,omitempty"`
	PhysicalLocation *sarifPhysical `json:"physicalLocation,omitempty"`
	LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
	Message          *sarifMessage  `json:"message,omitempty"`
	Properties       map[string]any `json:"properties,omitempty"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifactLoc `json:"artifactLocation"`
	Region           *sarifRegion     `json:"region,omitempty"`
	Address          *sarifAddress    `json:"address,omitempty"`
}

type sarifArtifactLoc struct {
	URI       string `json:"uri"`
	URIBaseID string `json:"uriBaseId,omitempty"`
}

type sarifRegion struct {
	StartLine int `json:"startLine"`
}

type sarifAddress struct {
	RelativeAddress int64  `json:"relativeAddress"`
	FullyQualified  string `json:"fullyQualifiedName,omitempty"`
}

type sarifLogical struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

type sarifCodeFlow struct {
	Message     *sarifMessage     `json:"message,omitempty"`
	ThreadFlows []sarifThreadFlow `json:"threadFlows"`
}

type sarifThreadFlow struct {
	Locations []sarifThreadFlowLoc `json:"locations"`
}

type sarifThreadFlowLoc struct {
	Location     sarifLocation `json:"location"`
	NestingLevel int           `json:"nestingLevel"`
}

// sarifRules are the rules of leakpath's findings: per leak kind, then per
// improper use.
var sarifRules = []sarifRule{
	{ID: "leakpath/definite-leak", Name: "DefiniteLeak", ShortDescription: sarifMessage{"Memory definitely lost: no pointer to it remained at exit"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/possible-leak", Name: "PossibleLeak", ShortDescription: sarifMessage{"Memory possibly lost: only pointers into its middle remained at exit"}, DefaultConfig: sarifRuleConf{"warning"}},
	{ID: "leakpath/indirect-leak", Name: "IndirectLeak", ShortDescription: sarifMessage{"Memory indirectly lost: reachable only from lost blocks"}, DefaultConfig: sarifRuleConf{"warning"}},
	{ID: "leakpath/reachable", Name: "StillReachable", ShortDescription: sarifMessage{"Memory not freed at exit but still reachable"}, DefaultConfig: sarifRuleConf{"note"}},
	{ID: "leakpath/leak", Name: "Leak", ShortDescription: sarifMessage{"Memory not freed at exit (no scan classified it)"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/invalid-free", Name: "InvalidFree", ShortDescription: sarifMessage{"Free of an address that is no live heap block"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/double-free", Name: "DoubleFree", ShortDescription: sarifMessage{"Free of a block already freed"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/mismatched-free", Name: "MismatchedFree", ShortDescription: sarifMessage{"Block freed by a function that does not match its allocation (free of new, delete of malloc)"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/invalid-realloc", Name: "InvalidRealloc", ShortDescription: sarifMessage{"Realloc of an address that is no live heap block"}, DefaultConfig: sarifRuleConf{"error"}},
	{ID: "leakpath/pool-destroyed-live", Name: "PoolDestroyedLive", ShortDescription: sarifMessage{"Object of a program's pool still live when the pool was destroyed"}, DefaultConfig: sarifRuleConf{"warning"}},
}

// sarifLeakRule returns the rule index of a leak kind.
func sarifLeakRule(k event.LeakKind) int {
	switch k {
	case event.Definite:
		return 0
	case event.Possible:
		return 1
	case event.Indirect:
		return 2
	case event.Reachable:
		return 3
	}
	return 4
}

// sarifRuleIndex returns the index of rule id (-1: none).
func sarifRuleIndex(id string) int {
	for i, r := range sarifRules {
		if r.ID == id {
			return i
		}
	}
	return -1
}

// sarifContext turns frames into SARIF locations.
type sarifContext struct {
	r    *Report
	root string // absolute, cleaned; "" when unknown
}

// sarif writes the report as a SARIF 2.1.0 log: one result per leak
// group (suppressed ones carry a suppression) and per improper use.
func (r *Report) sarif(w io.Writer) error {
	root := r.opts.SourceRoot
	if root == "" {
		root, _ = os.Getwd()
	}
	if root != "" {
		if abs, err := filepath.Abs(root); err == nil {
			root = abs
		}
	}
	c := &sarifContext{r: r, root: root}
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: "leakpath", InformationURI: "https://github.com/leakpath/leakpath", Rules: sarifRules}},
		Results: []sarifResult{},
	}
	if root != "" {
		u := url.URL{Scheme: "file", Path: filepath.ToSlash(root) + "/"}
		run.OriginalURIBaseID = map[string]sarifArtifactLoc{sarifRoot: {URI: u.String()}}
	}
	for _, p := range r.Images() {
		inv := sarifInvocation{CommandLine: strings.Join(p.Info.Argv, " "), ExecutionSuccessful: true}
		if e := p.End; e != nil && e.Exited {
			code := e.Code
			inv.ExitCode = &code
		}
		run.Invocations = append(run.Invocations, inv)
		for _, l := range r.allLeaks(p) {
			run.Results = append(run.Results, c.leakResult(p, l))
		}
		for _, e := range p.Errors {
			run.Results = append(run.Results, c.errorResult(p, e))
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Schema: SARIFSchema, Version: SARIFVersion, Runs: []sarifRun{run}})
}

func (c *sarifContext) leakResult(p *heap.Process, l leak) sarifResult {
	r := c.r
	idx := sarifLeakRule(l.Kind)
	fs := r.Stack(p, l.Stack)
	what := map[event.LeakKind]string{event.Definite: "definitely lost", event.Possible: "possibly lost",
		event.Indirect: "indirectly lost", event.Reachable: "still reachable"}[l.Kind]
	if what == "" {
		what = "not freed at exit"
	}
	msg := fmt.Sprintf("%s in %s %s", bytes(l.Bytes), plural64(l.Blocks, "block"), what)
	if l.fn != 0 {
		msg += fmt.Sprintf(", allocated by %s", l.fn)
	}
	if i := c.primary(fs); i >= 0 && fs[i].Function != "" {
		msg += " in " + fs[i].Function
	} else if len(fs) > 0 && fs[0].Function != "" {
		msg += " in " + fs[0].Function
	}
	if l.IndirectBytes > 0 {
		msg += fmt.Sprintf(" (and %s in %s indirectly)", bytes(l.IndirectBytes), plural64(l.IndirectBlocks, "block"))
	}
	if rc := r.rootCause(p, l.Stack); rc != nil && (l.Kind != event.Reachable || rc.Status == event.RootCauseFound) {
		var sb strings.Builder
		bw := bufio.NewWriter(&sb)
		r.textRootCause(bw, p, rc)
		bw.Flush()
		msg += ".\n" + strings.TrimSpace(sb.String())
	}
	res := sarifResult{
		RuleID: sarifRules[idx].ID, RuleIndex: idx, Level: sarifRules[idx].DefaultConfig.Level,
		Message:             sarifMessage{msg},
		Locations:           []sarifLocation{c.location(fs, c.primary(fs), "")},
		CodeFlows:           c.codeFlows("allocation stack", fs),
		PartialFingerprints: map[string]string{"leakpath/stack/v1": fingerprint(sarifRules[idx].ID, fs)},
		Properties:          map[string]any{"bytes": l.Bytes, "blocks": l.Blocks, "pid": p.Info.PID, "own": l.own},
	}
	if rc := r.rootCause(p, l.Stack); rc != nil && rc.Status == event.RootCauseFound {
		// The root cause's functions and branches, where code scanning
		// shows them.
		add := func(f Frame, msg string) {
			if f.File == "" || f.Line <= 0 {
				return
			}
			loc := c.location([]Frame{f}, 0, msg)
			id := len(res.RelatedLocations)
			loc.ID = &id
			res.RelatedLocations = append(res.RelatedLocations, loc)
		}
		for _, a := range rc.Functions {
			f := r.codeFrame(p, a)
			add(f, "root cause: the leaking executions part from the freeing ones in "+f.Function)
		}
		for _, b := range rc.Branches {
			way := "not taken"
			if b.LeaksWhenTaken {
				way = "taken"
			}
			add(r.codeFrame(p, b.Addr), "root cause: leaks when this branch is "+way)
		}
	}
	if l.supp != nil {
		res.Suppressions = []sarifSuppression{{Kind: "external", Justification: l.supp.String()}}
	}
	return res
}

func (c *sarifContext) errorResult(p *heap.Process, e heap.Error) sarifResult {
	r := c.r
	id := "leakpath/" + strings.ReplaceAll(e.Kind.String(), "_", "-")
	idx := sarifRuleIndex(id)
	if idx < 0 {
		idx = sarifRuleIndex("leakpath/invalid-free")
		id = sarifRules[idx].ID
	}
	fs := r.Stack(p, e.Stack)
	msg := fmt.Sprintf("%s of 0x%x by %s", strings.ReplaceAll(e.Kind.String(), "_", " "), e.Addr, e.Fn)
	if e.AllocFn != 0 {
		msg += fmt.Sprintf(" (allocated by %s)", e.AllocFn)
	}
	if e.Count > 1 {
		msg += fmt.Sprintf(", %s", plural64(e.Count, "time"))
	}
	res := sarifResult{
		RuleID: id, RuleIndex: idx, Level: sarifRules[idx].DefaultConfig.Level,
		Message:             sarifMessage{msg},
		Locations:           []sarifLocation{c.location(fs, c.primary(fs), "")},
		CodeFlows:           c.codeFlows("stack of the "+e.Fn.String(), fs),
		PartialFingerprints: map[string]string{"leakpath/stack/v1": fingerprint(id, fs)},
		Properties:          map[string]any{"pid": p.Info.PID, "count": e.Count},
	}
	n := 0
	for _, rel := range []struct {
		id   heap.StackID
		what string
	}{{e.AllocStack, "allocated here"}, {e.FreeStack, "freed first here"}} {
		if rel.id == 0 {
			continue
		}
		rfs := r.Stack(p, rel.id)
		if i := c.primary(rfs); i >= 0 {
			loc := c.location(rfs, i, rel.what)
			id := n
			loc.ID = &id
			n++
			res.RelatedLocations = append(res.RelatedLocations, loc)
		}
	}
	return res
}

// primary returns the index of the frame a finding is reported at: the
// innermost frame with a source line under the source root, else in the
// program (no system library, not the agent); -1 if none has a line.
func (c *sarifContext) primary(fs []Frame) int {
	for i, f := range fs {
		if f.File != "" && f.Line > 0 && c.underRoot(f.File) && !systemModule(f.Module) {
			return i
		}
	}
	for i, f := range fs {
		if f.File != "" && f.Line > 0 && !systemModule(f.Module) {
			return i
		}
	}
	return -1
}

// systemModule reports the modules that are not the program's: the agent,
// the C runtime and the system's libraries.
func systemModule(path string) bool {
	b := baseName(path)
	if strings.HasPrefix(b, "libleakpath") || strings.HasPrefix(b, "ld-linux") || strings.HasPrefix(b, "libc.so") ||
		strings.HasPrefix(b, "libstdc++") || strings.HasPrefix(b, "libm.so") || strings.HasPrefix(b, "libgcc_s") {
		return true
	}
	for _, d := range []string{"/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/libexec/"} {
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	return false
}

func (c *sarifContext) underRoot(file string) bool {
	if c.root == "" || !filepath.IsAbs(file) {
		return false
	}
	rel, err := filepath.Rel(c.root, filepath.Clean(file))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// artifact is the SARIF artifact location of a source file of module:
// relative to %SRCROOT% when under it (a relative path of the program's
// own, as compilers run at the root write them, is taken to be), else a
// file: URI (absolute paths) or the path as the debug information has it.
func (c *sarifContext) artifact(file, module string) sarifArtifactLoc {
	if !filepath.IsAbs(file) && c.root != "" && !systemModule(module) && filepath.IsLocal(file) {
		return sarifArtifactLoc{URI: (&url.URL{Path: filepath.ToSlash(filepath.Clean(file))}).String(), URIBaseID: sarifRoot}
	}
	if c.underRoot(file) {
		rel, _ := filepath.Rel(c.root, filepath.Clean(file))
		return sarifArtifactLoc{URI: (&url.URL{Path: filepath.ToSlash(rel)}).String(), URIBaseID: sarifRoot}
	}
	if filepath.IsAbs(file) {
		return sarifArtifactLoc{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Clean(file))}).String()}
	}
	return sarifArtifactLoc{URI: (&url.URL{Path: filepath.ToSlash(file)}).String()}
}

// location is frame i of fs (-1: none has a line: the innermost frame, in
// its module) as a SARIF location.
func (c *sarifContext) location(fs []Frame, i int, msg string) sarifLocation {
	var loc sarifLocation
	if msg != "" {
		loc.Message = &sarifMessage{msg}
	}
	if len(fs) == 0 {
		return loc
	}
	f := fs[0]
	if i >= 0 {
		f = fs[i]
	}
	if f.Function != "" {
		loc.LogicalLocations = []sarifLogical{{Name: f.Function, Kind: "function"}}
	}
	switch {
	case f.File != "" && f.Line > 0:
		loc.PhysicalLocation = &sarifPhysical{ArtifactLocation: c.artifact(f.File, f.Module), Region: &sarifRegion{StartLine: f.Line}}
	case f.Module != "":
		loc.PhysicalLocation = &sarifPhysical{ArtifactLocation: c.artifact(f.Module, f.Module),
			Address: &sarifAddress{RelativeAddress: int64(f.Offset), FullyQualified: FoldedFrame(f)}}
	}
	return loc
}

// codeFlows is the whole stack as one thread flow, outermost first.
func (c *sarifContext) codeFlows(what string, fs []Frame) []sarifCodeFlow {
	if len(fs) == 0 {
		return nil
	}
	tf := sarifThreadFlow{}
	for i := len(fs) - 1; i >= 0; i-- {
		loc := c.location(fs, i, fs[i].String())
		tf.Locations = append(tf.Locations, sarifThreadFlowLoc{Location: loc, NestingLevel: len(fs) - 1 - i})
	}
	return []sarifCodeFlow{{Message: &sarifMessage{what}, ThreadFlows: []sarifThreadFlow{tf}}}
}

// fingerprint identifies a finding across runs: its rule and its stack's
// functions, not its addresses.
func fingerprint(rule string, fs []Frame) string {
	h := sha256.New()
	h.Write([]byte(rule))
	for _, f := range fs {
		fmt.Fprintf(h, "\x00%s", FoldedFrame(f))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
