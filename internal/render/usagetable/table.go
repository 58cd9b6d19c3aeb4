// Package usagetable writes the heap use per unit that the engine of
// internal/analysis/usage counted: a table per image (leakpath report
// --by, leakpath run --by), or leakpath.usage/v1 JSON (docs/json.md). New
// builds the tables from an engine and the leak report of the same
// model, which names the images, converts times and resolves stacks;
// Report.Generate writes them.
package usagetable

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/usage"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/symbols/frame"
)

// Schema names the JSON usage format.
const Schema = "leakpath.usage/v1"

// Report is the heap use of a run per unit, ready to be written.
type Report struct {
	By          usage.By
	Attribution usage.Attribution // 0 for units by thread and site
	Interval    time.Duration
	PerCall     bool    // rows are invocations of entry units
	Images      []Image // the main program's first, as the leak report lists them
	Warnings    []string
	// MaxUnits bounds the rows of each text table (JSON has all); 0: 30.
	MaxUnits int
}

// Image is the heap use of one process image.
type Image struct {
	Command   []string
	PID       int32
	Name      string // the program, as the leak report names it
	Outcome   string // how it ended, in words
	Units     []Unit // by current bytes, then allocated bytes, biggest first (scopes: allocated bytes)
	Intervals []Interval
	// ScopeAnomalies: units by scope: scope records that did not pair up.
	ScopeAnomalies uint64
}

// Unit is the heap use of one unit. Byte counts are the sizes the program
// asked for.
type Unit struct {
	Name string
	// Kind of a library unit: usage.KindExecutable, KindRuntime,
	// KindLibrary or KindUnknown; "" for others.
	Kind   string
	Module string // function units: the module's path
	// Thread units: the thread, its name ("" if unknown), and when it
	// started and exited in seconds since the image started (nil:
	// unknown, or still running at the end).
	TID                     int32
	ThreadName              string
	ThreadStart, ThreadExit *float64
	Stack                   []frame.Frame // site units: the allocation stack
	Site                    uint32        // site units: the stack's id in the image (names may repeat)
	// Per-call rows: the invocation's number (from 1; 0: not a per-call
	// row), its thread, and when its first and last allocator calls came
	// (seconds since the image started).
	Call                int
	CallTID             int32
	CallFirst, CallLast float64
	// Scope is a scope unit's row (nil for other units).
	Scope *report.ScopeRow
	// Type units: where the type is defined.
	TypeFile string
	TypeLine int

	CurrentBytes, CurrentBlocks     int64
	InheritedBytes, InheritedBlocks int64 // a fork child's, at its start
	MinBytes, MaxBytes              int64
	MinSeconds, MaxSeconds          float64 // when first reached
	AllocatedBytes, AllocatedBlocks uint64
	FreedBytes, FreedBlocks         uint64
	Calls                           [event.NumFn]uint64
}

// Interval is the heap use during one time slice: [Start, End) since the
// image started.
type Interval struct {
	Start, End time.Duration
	Units      []IntervalUnit // the units that did something in it
}

// IntervalUnit is what one unit did during an interval.
type IntervalUnit struct {
	Name                            string
	Site                            uint32 // site units, as in Unit
	NetBytes, NetBlocks             int64  // change of the net size
	CurrentBytes, CurrentBlocks     int64  // the net size at the end
	MinBytes, MaxBytes              int64  // of the net size within
	AllocatedBytes, AllocatedBlocks uint64
	FreedBytes, FreedBlocks         uint64
	Calls                           [event.NumFn]uint64
}

// New builds the tables of the units e counted in the images rep
// reports (rep resolves times and the stacks of units by site; it may be
// a report of the same model made after the run).
func New(e *usage.Engine, rep *report.Report) *Report {
	opts := e.Options()
	out := &Report{By: opts.By, Interval: opts.Interval, PerCall: opts.PerCall}
	if opts.By == usage.ByLibrary || opts.By == usage.ByFunction {
		out.Attribution = opts.Attribution
	}
	typed := false
	for _, p := range rep.Images() {
		out.Images = append(out.Images, imageReport(e, rep, p))
		typed = typed || (p.Scan != nil && p.Scan.Typed)
	}
	if opts.By.Typed() && !typed {
		out.Warnings = append(out.Warnings, "no scan typed the blocks: record with 'leakpath run --types'")
	}
	if opts.PerCall && e.FoldedAggregates() > 0 {
		out.Warnings = append(out.Warnings, "the trace has short-lived blocks folded by the agent: each aggregate counts in the invocation its thread was in when the agent wrote it, which may be a later one (record with --fold=false for exact rows per call)")
	}
	return out
}

