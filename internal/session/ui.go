package session

import (
	"bytes"
	"fmt"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/webui"
)

// UIUsage is the heap use accounting of the UI's tables, by unit.
type UIUsage map[string]*Usage

// StartUIUsage starts accounting heap use by each of webui.UsageUnits.
func StartUIUsage(sym *Symbolizer) (UIUsage, error) {
	usage := UIUsage{}
	for _, by := range webui.UsageUnits {
		u, err := StartUsage(&UsageOptions{By: by}, sym)
		if err != nil {
			return nil, err
		}
		usage[by] = u
	}
	return usage, nil
}

// Observers are the engines that follow the model (units by scope are
// counted by the model itself).
func (usage UIUsage) Observers() Observers {
	var obs Observers
	for _, u := range usage {
		if u.engine.Observes() {
			obs = append(obs, u.engine)
		}
	}
	return obs
}

// UIData is what the UI shows of a finished model: the index (finished),
// rep and its JSON, and the usage tables.
func UIData(title string, ix *webui.Index, tps float64, rep *report.Report, usage UIUsage) (*webui.Data, error) {
	var js bytes.Buffer
	if err := rep.Generate(&js, "json"); err != nil {
		return nil, err
	}
	d := &webui.Data{Title: title, Index: ix, TicksPerSec: tps, Report: rep, ReportJSON: js.Bytes(), Usage: map[string][]byte{}}
	for by, u := range usage {
		var b bytes.Buffer
		if err := u.Report(rep, nil).Generate(&b, "json"); err != nil {
			return nil, fmt.Errorf("usage by %s: %w", by, err)
		}
		d.Usage[by] = b.Bytes()
	}
	return d, nil
}

// Observers tells each of its observers of every heap change.
type Observers []heap.Observer

func (obs Observers) Call(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	for _, o := range obs {
		o.Call(p, b, fn, t)
	}
}

func (obs Observers) Allocated(p *heap.Process, b heap.Block) {
	for _, o := range obs {
		o.Allocated(p, b)
	}
}

func (obs Observers) Freed(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	for _, o := range obs {
		o.Freed(p, b, fn, t)
	}
}

func (obs Observers) Folded(p *heap.Process, site heap.StackID, ev *event.Event) {
	for _, o := range obs {
		o.Folded(p, site, ev)
	}
}

func (obs Observers) Pending(p *heap.Process, bytes, t uint64) {
	for _, o := range obs {
		o.Pending(p, bytes, t)
	}
}

func (obs Observers) Forked(p *heap.Process) {
	for _, o := range obs {
		o.Forked(p)
	}
}
