package webui

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/leakpath/leakpath/internal/render/flamegraph"
	"github.com/leakpath/leakpath/internal/render/report"
)

//go:embed assets
var assets embed.FS

// Data is what the UI shows of a trace, ready once the trace is replayed.
type Data struct {
	Title       string // the trace's name
	Index       *Index
	TicksPerSec float64        // 0: unknown (times are then ticks)
	Report      *report.Report // resolves the sites' stacks
	// Names, when Report is nil (a live view), names a site's frames,
	// outermost first.
	Names      func(SiteKey) []string
	ReportJSON []byte // leakpath.report/v1 of the trace
	// Usage is leakpath.usage/v1 JSON per unit ("library", "function",
	// "thread", "scope").
	Usage map[string][]byte
}

// Server serves the UI. Its handlers answer while the data loads: the
// page shows the progress (/api/status) and asks for the rest when ready.
type Server struct {
	mu          sync.Mutex // guards what follows and Data.Report, which is not safe for concurrent use
	data        *Data
	err         error
	done, total int64
	names       map[SiteKey][]string
	sources     map[string]bool // the source files the report names: only those are served
	live        *Data           // a running program's view until Ready
	liveMu      sync.Locker     // held while the live index is read
}

// Live shows a running program until Ready: d's Index, filled by the
// goroutine applying events, is copied with mu held for each look; d has
// no report (the leaks and tables come with Ready) and names sites with
// d.Names.
func (s *Server) Live(d *Data, mu sync.Locker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live, s.liveMu = d, mu
	s.names = map[SiteKey][]string{}
}

// NewServer returns a server whose data is still loading.
func NewServer() *Server { return &Server{} }

// Progress says how far loading has come: done of total (bytes of the
// trace, say).
func (s *Server) Progress(done, total int64) {
	s.mu.Lock()
	s.done, s.total = done, total
	s.mu.Unlock()
}

// Ready gives the server its data, or the error that stopped loading.
func (s *Server) Ready(d *Data, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.err = d, err
	s.live = nil
	s.names = map[SiteKey][]string{}
	s.sources = map[string]bool{}
	if d != nil {
		// The files of the leaks' stacks and root causes.
		type frames = []report.JSONFrame
		type leaks = []struct {
			Stack     frames `json:"stack"`
			RootCause *struct {
				Functions   frames `json:"functions"`
				Branches    frames `json:"branches"`
				LeakTargets frames `json:"leak_targets"`
			} `json:"root_cause"`
		}
		var rep struct {
			Leaks     leaks `json:"leaks"`
			Processes []struct {
				Leaks leaks `json:"leaks"`
			} `json:"processes"`
		}
		if json.Unmarshal(d.ReportJSON, &rep) == nil {
			all := rep.Leaks
			for _, p := range rep.Processes {
				all = append(all, p.Leaks...)
			}
			for _, l := range all {
				fss := []frames{l.Stack}
				if rc := l.RootCause; rc != nil {
					fss = append(fss, rc.Functions, rc.Branches, rc.LeakTargets)
				}
				for _, fs := range fss {
					for _, f := range fs {
						if f.File != "" {
							s.sources[f.File] = true
						}
					}
				}
			}
		}
	}
}

// Handler returns the UI's routes, each guarded by a.
func (s *Server) Handler(a *Access) http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /flame.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		fmt.Fprint(w, flamegraph.Script)
	})
	mux.HandleFunc("GET /flame.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		fmt.Fprint(w, flamegraph.Style)
	})
	mux.HandleFunc("GET /api/status", s.status)
	mux.HandleFunc("GET /api/timeline", s.running(s.timeline))
	mux.HandleFunc("GET /api/flame", s.running(s.flame))
	mux.HandleFunc("GET /api/diff", s.running(s.diff))
	mux.HandleFunc("GET /api/report", s.ready(func(w http.ResponseWriter, r *http.Request, d *Data) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(d.ReportJSON)
	}))
	mux.HandleFunc("GET /api/usage", s.ready(s.usage))
	mux.HandleFunc("GET /api/path", s.ready(s.path))
	mux.HandleFunc("GET /api/source", s.ready(s.source))
	return a.Wrap(mux)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := map[string]any{"state": "loading", "done": s.done, "total": s.total}
	switch {
	case s.err != nil:
		st["state"], st["error"] = "error", s.err.Error()
	case s.data != nil:
		st["state"], st["title"] = "ready", s.data.Title
	case s.live != nil:
		st["state"], st["title"] = "running", s.live.Title
	}
	writeJSON(w, http.StatusOK, st)
}

// ready wraps a handler of the loaded data: until then, 503.
func (s *Server) ready(h func(http.ResponseWriter, *http.Request, *Data)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			fail(w, http.StatusInternalServerError, s.err)
			return
		}
		if s.data == nil {
			fail(w, http.StatusServiceUnavailable, errors.New("the trace is still loading"))
			return
		}
		h(w, r, s.data)
	}
}

