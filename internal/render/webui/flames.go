package webui

import (
	"fmt"
	"sort"

	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/flamegraph"
)

// FlameKinds are the flame graphs of a range: what its allocations
// allocated (bytes), what they left leaked at the end (bytes), what was in
// use when the heap peaked in it (bytes), its temporary allocations
// (counts), and what grew over it (the bytes in use at its end minus at
// its start, of the sites that grew).
var FlameKinds = []string{"allocated", "leaked", "peak", "temporary", "growth"}

// Leaked records the blocks still live at the end (what the report calls
// leaked, every kind), by the bucket of their allocation. Call it once the
// model is finished. A pool's objects count at their own sites and its
// memory, at its site, for what they leave of it (Process.LiveOwn): the
// bytes count once, as in the totals, and where the report lists them.
func (ix *Index) Leaked() {
	for img, p := range ix.Images {
		p.LiveOwn(func(_ uint64, b heap.Block, own uint64) {
			i := ix.at(b.Time)
			if i < 0 || own == 0 {
				return
			}
			bk := &ix.Buckets[i]
			if bk.leaked == nil {
				bk.leaked = map[SiteKey]uint64{}
			}
			bk.leaked[SiteKey{int32(img), b.Site}] += own
			bk.LeakedBytes += own
		})
	}
}

// at is the bucket of time t (clamped to the buckets), -1 if there are
// none.
func (ix *Index) at(t uint64) int {
	if len(ix.Buckets) == 0 {
		return -1
	}
	if t < ix.Start {
		return 0
	}
	return min(int((t-ix.Start)/ix.Width), len(ix.Buckets)-1)
}

// Peak is the bucket of from..to (inclusive) whose heap in use was the
// highest (the first of equals).
func (ix *Index) Peak(from, to int) int {
	best := from
	for i := from; i <= to; i++ {
		if ix.Buckets[i].HeapMax > ix.Buckets[best].HeapMax {
			best = i
		}
	}
	return best
}

// SiteValues is the value of kind (one of FlameKinds) per site over
// buckets from..to (inclusive). Peak: the sites' live bytes at the end of
// the bucket where the heap peaked.
func (ix *Index) SiteValues(kind string, from, to int) (map[SiteKey]uint64, error) {
	if from < 0 || to >= len(ix.Buckets) || from > to {
		return nil, fmt.Errorf("range %d..%d: the trace has buckets 0..%d", from, to, len(ix.Buckets)-1)
	}
	out := map[SiteKey]uint64{}
	switch kind {
	case "allocated", "temporary":
		for i := from; i <= to; i++ {
			for k, s := range ix.Buckets[i].Sites {
				if kind == "allocated" {
					out[k] += s.AllocBytes
				} else {
					out[k] += s.Temporary
				}
			}
		}
	case "leaked":
		for i := from; i <= to; i++ {
			for k, v := range ix.Buckets[i].leaked {
				out[k] += v
			}
		}
	case "peak":
		for k, v := range ix.LiveAt(ix.Peak(from, to)) {
			if v > 0 {
				out[k] = uint64(v)
			}
		}
	case "growth":
		for _, d := range ix.Diff(from, to) {
			if d.After > d.Before {
				out[d.Site] = uint64(d.After - d.Before)
			}
		}
	default:
		return nil, fmt.Errorf("unknown flame graph %q (want allocated, leaked, peak, temporary or growth)", kind)
	}
	return out, nil
}

// flame builds the flame graph of vals, naming each site's frames with
// names (outermost first).
func flame(vals map[SiteKey]uint64, names func(SiteKey) []string) *flamegraph.Node {
	t := flamegraph.NewTree("all")
	for k, v := range vals {
		t.Add(names(k), v)
	}
	return t.Finish()
}

// LiveAt is each site's bytes in use at the end of bucket i (-1: before
// the first: none).
func (ix *Index) LiveAt(i int) map[SiteKey]int64 {
	live := map[SiteKey]int64{}
	for j := 0; j <= i && j < len(ix.Buckets); j++ {
		for k, s := range ix.Buckets[j].Sites {
			live[k] += s.NetBytes
		}
	}
	return live
}

// SiteDiff is a site's bytes in use at the start and the end of a range.
type SiteDiff struct {
	Site          SiteKey
	Before, After int64
}

// Diff compares the heap at the start of bucket from with the heap at the
// end of bucket to, site by site (those that changed), the biggest
// change first: what a snapshot at each end would have shown.
func (ix *Index) Diff(from, to int) []SiteDiff {
	before, after := ix.LiveAt(from-1), ix.LiveAt(to)
	var out []SiteDiff
	for k, a := range after {
		if b := before[k]; a != b {
			out = append(out, SiteDiff{k, b, a})
		}
	}
	for k, b := range before {
		if _, ok := after[k]; !ok && b != 0 {
			out = append(out, SiteDiff{k, b, 0})
		}
	}
	abs := func(d SiteDiff) int64 {
		if d.After > d.Before {
			return d.After - d.Before
		}
		return d.Before - d.After
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := abs(out[i]), abs(out[j]); a != b {
			return a > b
		}
		if out[i].Site.Image != out[j].Site.Image {
			return out[i].Site.Image < out[j].Site.Image
		}
		return out[i].Site.Site < out[j].Site.Site
	})
	return out
}
