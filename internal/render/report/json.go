package report

import (
	"fmt"
	"io"
	"strconv"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// Schema names the JSON report format.
const Schema = "leakpath.report/v1"

// The JSON shapes of docs/json.md. Field names are a contract: add fields,
// never rename them.
type jsonReport struct {
	Schema string `json:"schema"`
	jsonImage
	Processes []jsonImage `json:"processes,omitempty"`
	Trace     string      `json:"trace,omitempty"`
	Rank      *int        `json:"rank,omitempty"` // the MPI rank
	// Snapshot: the report is of a running program (leakpath snapshot).
	Snapshot bool `json:"snapshot,omitempty"`
	// Of a snapshot the program asked for (leakpath_snapshot,
	// leakpath_leak_check): its label, whether it is a leak check, and
	// the thread that asked.
	Label     string   `json:"label,omitempty"`
	LeakCheck bool     `json:"leak_check,omitempty"`
	AskedBy   int      `json:"asked_by_tid,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
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
	// Attached: recorded from `leakpath attach` on: every number covers
	// only the time since the attach.
	Attached bool `json:"attached,omitempty"`
	// Scan: the scan at exit that classified the leaks; ScanError: why
	// there was none.
	Scan      *jsonScan `json:"scan,omitempty"`
	ScanError string    `json:"scan_error,omitempty"`
	// LeakCheckOff: the program's __lsan_is_turned_off returned nonzero:
	// no leak check, no leaks listed.
	LeakCheckOff bool `json:"leak_check_off,omitempty"`
	// Scopes: what each scope name did (LEAKPATH_SCOPE), the most
	// allocated first; absent when the image entered none.
	Scopes         []jsonScope `json:"scopes,omitempty"`
	ScopeAnomalies uint64      `json:"scope_anomalies,omitempty"`
	// StaleWatch: the figures of --stale, when it read any epoch.
	StaleWatch *jsonStaleWatch `json:"stale_watch,omitempty"`
	// Types: the type table of a typed scan (run --types).
	Types *jsonTypes `json:"types,omitempty"`
	// Allocators: the allocators other than glibc's the image used, and
	// how their calls were recorded.
	Allocators []Allocator `json:"allocators,omitempty"`
}

type jsonExit struct {
	Code   *int32 `json:"code"`
	Signal string `json:"signal"`
	Execd  bool   `json:"exec,omitempty"`
	// Detached: recording stopped by `leakpath detach`; the process runs
	// on (Code is null).
	Detached bool `json:"detached,omitempty"`
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
	// FoldedPairs: allocations freed soon by their thread, counted in
	// allocations and frees one aggregate at a time (run --fold); the
	// peak counts them through their threads' pending highs.
	FoldedPairs uint64 `json:"folded_pairs,omitempty"`
	// UnknownFrees: frees of blocks allocated before the attach.
	UnknownFrees uint64 `json:"unknown_frees,omitempty"`
	// ByKind sums the leaks per kind when a scan classified them;
	// suppressed leaks count in Suppressed only.
	ByKind     map[string]KindTotal `json:"by_kind,omitempty"`
	Suppressed *KindTotal           `json:"suppressed,omitempty"`
}

// jsonScan is what the scan at exit cost.
type jsonScan struct {
	PauseSeconds float64 `json:"pause_seconds"`
	RootBytes    uint64  `json:"root_bytes"`
	HeapBytes    uint64  `json:"heap_bytes"`
}

type jsonFrame struct {
	Address  string `json:"address"`
	Module   string `json:"module"`
	Offset   string `json:"offset"`
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Inlined  bool   `json:"inlined"`
	// enc: where the writer keeps the frame as written; shared by
	// every stack the frame is in (see jsonStack).
	enc *frameEnc
}

type jsonLeak struct {
	Kind      string         `json:"kind"`
	Bytes     uint64         `json:"bytes"`
	Blocks    uint64         `json:"blocks"`
	Function  string         `json:"function,omitempty"`
	Allocs    uint64         `json:"site_allocations"`
	Stack     []jsonFrame    `json:"stack"`
	RootCause *jsonRootCause `json:"root_cause"`
	// lazy: the stack is runs, which writeJSON writes as Stack (see
	// jsonReportOf).
	lazy bool
	runs []frameRun
	// IndirectBytes and IndirectBlocks: for a definite leak, what is
	// lost with it. Owner: for an indirect leak, the allocation stack of
	// a definite leak that holds it.
	IndirectBytes  uint64      `json:"indirect_bytes,omitempty"`
	IndirectBlocks uint64      `json:"indirect_blocks,omitempty"`
	Owner          []jsonFrame `json:"owner,omitempty"`
	// Suppressed is the suppression that hides this leak.
	Suppressed string `json:"suppressed,omitempty"`
	// Own: allocated by the user's code (docs/own-code.md); else Library
	// is the module it is attributed to and During the function the
	// user's code called that led there. FoldedStacks: how many
	// allocation stacks, differing only in return addresses inside
	// functions without debug information, the group stands for (Stack
	// is the biggest one's).
	Own          bool   `json:"own"`
	Library      string `json:"library,omitempty"`
	During       string `json:"during,omitempty"`
	FoldedStacks int    `json:"folded_stacks,omitempty"`
	// In the summary of several traces: how many had this group, and
	// the ranks of those that had a rank.
	TraceCount int   `json:"trace_count,omitempty"`
	Ranks      []int `json:"ranks,omitempty"`
	// A "stale" entry (--stale): the sampled blocks of the site untouched
	// for T2 epochs or more (Blocks, Bytes; StaleBlocks each), the oldest
	// one's age, the latest last access (seconds since the start), and
	// the extrapolation to the site's live blocks.
	AgeEpochs       uint32           `json:"age_epochs,omitempty"`
	LastAccess      *float64         `json:"last_access,omitempty"`
	Sampled         bool             `json:"sampled,omitempty"`
	Watched         int              `json:"watched_blocks,omitempty"`
	SiteLiveBlocks  uint64           `json:"site_live_blocks,omitempty"`
	StaleShare      float64          `json:"stale_share,omitempty"`
	EstimatedBlocks uint64           `json:"estimated_blocks,omitempty"`
	EstimatedBytes  uint64           `json:"estimated_bytes,omitempty"`
	StaleBlocks     []jsonStaleBlock `json:"stale_blocks,omitempty"`
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
	// FreeCallSite: free_stack is the first free's call site alone.
	FreeCallSite bool  `json:"free_stack_call_site_only,omitempty"`
	TraceCount   int   `json:"trace_count,omitempty"` // as in jsonLeak
	Ranks        []int `json:"ranks,omitempty"`
}

func (r *Report) json(w io.Writer) error {
	return writeJSON(w, r.jsonReportOf(true))
}

// jsonReport is the report's JSON with every stack a slice of frames of
// its own (for merging and comparing reports).
func (r *Report) jsonReport() jsonReport { return r.jsonReportOf(false) }

// jsonReportOf: with lazy, the leaks' stacks are left as runs of the
// report's frame cache (jsonLeak.runs), for writeJSON to write from:
// cc1plus's 6,700 leak groups made 220,000 copies of frames otherwise.
func (r *Report) jsonReportOf(lazy bool) jsonReport {
	out := jsonReport{Schema: Schema, Trace: r.opts.TracePath, Rank: r.opts.Rank, Snapshot: r.opts.Snapshot,
		Label: r.opts.Label, LeakCheck: r.opts.LeakCheck, AskedBy: r.opts.AskedBy}
	imgs := r.Images()
	for i, p := range imgs {
		ji := r.jsonImage(p, lazy)
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

func (r *Report) jsonImage(p *heap.Process, lazy bool) jsonImage {
	t := r.totals(p)
	ji := jsonImage{
		Allocators: r.Allocators(p),
		Command:    p.Info.Argv, PID: p.Info.PID, Anomalies: p.Anomalies,
		Totals: jsonTotals{
			Calls: map[string]uint64{}, Allocations: t.Allocations, Frees: t.Frees,
			AllocatedBytes: t.AllocatedBytes, PeakBytes: t.PeakBytes, PeakSeconds: r.seconds(p, t.PeakTime),
			LeakedBytes: t.LiveBytes, LeakedBlocks: t.LiveBlocks,
			TemporaryAllocations: t.Temporary, FailedAllocations: t.FailedAllocs,
			FoldedPairs: t.Folded, UnknownFrees: t.UnknownFrees,
		},
		Leaks: []jsonLeak{}, Errors: []jsonError{}, Attached: p.Info.Attached, LeakCheckOff: p.LeakCheckOff,
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
		case e.Detached:
			ji.Exit.Detached = true
		case e.Exited:
			c := e.Code
			ji.Exit.Code = &c
		case e.Signal != 0:
			ji.Exit.Signal = signalName(e.Signal)
		case p.ExitStatus != nil:
			ji.Exit.Code = p.ExitStatus
		}
	}
	all := r.allLeaks(p) // none if exec discarded the heap
	// Sized at once: a jsonLeak is large, and cc1plus has 6,700 of them.
	ji.Leaks = make([]jsonLeak, 0, len(all))
	for _, g := range all {
		l := jsonLeak{Kind: g.Kind.String(), Bytes: g.Bytes, Blocks: g.Blocks,
			IndirectBytes: g.IndirectBytes, IndirectBlocks: g.IndirectBlocks,
			Own: g.own, Library: g.lib, During: g.during}
		if lazy {
			// Resolved now all the same: symbolizing may warn, and the
			// warnings are written before the leaks are.
			l.lazy, l.runs = true, r.stackRuns(p, g.Stack)
		} else {
			l.Stack = r.jsonStack(p, g.Stack)
		}
		if g.stacks > 1 {
			l.FoldedStacks = g.stacks
		}
		if p.Site(g.Stack) != nil {
			l.Allocs = g.allocs
			if g.fn != 0 {
				// 0: the site allocated nothing the model saw (a
				// snapshot's pending block), as the text says none.
				l.Function = g.fn.String()
			}
		}
		if g.Owner != 0 {
			l.Owner = r.jsonStack(p, g.Owner)
		}
		if g.supp != nil {
			l.Suppressed = g.supp.String()
		}
		if rc := r.rootCause(p, g.Stack); rc != nil && (g.Kind != event.Reachable || rc.Status == event.RootCauseFound) {
			l.RootCause = r.jsonRootCause(p, rc)
		}
		ji.Leaks = append(ji.Leaks, l)
	}
	if !execd(p) {
		ji.Leaks = append(ji.Leaks, r.jsonStale(p)...)
	}
	if p.Scan != nil && !execd(p) {
		if p.Scan.Error != "" {
			ji.ScanError = p.Scan.Error
		} else {
			kinds, supp := r.byKind(p)
			ji.Totals.ByKind = map[string]KindTotal{}
			for k := event.Definite; k < event.NumLeakKinds; k++ {
				ji.Totals.ByKind[k.String()] = kinds[k]
			}
			if kinds[event.Unclassified].Blocks > 0 {
				ji.Totals.ByKind[event.Unclassified.String()] = kinds[event.Unclassified]
			}
			ji.Totals.Suppressed = &supp
			ji.Scan = &jsonScan{PauseSeconds: float64(p.Scan.PauseNs) / 1e9, RootBytes: p.Scan.RootBytes, HeapBytes: p.Scan.HeapBytes}
		}
	}
	ji.Scopes, ji.ScopeAnomalies = r.jsonScopes(p), p.ScopeAnomalies
	ji.StaleWatch = r.jsonStaleWatch(p)
	if !execd(p) {
		ji.Types = r.jsonTypes(p)
	}
	for _, e := range p.Errors {
		je := jsonError{Kind: e.Kind.String(), Address: fmt.Sprintf("0x%x", e.Addr), Count: e.Count,
			Function: e.Fn.String(), Stack: r.jsonStack(p, e.Stack), AllocStack: r.jsonStack(p, e.AllocStack)}
		if e.AllocFn != 0 {
			je.AllocFn = e.AllocFn.String()
		}
		if e.FreeStack != 0 {
			je.FreeStack = r.jsonStack(p, e.FreeStack)
			je.FreeCallSite = e.FreeCallSite
		}
		ji.Errors = append(ji.Errors, je)
	}
	return ji
}

// hexAddr is fmt's %#x, cheaper: a large report formats 400,000 of them.
func hexAddr(v uint64) string {
	var b [18]byte
	return string(strconv.AppendUint(append(b[:0], "0x"...), v, 16))
}

func (r *Report) jsonStack(p *heap.Process, id heap.StackID) []jsonFrame {
	out := make([]jsonFrame, 0, len(p.Stacks.Frames(id))+4)
	r.walkStack(p, id, func(e *frameEntry, skip int) {
		out = append(out, e.json()[skip:]...)
	})
	return out
}

// json returns e's frames as JSON, shared by every stack they are in.
func (e *frameEntry) json() []jsonFrame {
	if e.js == nil {
		e.js = jsonFrames(e.fs)
		for i := range e.js {
			e.js[i].enc = new(frameEnc)
		}
	}
	return e.js
}
