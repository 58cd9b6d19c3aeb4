package report

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// Baseline is the leak sites of an earlier report (run --baseline): a
// leak at one of them is known, not new. Sites compare by their
// symbolized stacks, as Diff compares them, but for the directories of
// their source files.
type Baseline struct {
	Source string
	sites  map[string]bool
}

// baselineKey is stackKey with each source file by its base name: a
// baseline recorded in one checkout (a developer's, a CI job's
// workspace) must know the same sites built in another, whose debug
// information names the sources by other absolute paths.
func baselineKey(fs []Frame) string {
	short := make([]Frame, len(fs))
	for i, f := range fs {
		short[i] = f
		short[i].File = filepath.Base(f.File)
		if f.File == "" {
			short[i].File = ""
		}
	}
	return stackKey(short)
}

// NewBaseline takes the sites of d's leaks of every kind but reachable,
// suppressed or not, in every image.
func NewBaseline(d *Doc) *Baseline {
	b := &Baseline{Source: d.Source, sites: map[string]bool{}}
	imgs := d.r.Processes
	if len(imgs) == 0 {
		imgs = []jsonImage{d.r.jsonImage}
	}
	for _, img := range imgs {
		for _, l := range img.Leaks {
			if l.Kind == staleKind || l.Kind == event.Reachable.String() {
				continue
			}
			b.sites[baselineKey(framesOf(l.Stack))] = true
		}
	}
	return b
}

// Sites returns how many leak sites b knows.
func (b *Baseline) Sites() int { return len(b.sites) }

// newLeak is a failing leak group whose site b does not know.
type newLeak struct {
	leak
	frames []Frame
	fn     event.Fn
}

// notIn returns the leak groups Failing counts whose sites b does not
// know, and how many Failing counts.
func (r *Report) notIn(b *Baseline, kinds []event.LeakKind) (out []newLeak, failing int) {
	want := wantKinds(kinds)
	for _, p := range r.Images() {
		for _, l := range r.leaks(p) {
			if l.supp != nil || !want[l.Kind] {
				continue
			}
			failing++
			fs := r.Stack(p, l.Stack)
			if b.sites[baselineKey(fs)] {
				continue
			}
			n := newLeak{leak: l, frames: fs}
			if s := p.Site(l.Stack); s != nil {
				n.fn = s.Fn
			}
			out = append(out, n)
		}
	}
	return out, failing
}

// FailingNotIn counts the leak groups that make --check fail when b is
// the baseline: those Failing counts whose sites b does not know.
func (r *Report) FailingNotIn(b *Baseline, kinds []event.LeakKind) int {
	n, _ := r.notIn(b, kinds)
	return len(n)
}

// BaselineNote writes what --baseline found: the failing leak groups not
// in b, each with its innermost frames, or that there are none.
func (r *Report) BaselineNote(w io.Writer, b *Baseline, kinds []event.LeakKind) error {
	news, failing := r.notIn(b, kinds)
	bw := bufio.NewWriter(w)
	src := termsafe.String(b.Source)
	if len(news) == 0 {
		fmt.Fprintf(bw, "leakpath: every leak group failing --check (%d) is in the baseline %s\n", failing, src)
		return bw.Flush()
	}
	fmt.Fprintf(bw, "leakpath: %s not in the baseline %s (of %d failing --check):\n", plural(len(news), "leak group"), src, failing)
	for _, n := range news {
		fmt.Fprintf(bw, "  NEW LEAK %s in %s", bytes(n.Bytes), plural64(n.Blocks, "block"))
		if n.Kind != event.Unclassified {
			fmt.Fprintf(bw, " (%s)", n.Kind)
		}
		if n.fn != 0 {
			fmt.Fprintf(bw, " from %s", n.fn)
		}
		fmt.Fprintln(bw)
		for i, f := range n.frames {
			if i == 3 {
				fmt.Fprintln(bw, "    ...")
				break
			}
			fmt.Fprintf(bw, "    #%d  %s\n", i, textFrame(f))
		}
	}
	return bw.Flush()
}