func imageReport(e *usage.Engine, rep *report.Report, p *heap.Process) Image {
	opts := e.Options()
	img := Image{Command: p.Info.Argv, PID: p.Info.PID, Name: report.CommandName(p), Outcome: rep.Outcome(p), Units: []Unit{}}
	if opts.By == usage.ByScope {
		return scopeImage(rep, p, img)
	}
	if opts.By.Typed() {
		return typeImage(rep, p, img, opts.By)
	}
	units := e.Units(p)
	if units == nil {
		return img
	}
	secs := func(t uint64) float64 { return rep.Seconds(p, t) }
	var from []int // of each row: its index in units
	for k := range units {
		u := &units[k]
		if opts.PerCall && u.Call == 0 && u.AllocatedBlocks == 0 && u.InheritedBlocks == 0 && u.Calls == ([event.NumFn]uint64{}) {
			continue // an entry unit only named by its invocations
		}
		r := Unit{
			Name: u.Name, Kind: u.Kind, Module: u.Module, Site: uint32(u.Site),
			CurrentBytes: u.CurrentBytes, CurrentBlocks: u.CurrentBlocks,
			InheritedBytes: u.InheritedBytes, InheritedBlocks: u.InheritedBlocks,
			MinBytes: u.MinBytes, MaxBytes: u.MaxBytes, MinSeconds: secs(u.MinTime), MaxSeconds: secs(u.MaxTime),
			AllocatedBytes: u.AllocatedBytes, AllocatedBlocks: u.AllocatedBlocks,
			FreedBytes: u.FreedBytes, FreedBlocks: u.FreedBlocks, Calls: u.Calls,
		}
		if opts.By == usage.BySite && u.Site != 0 {
			r.Stack = rep.Stack(p, u.Site)
			if len(r.Stack) > 0 {
				r.Name = r.Stack[0].String()
			}
		}
		if u.Call > 0 {
			r.Name = fmt.Sprintf("%s call %d", u.Name, u.Call)
			r.Call, r.CallTID, r.CallFirst, r.CallLast = u.Call, u.CallTID, secs(u.CallFirst), secs(u.CallLast)
		}
		if opts.By == usage.ByThread {
			r.TID = u.TID
			r.Name = fmt.Sprintf("tid %d", u.TID)
			if t := p.Threads[u.TID]; t != nil {
				r.ThreadName = t.Name
				if t.Name != "" {
					r.Name = fmt.Sprintf("%s (tid %d)", t.Name, u.TID)
				}
				if t.Start != 0 {
					s := secs(t.Start)
					r.ThreadStart = &s
				}
				if t.Exit != 0 {
					s := secs(t.Exit)
					r.ThreadExit = &s
				}
			}
		}
		img.Units = append(img.Units, r)
		from = append(from, k)
	}
	names := make([]string, len(units))
	for i := range img.Units {
		names[from[i]] = img.Units[i].Name
	}
	less := unitLess
	if opts.PerCall {
		less = callLess
	}
	order := sortUnits(img.Units, less)
	for i, k := range order {
		order[i] = from[k]
	}
	if opts.Interval > 0 {
		img.Intervals = intervals(opts.Interval, units, order, names)
	}
	return img
}

// sortUnits sorts units by current bytes, then allocated bytes, biggest
// first, then by name; it returns, for each sorted position, the unit's
// index before.
func sortUnits(us []Unit, less func(a, b *Unit) bool) []int {
	order := make([]int, len(us))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return less(&us[order[i]], &us[order[j]]) })
	sorted := make([]Unit, len(us))
	for i, k := range order {
		sorted[i] = us[k]
	}
	copy(us, sorted)
	return order
}