// running wraps a handler that also serves a running program's live view.
func (s *Server) running(h func(http.ResponseWriter, *http.Request, *Data)) http.HandlerFunc {
	done := s.ready(h)
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		live := s.data == nil && s.err == nil && s.live != nil
		if !live {
			s.mu.Unlock()
			done(w, r)
			return
		}
		defer s.mu.Unlock()
		// A copy: naming the sites may take a while, and the program's
		// events must not wait for it.
		s.liveMu.Lock()
		ix := s.live.Index.Clone()
		s.liveMu.Unlock()
		ix.Curve()
		d := *s.live
		d.Index = ix
		h(w, r, &d)
	}
}

// TimelineBucket is one bucket of /api/timeline.
type TimelineBucket struct {
	Start       float64 `json:"start"` // seconds (ticks if the clock rate is unknown) since the trace's start
	HeapEnd     int64   `json:"heap"`
	HeapMax     int64   `json:"heap_max"`
	AllocBytes  uint64  `json:"alloc_bytes"`
	Allocs      uint64  `json:"allocs"`
	FreedBytes  uint64  `json:"freed_bytes"`
	Frees       uint64  `json:"frees"`
	Temporary   uint64  `json:"temporary"`
	LeakedBytes uint64  `json:"leaked_bytes"`
}

// Timeline is /api/timeline: the memory over time.
type Timeline struct {
	Unit    string           `json:"unit"`  // "s" or "ticks"
	Width   float64          `json:"width"` // of a bucket, in Unit
	Buckets []TimelineBucket `json:"buckets"`
	// RSS would be the resident set size over time; traces do not
	// record it yet, so it is always empty.
	RSS []float64 `json:"rss"`
}

func (d *Data) seconds(ticks uint64) float64 {
	if d.TicksPerSec > 0 {
		return float64(ticks) / d.TicksPerSec
	}
	return float64(ticks)
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request, d *Data) {
	ix := d.Index
	tl := Timeline{Unit: "s", Width: d.seconds(ix.Width), Buckets: []TimelineBucket{}, RSS: []float64{}}
	if d.TicksPerSec <= 0 {
		tl.Unit = "ticks"
	}
	for i, b := range ix.Buckets {
		tl.Buckets = append(tl.Buckets, TimelineBucket{Start: d.seconds(uint64(i) * ix.Width), HeapEnd: b.HeapEnd, HeapMax: b.HeapMax,
			AllocBytes: b.AllocBytes, Allocs: b.Allocs, FreedBytes: b.FreedBytes, Frees: b.Frees, Temporary: b.Temporary, LeakedBytes: b.LeakedBytes})
	}
	writeJSON(w, http.StatusOK, tl)
}

// Flame is /api/flame: a flame graph of a range of buckets.
type Flame struct {
	Kind string `json:"kind"`
	Unit string `json:"unit"` // "bytes" or "blocks"
	From int    `json:"from"`
	To   int    `json:"to"`
	// Peak: the bucket whose end the peak flame graph shows.
	Peak *int             `json:"peak,omitempty"`
	Root *flamegraph.Node `json:"root"`
	// Pruned is how many frames were left out: a tree of more than
	// MaxFlameNodes keeps its biggest (their values stay in their callers).
	Pruned int `json:"pruned,omitempty"`
}

// MaxFlameNodes bounds the frames of a flame graph the API sends.
const MaxFlameNodes = 20000

// bucketRange reads ?from=I&to=J (buckets, inclusive; all by default).
func bucketRange(r *http.Request, ix *Index) (from, to int, err error) {
	q := r.URL.Query()
	from, to = 0, len(ix.Buckets)-1
	for _, p := range []struct {
		name string
		v    *int
	}{{"from", &from}, {"to", &to}} {
		if a := q.Get(p.name); a != "" {
			n, err := strconv.Atoi(a)
			if err != nil {
				return 0, 0, fmt.Errorf("%s=%q: want a bucket number", p.name, a)
			}
			*p.v = n
		}
	}
	if len(ix.Buckets) > 0 && (from < 0 || to >= len(ix.Buckets) || from > to) {
		return 0, 0, fmt.Errorf("range %d..%d: the trace has buckets 0..%d", from, to, len(ix.Buckets)-1)
	}
	return from, to, nil
}

// flame answers ?kind=K&from=I&to=J.
func (s *Server) flame(w http.ResponseWriter, r *http.Request, d *Data) {
	kind := r.URL.Query().Get("kind")
	if kind == "" {
		kind = "allocated"
	}
	ix := d.Index
	from, to, err := bucketRange(r, ix)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	out := Flame{Kind: kind, Unit: "bytes", From: from, To: to}
	if len(ix.Buckets) == 0 {
		out.Root = &flamegraph.Node{Name: "all"}
		writeJSON(w, http.StatusOK, out)
		return
	}
	vals, err := ix.SiteValues(kind, from, to)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	if kind == "temporary" {
		out.Unit = "blocks"
	}
	if kind == "peak" {
		p := ix.Peak(from, to)
		out.Peak = &p
	}
	out.Root = flame(vals, func(k SiteKey) []string { return s.siteNames(d, k) })
	out.Pruned = flamegraph.Prune(out.Root, MaxFlameNodes)
	writeJSON(w, http.StatusOK, out)
}

