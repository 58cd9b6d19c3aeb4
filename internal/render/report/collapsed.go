package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/leakpath/leakpath/internal/model/heap"
)

// CollapsedValues are the values the collapsed (folded stacks) export can
// count per stack; the first is the default.
var CollapsedValues = []string{"leaked-bytes", "allocated-bytes", "leaked-blocks", "allocated-blocks"}

// collapsed writes folded stacks, as flamegraph.pl and speedscope read
// them: per line the frames outermost first, separated by ";", then a
// space and the value Options.CollapsedValue chooses. Inlined functions
// are frames of their own; a frame without a symbol is "module+0xoffset".
// With several images, each stack starts with a frame "command[pid]".
// Equal stacks are summed; stacks whose value is 0 are left out.
func (r *Report) collapsed(w io.Writer) error {
	stacks, err := r.valueStacks()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	for _, s := range stacks {
		fmt.Fprintf(bw, "%s %d\n", strings.Join(s.frames, ";"), s.value)
	}
	return bw.Flush()
}

// valueStack is one stack of the collapsed and flame graph exports: its
// frames, outermost first, and its value.
type valueStack struct {
	frames []string
	value  uint64
}

// collapsedValue is Options.CollapsedValue checked, its default filled in.
func (r *Report) collapsedValue() (string, error) {
	value := r.opts.CollapsedValue
	if value == "" {
		value = CollapsedValues[0]
	}
	if !slices.Contains(CollapsedValues, value) {
		return "", fmt.Errorf("report: unknown value %q (want %s)", value, strings.Join(CollapsedValues, ", "))
	}
	return value, nil
}

// valueStacks are the stacks with the value Options.CollapsedValue
// chooses, equal stacks summed, none of value 0, biggest first.
func (r *Report) valueStacks() ([]valueStack, error) {
	value, err := r.collapsedValue()
	if err != nil {
		return nil, err
	}
	leaked := strings.HasPrefix(value, "leaked-")
	blocks := strings.HasSuffix(value, "-blocks")
	sums := map[string]uint64{}
	var order []string
	frames := map[string][]string{}
	imgs := r.Images()
	for _, p := range imgs {
		var prefix []string
		if len(imgs) > 1 {
			prefix = []string{foldName(fmt.Sprintf("%s[%d]", commandName(p), p.Info.PID))}
		}
		addStack := func(id heap.StackID, v uint64) {
			if v == 0 {
				return
			}
			fs := append(slices.Clip(prefix), r.folded(p, id)...)
			k := strings.Join(fs, ";")
			if _, ok := sums[k]; !ok {
				order = append(order, k)
				frames[k] = fs
			}
			sums[k] += v
		}
		if leaked {
			for _, l := range r.allLeaks(p) {
				if blocks {
					addStack(l.Stack, l.Blocks)
				} else {
					addStack(l.Stack, l.Bytes)
				}
			}
			continue
		}
		for id := 0; id < p.NumSites(); id++ {
			s := p.Site(heap.StackID(id))
			if blocks {
				addStack(heap.StackID(id), s.Allocs)
			} else {
				addStack(heap.StackID(id), s.AllocBytes)
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return sums[order[i]] > sums[order[j]] })
	out := make([]valueStack, len(order))
	for i, k := range order {
		out[i] = valueStack{frames[k], sums[k]}
	}
	return out, nil
}

// folded is stack id of p as the exports name its frames, outermost
// first.
func (r *Report) folded(p *heap.Process, id heap.StackID) []string {
	fs := r.Stack(p, id)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[len(fs)-1-i] = foldName(FoldedFrame(f))
	}
	if len(names) == 0 {
		return []string{"[no stack]"}
	}
	return names
}

// FoldedFrame names a frame in the collapsed export: its function, else
// "module+0xoffset" (the module's base name), else its address.
func FoldedFrame(f Frame) string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Module != "":
		return fmt.Sprintf("%s+0x%x", baseName(f.Module), f.Offset)
	}
	return fmt.Sprintf("0x%x", f.Address)
}

func baseName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// foldName keeps a frame's name from breaking the line format: no ";" (the
// separator) and no line breaks.
func foldName(s string) string {
	return strings.NewReplacer(";", ":", "\n", " ", "\r", " ").Replace(s)
}