func unitLess(a, b *Unit) bool {
	if a.CurrentBytes != b.CurrentBytes {
		return a.CurrentBytes > b.CurrentBytes
	}
	if a.AllocatedBytes != b.AllocatedBytes {
		return a.AllocatedBytes > b.AllocatedBytes
	}
	return a.Name < b.Name
}

// callLess orders per-call rows by when they started (rows that are not
// invocations, such as blocks a fork child inherited, first).
func callLess(a, b *Unit) bool {
	if a.Call == 0 || b.Call == 0 {
		if (a.Call == 0) != (b.Call == 0) {
			return a.Call == 0
		}
		return unitLess(a, b)
	}
	if a.CallFirst != b.CallFirst {
		return a.CallFirst < b.CallFirst
	}
	return a.Name < b.Name
}

// intervals lists the slices of length interval in which something
// happened; units within in the order of the whole-run table (order:
// indexes in units), named as there (names, by index in units).
func intervals(interval time.Duration, units []usage.UnitCounts, order []int, names []string) []Interval {
	var idxs []uint64
	seen := map[uint64]int{}
	for _, u := range units {
		for _, s := range u.Slices {
			if _, ok := seen[s.Index]; !ok {
				seen[s.Index] = 0
				idxs = append(idxs, s.Index)
			}
		}
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	out := make([]Interval, len(idxs))
	for i, idx := range idxs {
		seen[idx] = i
		out[i] = Interval{Start: time.Duration(idx) * interval, End: time.Duration(idx+1) * interval}
	}
	for _, k := range order {
		u := &units[k]
		for _, s := range u.Slices {
			iv := &out[seen[s.Index]]
			iv.Units = append(iv.Units, IntervalUnit{
				Name: names[k], Site: uint32(u.Site), NetBytes: s.NetBytes, NetBlocks: s.NetBlocks,
				CurrentBytes: s.CurrentBytes, CurrentBlocks: s.CurrentBlocks, MinBytes: s.MinBytes, MaxBytes: s.MaxBytes,
				AllocatedBytes: s.AllocatedBytes, AllocatedBlocks: s.AllocatedBlocks,
				FreedBytes: s.FreedBytes, FreedBlocks: s.FreedBlocks, Calls: s.Calls,
			})
		}
	}
	return out
}

// Generate writes the report in format "text" or "json".
func (r *Report) Generate(w io.Writer, format string) error {
	switch format {
	case "text", "":
		return r.text(w)
	case "json":
		return r.json(w)
	}
	return fmt.Errorf("usage: unknown format %q (want text or json)", format)
}

// The JSON shapes of docs/json.md. Field names are a contract: add fields,
// never rename them.
type jsonReport struct {
	Schema      string `json:"schema"`
	By          string `json:"by"`
	Attribution string `json:"attribution"`
	IntervalNS  int64  `json:"interval_ns,omitempty"`
	PerCall     bool   `json:"per_call,omitempty"`
	jsonImage
	Processes []jsonImage `json:"processes,omitempty"`
	Warnings  []string    `json:"warnings,omitempty"`
}

type jsonImage struct {
	Command   []string       `json:"command"`
	PID       int32          `json:"pid"`
	Units     []jsonUnit     `json:"units"`
	Intervals []jsonInterval `json:"intervals"`
}

type jsonUnit struct {
	Name               string             `json:"name"`
	Kind               string             `json:"kind,omitempty"`
	Module             string             `json:"module,omitempty"`
	TID                int32              `json:"tid,omitempty"`
	ThreadName         string             `json:"thread_name,omitempty"`
	ThreadStartSeconds *float64           `json:"thread_start_seconds,omitempty"`
	ThreadExitSeconds  *float64           `json:"thread_exit_seconds,omitempty"`
	CurrentBytes       int64              `json:"current_bytes"`
	CurrentBlocks      int64              `json:"current_blocks"`
	InheritedBytes     int64              `json:"inherited_bytes,omitempty"`
	InheritedBlocks    int64              `json:"inherited_blocks,omitempty"`
	MinBytes           int64              `json:"min_bytes"`
	MinSeconds         float64            `json:"min_seconds"`
	MaxBytes           int64              `json:"max_bytes"`
	MaxSeconds         float64            `json:"max_seconds"`
	AllocatedBytes     uint64             `json:"allocated_bytes"`
	AllocatedBlocks    uint64             `json:"allocated_blocks"`
	FreedBytes         uint64             `json:"freed_bytes"`
	FreedBlocks        uint64             `json:"freed_blocks"`
	Calls              map[string]uint64  `json:"calls"`
	Stack              []report.JSONFrame `json:"stack,omitempty"`
	Site               uint32             `json:"site,omitempty"`
	Call               int                `json:"call,omitempty"`
	CallTID            int32              `json:"call_tid,omitempty"`
	CallFirstSeconds   *float64           `json:"call_first_seconds,omitempty"`
	CallLastSeconds    *float64           `json:"call_last_seconds,omitempty"`
	// Units by scope: the scope's own fields.
	*report.JSONScope
	// Units by type: where the type is defined.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}

type jsonInterval struct {
	StartNS int64              `json:"start_ns"`
	EndNS   int64              `json:"end_ns"`
	Units   []jsonIntervalUnit `json:"units"`
}

type jsonIntervalUnit struct {
	Name            string            `json:"name"`
	Site            uint32            `json:"site,omitempty"`
	NetBytes        int64             `json:"net_bytes"`
	NetBlocks       int64             `json:"net_blocks"`
	CurrentBytes    int64             `json:"current_bytes"`
	CurrentBlocks   int64             `json:"current_blocks"`
	MinBytes        int64             `json:"min_bytes"`
	MaxBytes        int64             `json:"max_bytes"`
	AllocatedBytes  uint64            `json:"allocated_bytes"`
	AllocatedBlocks uint64            `json:"allocated_blocks"`
	FreedBytes      uint64            `json:"freed_bytes"`
	FreedBlocks     uint64            `json:"freed_blocks"`
	Calls           map[string]uint64 `json:"calls"`
}

func (r *Report) attributionName() string {
	if r.Attribution == 0 {
		return "none"
	}
	return r.Attribution.String()
}

func (r *Report) json(w io.Writer) error {
	out := jsonReport{Schema: Schema, By: r.By.String(), Attribution: r.attributionName(),
		IntervalNS: int64(r.Interval), PerCall: r.PerCall, Warnings: r.Warnings}
	out.Units, out.Intervals = []jsonUnit{}, []jsonInterval{}
	for i := range r.Images {
		ji := jsonImageOf(&r.Images[i])
		if i == 0 {
			out.jsonImage = ji
		}
		if len(r.Images) > 1 {
			out.Processes = append(out.Processes, ji)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func jsonImageOf(img *Image) jsonImage {
	ji := jsonImage{Command: img.Command, PID: img.PID, Units: []jsonUnit{}, Intervals: []jsonInterval{}}
	for i := range img.Units {
		u := &img.Units[i]
		ju := jsonUnit{
			Name: u.Name, Kind: u.Kind, Module: u.Module, TID: u.TID, ThreadName: u.ThreadName,
			ThreadStartSeconds: u.ThreadStart, ThreadExitSeconds: u.ThreadExit,
			CurrentBytes: u.CurrentBytes, CurrentBlocks: u.CurrentBlocks,
			InheritedBytes: u.InheritedBytes, InheritedBlocks: u.InheritedBlocks,
			MinBytes: u.MinBytes, MinSeconds: u.MinSeconds, MaxBytes: u.MaxBytes, MaxSeconds: u.MaxSeconds,
			AllocatedBytes: u.AllocatedBytes, AllocatedBlocks: u.AllocatedBlocks,
			FreedBytes: u.FreedBytes, FreedBlocks: u.FreedBlocks, Calls: report.CallsJSON(&u.Calls), Site: u.Site,
			File: u.TypeFile, Line: u.TypeLine,
		}
		if u.Call > 0 {
			first, last := u.CallFirst, u.CallLast
			ju.Call, ju.CallTID, ju.CallFirstSeconds, ju.CallLastSeconds = u.Call, u.CallTID, &first, &last
		}
		if u.Stack != nil {
			ju.Stack = report.JSONFrames(u.Stack)
		}
		if u.Scope != nil {
			js := u.Scope.JSON()
			ju.JSONScope = &js
		}
		ji.Units = append(ji.Units, ju)
	}
	for _, iv := range img.Intervals {
		jv := jsonInterval{StartNS: int64(iv.Start), EndNS: int64(iv.End), Units: []jsonIntervalUnit{}}
		for i := range iv.Units {
			u := &iv.Units[i]
			jv.Units = append(jv.Units, jsonIntervalUnit{
				Name: u.Name, Site: u.Site, NetBytes: u.NetBytes, NetBlocks: u.NetBlocks,
				CurrentBytes: u.CurrentBytes, CurrentBlocks: u.CurrentBlocks,
				MinBytes: u.MinBytes, MaxBytes: u.MaxBytes,
				AllocatedBytes: u.AllocatedBytes, AllocatedBlocks: u.AllocatedBlocks,
				FreedBytes: u.FreedBytes, FreedBlocks: u.FreedBlocks, Calls: report.CallsJSON(&u.Calls),
			})
		}
		ji.Intervals = append(ji.Intervals, jv)
	}
	return ji
}

// scopeImage fills img with the scopes of p, as the model counted them
// (units by scope need no observing: heap.Process.Scopes).
func scopeImage(rep *report.Report, p *heap.Process, img Image) Image {
	img.ScopeAnomalies = p.ScopeAnomalies
	rows := rep.Scopes(p)
	for i := range rows {
		row := &rows[i]
		img.Units = append(img.Units, Unit{
			Name: row.Name, CurrentBytes: int64(row.LiveBytes), CurrentBlocks: int64(row.LiveBlocks),
			MaxBytes: int64(row.MaxLiveBytes), MaxSeconds: row.MaxLiveSeconds,
			AllocatedBytes: row.AllocBytes, AllocatedBlocks: row.AllocBlocks,
			FreedBytes: row.FreedBytes, FreedBlocks: row.FreedBlocks, Calls: row.Calls, Scope: row,
		})
	}
	return img
}

// typeImage fills img with the live blocks of p's last typed scan, by
// type, the module or source file that allocated them, or namespace:
// current bytes and blocks are those at the scan.
func typeImage(rep *report.Report, p *heap.Process, img Image, by usage.By) Image {
	units := map[string]*Unit{}
	add := func(name string, bytes, blocks uint64) *Unit {
		u := units[name]
		if u == nil {
			u = &Unit{Name: name}
			units[name] = u
		}
		u.CurrentBytes += int64(bytes)
		u.CurrentBlocks += int64(blocks)
		return u
	}
	for _, row := range rep.TypeTable(p) {
		switch by {
		case usage.ByType:
			u := add(row.Name, row.Bytes, row.Blocks)
			u.TypeFile, u.TypeLine = row.File, row.Line
		case usage.ByNamespace:
			add(namespace(row), row.Bytes, row.Blocks)
		default:
			for _, s := range row.Sites {
				name := "(no stack)"
				if fs := rep.Stack(p, s.Stack); len(fs) > 0 {
					name = fs[0].Module
					if by == usage.ByTypeFile {
						name = fs[0].File
						if name == "" {
							name = "(no file: " + filepath.Base(fs[0].Module) + ")"
						}
					}
				}
				add(name, s.Bytes, s.Blocks)
			}
		}
	}
	for _, u := range units {
		u.MaxBytes = u.CurrentBytes
		img.Units = append(img.Units, *u)
	}
	sort.Slice(img.Units, func(i, j int) bool {
		a, b := img.Units[i], img.Units[j]
		if a.CurrentBytes != b.CurrentBytes {
			return a.CurrentBytes > b.CurrentBytes
		}
		return a.Name < b.Name
	})
	return img
}

// namespace is the namespace of a type row's type: its qualified name
// but the last part (templates' arguments aside); "(global namespace)"
// for none, "(unknown type)" for blocks of unknown type.
func namespace(row report.TypeRow) string {
	if row.Unknown {
		return "(unknown type)"
	}
	name, depth, cut := row.Name, 0, -1
	for i := 0; i+1 < len(name); i++ {
		switch name[i] {
		case '<', '(':
			depth++
		case '>', ')':
			depth--
		case ':':
			if depth == 0 && name[i+1] == ':' {
				cut = i
			}
		}
	}
	if cut < 0 {
		return "(global namespace)"
	}
	return name[:cut]
}
