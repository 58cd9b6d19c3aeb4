package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// ScopeRow is one scope name of an image (heap.Scope) as the reports
// show it.
type ScopeRow struct {
	*heap.Scope
	// TotalSeconds, MaxSeconds and MeanSeconds: the durations of the
	// instances that closed (heap.Scope.Timed of them).
	TotalSeconds, MaxSeconds, MeanSeconds float64
	// FirstSeconds and LastSeconds: its first begin and last close, since
	// the image started (LastSeconds 0: none closed); MaxLiveSeconds: when
	// the most of its blocks were live.
	FirstSeconds, LastSeconds, MaxLiveSeconds float64
	// NetBytes is what it allocated less what it freed.
	NetBytes int64
	// Held: the blocks its instances held when they closed, by site, the
	// most bytes first.
	Held []ScopeHeld
	// Ended: the image has ended, so the held blocks still live were
	// never freed; else it runs (a snapshot).
	Ended bool
}

// ScopeHeld is the blocks of one allocation site that a scope held when
// its instances closed.
type ScopeHeld struct {
	*heap.ScopeSite
	Fn    event.Fn // the function that allocated them (the site's first)
	Stack []Frame
}

// maxHeldSites bounds the sites the text lists per scope (JSON has all).
const maxHeldSites = 5

// Scopes returns the scope rows of image p, the most allocated first; nil
// when it entered no scope.
func (r *Report) Scopes(p *heap.Process) []ScopeRow {
	scs := p.Scopes()
	if len(scs) == 0 {
		return nil
	}
	tps := r.opts.TicksPerSec
	if tps <= 0 {
		tps = p.Clock.TicksPerSec
	}
	dur := func(ticks uint64) float64 {
		if tps <= 0 {
			return 0
		}
		return float64(ticks) / tps
	}
	rows := make([]ScopeRow, 0, len(scs))
	for _, sc := range scs {
		row := ScopeRow{Scope: sc, TotalSeconds: dur(sc.TotalTicks), MaxSeconds: dur(sc.MaxTicks),
			FirstSeconds: r.seconds(p, sc.First), MaxLiveSeconds: r.seconds(p, sc.MaxLiveTime),
			NetBytes: int64(sc.AllocBytes - sc.FreedBytes), Ended: p.End != nil}
		if sc.Timed > 0 {
			row.MeanSeconds = row.TotalSeconds / float64(sc.Timed)
		}
		if sc.Last != 0 {
			row.LastSeconds = r.seconds(p, sc.Last)
		}
		for _, ss := range sc.Held {
			h := ScopeHeld{ScopeSite: ss, Stack: r.Stack(p, ss.Site)}
			if site := p.Site(ss.Site); site != nil {
				h.Fn = site.Fn
			}
			row.Held = append(row.Held, h)
		}
		sort.SliceStable(row.Held, func(i, j int) bool { return row.Held[i].Bytes > row.Held[j].Bytes })
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].AllocBytes > rows[j].AllocBytes })
	return rows
}

// WriteScopes writes the scope table of rows, then what each scope held
// when it closed, for people. anomalies counts the scope records that
// did not pair up (heap.Process.ScopeAnomalies).
func WriteScopes(out io.Writer, rows []ScopeRow, anomalies uint64, maxFrames int) error {
	w := bufio.NewWriter(out)
	writeScopes(w, rows, anomalies, maxFrames)
	return w.Flush()
}

func (r *Report) textScopes(w *bufio.Writer, p *heap.Process) {
	rows := r.Scopes(p)
	if len(rows) == 0 && p.ScopeAnomalies == 0 {
		return
	}
	fmt.Fprintln(w)
	writeScopes(w, rows, p.ScopeAnomalies, r.opts.MaxFrames)
}

