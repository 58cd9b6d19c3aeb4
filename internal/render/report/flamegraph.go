package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/leakpath/leakpath/internal/render/flamegraph"
)

// flamegraph writes the stacks of the collapsed export (the same value,
// Options.CollapsedValue) as one self-contained interactive HTML page.
func (r *Report) flamegraph(w io.Writer) error {
	value, err := r.collapsedValue()
	if err != nil {
		return err
	}
	stacks, err := r.valueStacks()
	if err != nil {
		return err
	}
	t := flamegraph.NewTree("all")
	for _, s := range stacks {
		t.Add(s.frames, s.value)
	}
	unit := "bytes"
	if strings.HasSuffix(value, "-blocks") {
		unit = "blocks"
	}
	title := "leakpath: " + strings.ReplaceAll(value, "-", " ")
	if imgs := r.Images(); len(imgs) > 0 {
		title += fmt.Sprintf(" of %s", commandName(imgs[0]))
	}
	return flamegraph.WriteHTML(w, flamegraph.Page{Title: title, Value: value, Unit: unit, Root: t.Finish()})
}
