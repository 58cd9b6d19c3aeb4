package report

import (
	"bufio"
	"fmt"

	"github.com/leakpath/leakpath/internal/model/heap"
)

// staleKind is the kind of a JSON leak entry that lists stale blocks.
const staleKind = "stale"

// Default thresholds of the stale watch, in epochs (Options.StaleT1 and
// StaleT2).
const (
	DefaultStaleT1 = 5
	DefaultStaleT2 = 10
)

// staleThresholds returns T1 and T2 (the defaults where unset).
func (r *Report) staleThresholds() (t1, t2 uint32) {
	t1, t2 = r.opts.StaleT1, r.opts.StaleT2
	if t1 == 0 {
		t1 = DefaultStaleT1
	}
	if t2 == 0 {
		t2 = max(DefaultStaleT2, t1+1)
	}
	return t1, t2
}

// jsonStaleBlock is one stale block of a "stale" entry of leaks.
type jsonStaleBlock struct {
	Address    string  `json:"address"`
	Size       uint64  `json:"size"`
	AgeEpochs  uint32  `json:"age_epochs"`
	LastAccess float64 `json:"last_access"`
	Accessed   bool    `json:"accessed"`
	Kind       string  `json:"reachability"`
}

// textStale writes the stale blocks by site.
func (r *Report) textStale(w *bufio.Writer, p *heap.Process) {
	t1, t2 := r.staleThresholds()
	groups, c := p.StaleGroups(t1, t2)
	if p.Stale == nil {
		return
	}
	fmt.Fprintf(w, "\nSTALE: %s watched (a sample) over %s; %s untouched for more than %d epochs (area B), %s stale (untouched for %d or more)\n",
		plural(c.Watched, "block"), plural(int(c.Epochs), "epoch"), count(c.AreaB), t1, count(c.Stale), t2)
	for i, g := range groups {
		if i >= r.opts.MaxLeaks {
			fmt.Fprintf(w, "\n... %s more; see --json for all\n", plural(len(groups)-i, "stale site"))
			break
		}
		oldest := g.Blocks[0]
		fmt.Fprintf(w, "\nSTALE %s in %s of %d watched here (%.0f%%), untouched for up to %d epochs",
			bytes(g.Bytes), plural(len(g.Blocks), "block"), g.Watched, 100*g.Share, oldest.Age)
		if site := p.Site(g.Site); site != nil && site.Fn != 0 {
			fmt.Fprintf(w, " from %s", site.Fn)
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  extrapolated from the sample: ~%s (%s) of the site's %s live are stale\n",
			plural64(g.EstBlocks, "block"), bytes(g.EstBytes), count(g.SiteLiveBlocks))
		for j, b := range g.Blocks {
			if j == 3 {
				fmt.Fprintf(w, "  ... %s more\n", plural(len(g.Blocks)-j, "block"))
				break
			}
			last := "allocated"
			if b.Accessed {
				last = "last touched"
			}
			fmt.Fprintf(w, "  %s at 0x%x, age %d epochs, %s at %.3g s\n", bytes(b.Size), b.Addr, b.Age, last, r.seconds(p, b.LastAccess))
		}
		r.textStack(w, p, g.Site)
	}
}

// jsonStale returns the "stale" entries of leaks.
func (r *Report) jsonStale(p *heap.Process) []jsonLeak {
	t1, t2 := r.staleThresholds()
	groups, _ := p.StaleGroups(t1, t2)
	var out []jsonLeak
	for _, g := range groups {
		l := jsonLeak{Kind: staleKind, Bytes: g.Bytes, Blocks: uint64(len(g.Blocks)), Stack: r.jsonStack(p, g.Site),
			AgeEpochs: g.Blocks[0].Age, Sampled: true, Watched: g.Watched, SiteLiveBlocks: g.SiteLiveBlocks,
			StaleShare: g.Share, EstimatedBlocks: g.EstBlocks, EstimatedBytes: g.EstBytes}
		if s := p.Site(g.Site); s != nil {
			l.Function, l.Allocs = s.Fn.String(), s.Allocs
		}
		var last float64
		for _, b := range g.Blocks {
			lb := jsonStaleBlock{Address: fmt.Sprintf("0x%x", b.Addr), Size: b.Size, AgeEpochs: b.Age,
				LastAccess: r.seconds(p, b.LastAccess), Accessed: b.Accessed, Kind: b.Kind.String()}
			last = max(last, lb.LastAccess)
			l.StaleBlocks = append(l.StaleBlocks, lb)
		}
		l.LastAccess = &last
		out = append(out, l)
	}
	return out
}

// jsonStaleWatch is the figures of the stale watch of one image.
type jsonStaleWatch struct {
	Epochs       uint32 `json:"epochs"`
	T1           uint32 `json:"t1"`
	T2           uint32 `json:"t2"`
	Watched      int    `json:"watched_blocks"`
	AreaB        int    `json:"area_b_blocks"`
	Stale        int    `json:"stale_blocks"`
	PoolBase     string `json:"pool_base"`
	PoolPages    uint32 `json:"pool_pages"`
	WatchedPages uint32 `json:"watched_pages"` // pages that were mappings of their own
}

func (r *Report) jsonStaleWatch(p *heap.Process) *jsonStaleWatch {
	if p.Stale == nil {
		return nil
	}
	t1, t2 := r.staleThresholds()
	_, c := p.StaleGroups(t1, t2)
	pool := p.Stale.Pool
	return &jsonStaleWatch{Epochs: c.Epochs, T1: t1, T2: t2, Watched: c.Watched, AreaB: c.AreaB, Stale: c.Stale,
		PoolBase: fmt.Sprintf("0x%x", pool.Base), PoolPages: pool.Count, WatchedPages: pool.Watched}
}