func writeScopes(w *bufio.Writer, rows []ScopeRow, anomalies uint64, maxFrames int) {
	var entered uint64
	for _, row := range rows {
		entered += row.Entered
	}
	fmt.Fprintf(w, "SCOPES: %s entered %s (what each allocated inside counts in the scopes around it too)\n",
		plural(len(rows), "scope"), plural64(entered, "time"))
	if len(rows) > 0 {
		live := "never freed"
		if !rows[0].Ended {
			live = "still live"
		}
		table := [][]string{{"entered", "total", "longest", "allocated", "blocks", "freed", "blocks", "net",
			"held at close", "blocks", live, "blocks", "scope"}}
		for _, row := range rows {
			table = append(table, []string{count(row.Entered), seconds(row.TotalSeconds), seconds(row.MaxSeconds),
				bytes(row.AllocBytes), count(row.AllocBlocks), bytes(row.FreedBytes), count(row.FreedBlocks),
				netBytes(row.NetBytes), bytes(row.HeldBytes), count(row.HeldBlocks),
				bytes(heldLive(row.Held)), count(heldLiveBlocks(row.Held)), scopeLabel(&row)})
		}
		Table(w, "  ", table)
	}
	if anomalies > 0 {
		fmt.Fprintf(w, "  %s of scopes did not pair up (an end with no scope open, or records lost): those scopes closed where the next record said\n",
			plural64(anomalies, "begin or end"))
	}
	for i := range rows {
		row := &rows[i]
		if len(row.Held) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nHELD by scope %q when it closed: %s in %s", row.Name, bytes(row.HeldBytes), plural64(row.HeldBlocks, "block"))
		if n := heldLiveBlocks(row.Held); n > 0 {
			what := "never freed"
			if !row.Ended {
				what = "still live"
			}
			fmt.Fprintf(w, "; %s in %s %s", bytes(heldLive(row.Held)), plural64(n, "block"), what)
		}
		fmt.Fprintln(w)
		for j := range row.Held {
			h := &row.Held[j]
			if j == maxHeldSites {
				var rest uint64
				for _, o := range row.Held[j:] {
					rest += o.Bytes
				}
				fmt.Fprintf(w, "  ... %s more (%s); see --json for all\n", plural(len(row.Held)-j, "site"), bytes(rest))
				break
			}
			fmt.Fprintf(w, "  %s in %s", bytes(h.Bytes), plural64(h.Blocks, "block"))
			if h.Fn != 0 {
				fmt.Fprintf(w, " from %s", h.Fn)
			}
			if h.LiveBlocks > 0 {
				what := "never freed"
				if !row.Ended {
					what = "still live"
				}
				fmt.Fprintf(w, ", %s %s", count(h.LiveBlocks), what)
			}
			fmt.Fprint(w, ", at")
			for k, a := range h.Addrs {
				if k == 4 {
					fmt.Fprint(w, " ...")
					break
				}
				fmt.Fprintf(w, " 0x%x", a)
			}
			fmt.Fprintln(w)
			writeFrames(w, "    ", h.Stack, maxFrames)
		}
	}
}

// scopeLabel names a row: the scope, and what is unusual about it.
func scopeLabel(row *ScopeRow) string {
	s := termsafe.String(row.Name)
	var notes []string
	if row.Open > 0 {
		notes = append(notes, count(row.Open)+" open")
	}
	if row.Unclosed > 0 {
		notes = append(notes, count(row.Unclosed)+" never closed")
	}
	if row.Recursive > 0 {
		notes = append(notes, count(row.Recursive)+" recursive")
	}
	if row.NumThreads() > 1 {
		notes = append(notes, plural(row.NumThreads(), "thread"))
	}
	for i, n := range notes {
		if i == 0 {
			s += " ("
		} else {
			s += ", "
		}
		s += n
	}
	if len(notes) > 0 {
		s += ")"
	}
	return s
}

func heldLive(hs []ScopeHeld) uint64 {
	var n uint64
	for _, h := range hs {
		n += h.LiveBytes
	}
	return n
}

func heldLiveBlocks(hs []ScopeHeld) uint64 {
	var n uint64
	for _, h := range hs {
		n += h.LiveBlocks
	}
	return n
}

// seconds formats a duration in seconds for people: "850 ns", "12.3 us",
// "4.56 ms", "1.234 s".
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-6:
		return fmt.Sprintf("%.0f ns", s*1e9)
	case s < 1e-3:
		return fmt.Sprintf("%.1f us", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.3f s", s)
}

// netBytes formats a net change: "+5 B", "-5 B", "0 B".
func netBytes(n int64) string {
	if n == 0 {
		return "0 B"
	}
	return signedBytes(n)
}

// Table writes rows as columns, numbers right-aligned, the last column
// (a name) left-aligned and unpadded.
func Table(w *bufio.Writer, indent string, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, c := range row[:len(row)-1] {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len(c))
		}
	}
	for _, row := range rows {
		w.WriteString(indent)
		for i, c := range row[:len(row)-1] {
			fmt.Fprintf(w, "%*s  ", width[i], c)
		}
		w.WriteString(row[len(row)-1])
		w.WriteByte('\n')
	}
}