// DiffRow is a row of /api/diff: a site whose bytes in use changed.
type DiffRow struct {
	Stack  []string `json:"stack"` // frames, outermost first, as the flame graphs name them
	Before int64    `json:"before"`
	After  int64    `json:"after"`
	Change int64    `json:"change"`
}

// diff answers ?from=I&to=J: the sites whose bytes in use at the end of
// bucket J differ from those at the start of bucket I, the biggest
// change first (at most 100).
func (s *Server) diff(w http.ResponseWriter, r *http.Request, d *Data) {
	from, to, err := bucketRange(r, d.Index)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	rows := []DiffRow{}
	var total int64
	for i, sd := range d.Index.Diff(from, to) {
		total += sd.After - sd.Before
		if i < 100 {
			rows = append(rows, DiffRow{s.siteNames(d, sd.Site), sd.Before, sd.After, sd.After - sd.Before})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"from": from, "to": to, "change": total, "rows": rows})
}

// siteNames are site k's frames, outermost first, as the collapsed export
// names them; with several images, under a frame "command[pid]".
func (s *Server) siteNames(d *Data, k SiteKey) []string {
	if n, ok := s.names[k]; ok {
		return n
	}
	if d.Report == nil {
		return d.Names(k) // not kept: a live view learns more of the modules as it goes
	}
	p := d.Index.Images[k.Image]
	fs := d.Report.Stack(p, k.Site)
	var names []string
	if len(d.Index.Images) > 1 {
		names = append(names, fmt.Sprintf("%s[%d]", report.CommandName(p), p.Info.PID))
	}
	for i := len(fs) - 1; i >= 0; i-- {
		names = append(names, strings.ReplaceAll(report.FoldedFrame(fs[i]), ";", ":"))
	}
	if len(fs) == 0 {
		names = append(names, "[no stack]")
	}
	s.names[k] = names
	return names
}

// UsageUnits are the units /api/usage has tables of.
var UsageUnits = []string{"library", "function", "thread", "scope"}

func (s *Server) usage(w http.ResponseWriter, r *http.Request, d *Data) {
	by := r.URL.Query().Get("by")
	b, ok := d.Usage[by]
	if !ok {
		fail(w, http.StatusBadRequest, fmt.Errorf("by=%q: want %s", by, strings.Join(UsageUnits, ", ")))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// SourceLine is a line of /api/source.
type SourceLine struct {
	N    int    `json:"n"`
	Text string `json:"text"`
}

// source answers ?file=F&line=N with lines N-3..N+3 of F, a file the
// report's leak stacks name (no other file is read) that readSource
// allows.
func (s *Server) source(w http.ResponseWriter, r *http.Request, d *Data) {
	file := r.URL.Query().Get("file")
	line, err := strconv.Atoi(r.URL.Query().Get("line"))
	if err != nil || line < 1 {
		fail(w, http.StatusBadRequest, fmt.Errorf("line=%q: want a line number", r.URL.Query().Get("line")))
		return
	}
	if !s.sources[file] {
		fail(w, http.StatusNotFound, fmt.Errorf("%s: not a source file of the report's leaks", file))
		return
	}
	b, err := readSource(file)
	if errors.Is(err, fs.ErrNotExist) {
		fail(w, http.StatusNotFound, err)
		return
	}
	if err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	lines := strings.Split(string(b), "\n")
	out := []SourceLine{}
	for n := max(1, line-3); n <= min(len(lines), line+3); n++ {
		out = append(out, SourceLine{n, strings.TrimRight(lines[n-1], "\r")})
	}
	writeJSON(w, http.StatusOK, out)
}

// pathStep is one step of a path to root in /api/path.
type pathStep struct {
	Via      string `json:"via"`
	Address  string `json:"address"`
	Bytes    uint64 `json:"bytes"`
	Type     string `json:"type"`
	Retained uint64 `json:"retained_bytes"`
}

// path answers /api/path?type=NAME: the chain of fields from a root to the
// instance of the type that retains most (run --types traces only).
func (s *Server) path(w http.ResponseWriter, r *http.Request, d *Data) {
	name := r.URL.Query().Get("type")
	if name == "" || d.Report == nil {
		fail(w, http.StatusBadRequest, errors.New("want ?type=NAME of a trace recorded with --types"))
		return
	}
	qualified, steps, ok := d.Report.TypePath(name) // ready holds s.mu: Report is not safe for concurrent use
	if !ok {
		fail(w, http.StatusNotFound, fmt.Errorf("no type %q in the trace's typed scan", name))
		return
	}
	out := struct {
		Type  string     `json:"type"`
		Steps []pathStep `json:"steps"` // root first; empty: no root reaches it
	}{Type: qualified, Steps: []pathStep{}}
	for _, st := range steps {
		out.Steps = append(out.Steps, pathStep{Via: st.Via, Address: fmt.Sprintf("0x%x", st.Addr), Bytes: st.Size, Type: st.Type, Retained: st.Retained})
	}
	writeJSON(w, http.StatusOK, out)
}
