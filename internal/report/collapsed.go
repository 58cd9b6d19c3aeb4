package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/leakpath/leakpath/internal/heap"
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
	value := r.opts.CollapsedValue
	if value == "" {
		value = CollapsedValues[0]
	}
	leaked := strings.HasPrefix(value, "leaked-")
	blocks := strings.HasSuffix(value, "-blocks")
	switch value {
	case "leaked-bytes", "allocated-bytes", "leaked-blocks", "allocated-blocks":
	default:
		return fmt.Errorf("report: unknown collapsed value %q (want %s)", value, strings.Join(CollapsedValues, ", "))
	}
	sums := map[string]uint64{}
	var order []string
	imgs := r.Images()
	for _, p := range imgs {
		prefix := ""
		if len(imgs) > 1 {
			prefix = foldName(fmt.Sprintf("%s[%d]", commandName(p), p.Info.PID)) + ";"
		}
		addStack := func(id heap.StackID, v uint64) {
			if v == 0 {
				return
			}
			k := prefix + r.folded(p, id)
			if _, ok := sums[k]; !ok {
				order = append(order, k)
			}
			sums[k] += v
		}
		if leaked {
			for _, l := range r.leaks(p) {
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
	bw := bufio.NewWriter(w)
	for _, k := range order {
		fmt.Fprintf(bw, "%s %d\n", k, sums[k])
	}
	return bw.Flush()
}

// folded is stack id of p as one line of frames, outermost first.
func (r *Report) folded(p *heap.Process, id heap.StackID) string {
	fs := r.Stack(p, id)
	names := make([]string, len(fs))
	for i, f := range fs {
		names[len(fs)-1-i] = foldName(FoldedFrame(f))
	}
	if len(names) == 0 {
		return "[no stack]"
	}
	return strings.Join(names, ";")
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