// JSONScope is a scope as the JSON reports spell it: in
// leakpath.report/v1's "scopes", and the scope's own fields of a
// leakpath.usage/v1 unit by scope.
type JSONScope struct {
	Entered        uint64          `json:"entered"`
	Closed         uint64          `json:"closed"`
	Unclosed       uint64          `json:"unclosed"`
	Open           uint64          `json:"open"`
	Recursive      uint64          `json:"recursive"`
	Threads        int             `json:"threads"`
	TotalSeconds   float64         `json:"total_seconds"`
	LongestSeconds float64         `json:"longest_seconds"`
	MeanSeconds    float64         `json:"mean_seconds"`
	FirstSeconds   float64         `json:"first_seconds"`
	LastSeconds    float64         `json:"last_seconds"`
	NetBytes       int64           `json:"net_bytes"`
	HeldBytes      uint64          `json:"held_bytes"`
	HeldBlocks     uint64          `json:"held_blocks"`
	MaxHeldBytes   uint64          `json:"max_held_bytes"`
	HeldLiveBytes  uint64          `json:"held_live_bytes"`
	HeldLiveBlocks uint64          `json:"held_live_blocks"`
	Held           []JSONScopeHeld `json:"held"`
	MaxLiveBytes   uint64          `json:"max_live_bytes"`
	MaxLiveSeconds float64         `json:"max_live_seconds"`
}

// JSONScopeHeld is the blocks of one site a scope held at its closes.
type JSONScopeHeld struct {
	Site       uint32      `json:"site"`
	Function   string      `json:"function,omitempty"`
	Bytes      uint64      `json:"bytes"`
	Blocks     uint64      `json:"blocks"`
	LiveBytes  uint64      `json:"live_bytes"`
	LiveBlocks uint64      `json:"live_blocks"`
	Addresses  []string    `json:"addresses"`
	Stack      []jsonFrame `json:"stack"`
}

// JSON returns the scope-specific JSON fields of row.
func (row *ScopeRow) JSON() JSONScope {
	js := JSONScope{Entered: row.Entered, Closed: row.Closed, Unclosed: row.Unclosed, Open: row.Open, Recursive: row.Recursive,
		Threads: row.NumThreads(), TotalSeconds: row.TotalSeconds, LongestSeconds: row.MaxSeconds, MeanSeconds: row.MeanSeconds,
		FirstSeconds: row.FirstSeconds, LastSeconds: row.LastSeconds, NetBytes: row.NetBytes,
		HeldBytes: row.HeldBytes, HeldBlocks: row.HeldBlocks, MaxHeldBytes: row.MaxHeldBytes,
		HeldLiveBytes: heldLive(row.Held), HeldLiveBlocks: heldLiveBlocks(row.Held), Held: []JSONScopeHeld{},
		MaxLiveBytes: row.MaxLiveBytes, MaxLiveSeconds: row.MaxLiveSeconds}
	for _, h := range row.Held {
		jh := JSONScopeHeld{Site: uint32(h.Site), Bytes: h.Bytes, Blocks: h.Blocks, LiveBytes: h.LiveBytes,
			LiveBlocks: h.LiveBlocks, Addresses: []string{}, Stack: jsonFrames(h.Stack)}
		if h.Fn != 0 {
			jh.Function = h.Fn.String()
		}
		for _, a := range h.Addrs {
			jh.Addresses = append(jh.Addresses, fmt.Sprintf("0x%x", a))
		}
		js.Held = append(js.Held, jh)
	}
	return js
}

// jsonScope is an entry of leakpath.report/v1's "scopes".
type jsonScope struct {
	Name            string            `json:"name"`
	AllocatedBytes  uint64            `json:"allocated_bytes"`
	AllocatedBlocks uint64            `json:"allocated_blocks"`
	FreedBytes      uint64            `json:"freed_bytes"`
	FreedBlocks     uint64            `json:"freed_blocks"`
	LiveBytes       uint64            `json:"live_bytes"`
	LiveBlocks      uint64            `json:"live_blocks"`
	Calls           map[string]uint64 `json:"calls"`
	JSONScope
}

func (r *Report) jsonScopes(p *heap.Process) []jsonScope {
	rows := r.Scopes(p)
	if rows == nil {
		return nil
	}
	out := []jsonScope{}
	for i := range rows {
		row := &rows[i]
		out = append(out, jsonScope{Name: row.Name, AllocatedBytes: row.AllocBytes, AllocatedBlocks: row.AllocBlocks,
			FreedBytes: row.FreedBytes, FreedBlocks: row.FreedBlocks, LiveBytes: row.LiveBytes, LiveBlocks: row.LiveBlocks,
			Calls: CallsJSON(&row.Calls), JSONScope: row.JSON()})
	}
	return out
}

// CallsJSON spells calls per allocator function as the JSON reports do:
// every function, by its name.
func CallsJSON(c *[event.NumFn]uint64) map[string]uint64 {
	m := make(map[string]uint64, event.NumFn-1)
	for fn := event.Fn(1); fn < event.NumFn; fn++ {
		m[event.FnNames[fn]] = c[fn]
	}
	return m
}
