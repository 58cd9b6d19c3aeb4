package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
)

// Schema names the JSON report format.
const Schema = "leakpath.report/v1"

// The JSON shapes of DESIGN.md §4. Field names are a contract: add fields,
// never rename them.
type jsonReport struct {
	Schema string `json:"schema"`
	jsonImage
	Processes []jsonImage `json:"processes,omitempty"`
	Trace     string      `json:"trace,omitempty"`
	Rank      *int        `json:"rank,omitempty"` // the MPI rank
	Warnings  []string    `json:"warnings,omitempty"`
}

type jsonImage struct {
	Command   []string    `json:"command"`
	PID       int32       `json:"pid"`
	Exit      jsonExit    `json:"exit"`
	ElapsedS  float64     `json:"elapsed_seconds,omitempty"`
	Totals    jsonTotals  `json:"totals"`
	Leaks     []jsonLeak  `json:"leaks"`
	Errors    []jsonError `json:"errors"`
	Anomalies uint64      `json:"anomalies,omitempty"`
}

type jsonExit struct {
	Code   *int32 `json:"code"`
	Signal string `json:"signal"`
	Execd  bool   `json:"exec,omitempty"`
}

type jsonTotals struct {
	Calls                map[string]uint64 `json:"calls"`
	Allocations          uint64            `json:"allocations"`
	Frees                uint64            `json:"frees"`
	AllocatedBytes       uint64            `json:"allocated_bytes"`
	PeakBytes            uint64            `json:"peak_bytes"`
	PeakSeconds          float64           `json:"peak_seconds"`
	LeakedBytes          uint64            `json:"leaked_bytes"`
	LeakedBlocks         uint64            `json:"leaked_blocks"`
	TemporaryAllocations uint64            `json:"temporary_allocations"`
	FailedAllocations    uint64            `json:"failed_allocations"`
}

type jsonFrame struct {
	Address  string `json:"address"`
	Module   string `json:"module"`
	Offset   string `json:"offset"`
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Inlined  bool   `json:"inlined"`
}

type jsonLeak struct {
	Kind      string      `json:"kind"`
	Bytes     uint64      `json:"bytes"`
	Blocks    uint64      `json:"blocks"`
	Function  string      `json:"function,omitempty"`
	Allocs    uint64      `json:"site_allocations"`
	Stack     []jsonFrame `json:"stack"`
	RootCause any         `json:"root_cause"`
	// In the summary of several traces: how many had this group, and
	// the ranks of those that had a rank.
	TraceCount int   `json:"trace_count,omitempty"`
	Ranks      []int `json:"ranks,omitempty"`
}

type jsonError struct {
	Kind       string      `json:"kind"`
	Address    string      `json:"address"`
	Count      uint64      `json:"count"`
	Function   string      `json:"function"`
	AllocFn    string      `json:"alloc_function,omitempty"`
	Stack      []jsonFrame `json:"stack"`
	AllocStack []jsonFrame `json:"alloc_stack"`
	FreeStack  []jsonFrame `json:"free_stack,omitempty"`
	TraceCount int         `json:"trace_count,omitempty"` // as in jsonLeak
	Ranks      []int       `json:"ranks,omitempty"`
}

func (r *Report) json(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.jsonReport())
}

func (r *Report) jsonReport() jsonReport {
	out := jsonReport{Schema: Schema, Trace: r.opts.TracePath, Rank: r.opts.Rank}
	imgs := r.Images()
	for i, p := range imgs {
		ji := r.jsonImage(p)
		if i == 0 {
			ji.ElapsedS = r.opts.Elapsed.Seconds()
			out.jsonImage = ji
		}
		if len(imgs) > 1 {
			out.Processes = append(out.Processes, ji)
		}
	}
	if len(imgs) == 0 {
		out.jsonImage = jsonImage{Leaks: []jsonLeak{}, Errors: []jsonError{}, Totals: jsonTotals{Calls: map[string]uint64{}}}
	}
	// Last: symbolizing the stacks above may have warned.
	out.Warnings = r.warnings
	if note := r.linesNote(); note != "" {
		out.Warnings = append(out.Warnings, note)
	}
	return out
}

func (r *Report) jsonImage(p *heap.Process) jsonImage {
	t := &p.Totals
	ji := jsonImage{
		Command: p.Info.Argv, PID: p.Info.PID, Anomalies: p.Anomalies,
		Totals: jsonTotals{
			Calls: map[string]uint64{}, Allocations: t.Allocations, Frees: t.Frees,
			AllocatedBytes: t.AllocatedBytes, PeakBytes: t.PeakBytes, PeakSeconds: r.seconds(p, t.PeakTime),
			LeakedBytes: t.LiveBytes, LeakedBlocks: t.LiveBlocks,
			TemporaryAllocations: t.Temporary, FailedAllocations: t.FailedAllocs,
		},
		Leaks: []jsonLeak{}, Errors: []jsonError{},
	}
	for fn := event.Fn(1); fn < event.NumFn; fn++ {
		if fn == event.ReallocArray && t.Calls[fn] == 0 {
			continue
		}
		ji.Totals.Calls[event.FnNames[fn]] = t.Calls[fn]
	}
	if e := p.End; e != nil {
		switch {
		case e.ExecdOut:
			ji.Exit.Execd = true
		case e.Exited:
			c := e.Code
			ji.Exit.Code = &c
		case e.Signal != 0:
			ji.Exit.Signal = signalName(e.Signal)
		case p.ExitStatus != nil:
			ji.Exit.Code = p.ExitStatus
		}
	}
	leaks := p.Leaks()
	if execd(p) {
		leaks = nil // exec discarded the heap
	}
	for _, g := range leaks {
		l := jsonLeak{Kind: "unclassified", Bytes: g.Bytes, Blocks: g.Blocks, Stack: r.jsonStack(p, g.Stack)}
		if s := p.Site(g.Stack); s != nil {
			l.Function, l.Allocs = s.Fn.String(), s.Allocs
		}
		ji.Leaks = append(ji.Leaks, l)
	}
	for _, e := range p.Errors {
		je := jsonError{Kind: e.Kind.String(), Address: fmt.Sprintf("0x%x", e.Addr), Count: e.Count,
			Function: e.Fn.String(), Stack: r.jsonStack(p, e.Stack), AllocStack: r.jsonStack(p, e.AllocStack)}
		if e.AllocFn != 0 {
			je.AllocFn = e.AllocFn.String()
		}
		if e.FreeStack != 0 {
			je.FreeStack = r.jsonStack(p, e.FreeStack)
		}
		ji.Errors = append(ji.Errors, je)
	}
	return ji
}

func (r *Report) jsonStack(p *heap.Process, id heap.StackID) []jsonFrame {
	out := []jsonFrame{}
	for _, f := range r.Stack(p, id) {
		out = append(out, jsonFrame{
			Address: fmt.Sprintf("0x%x", f.Address), Module: f.Module, Offset: fmt.Sprintf("0x%x", f.Offset),
			Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined,
		})
	}
	return out
}
