package usagetable

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/analysis/usage"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// explain says in words what a unit is under an attribution.
func (r *Report) explain() string {
	switch r.By {
	case usage.ByThread:
		return "by thread (the thread that allocated the block)"
	case usage.BySite:
		return "by allocation site (stack)"
	case usage.ByScope:
		return "by scope (LEAKPATH_SCOPE, leakpath_scope_begin/end; nested scopes count in their parents)"
	case usage.ByType:
		return "by type (the live blocks of the last typed scan, run --types)"
	case usage.ByTypeModule:
		return "by the module that allocated the live blocks of the last typed scan (run --types)"
	case usage.ByTypeFile:
		return "by the source file that allocated the live blocks of the last typed scan (run --types)"
	case usage.ByNamespace:
		return "by the namespace of the types of the live blocks of the last typed scan (run --types)"
	}
	what := map[usage.By]string{usage.ByLibrary: "library", usage.ByFunction: "function"}[r.By]
	switch r.Attribution {
	case usage.Entry:
		if r.PerCall && r.By == usage.ByFunction {
			return "by function call, entry attribution (each invocation of the function main, or the thread's start routine, called on the way to the allocator)"
		}
		if r.PerCall {
			return "by library call, entry attribution (each invocation of the first library called on the way from main, or the thread's start routine, to the allocator)"
		}
		if r.By == usage.ByFunction {
			return "by function, entry attribution (the function main, or the thread's start routine, called on the way to the allocator)"
		}
		return "by library, entry attribution (the first library called on the way from main, or the thread's start routine, to the allocator)"
	case usage.Inclusive:
		return fmt.Sprintf("by %s, inclusive attribution (every %s on the stack counts the block; rows overlap)", what, what)
	}
	return fmt.Sprintf("by %s, caller attribution (the %s that called the allocator)", what, what)
}

// text writes a table per image: its units, biggest first, then, with
// intervals, what each unit did in each of them.
func (r *Report) text(out io.Writer) error {
	return termsafe.Filter(out, r.writeText)
}

func (r *Report) writeText(out io.Writer) error {
	w := bufio.NewWriter(out)
	max := r.MaxUnits
	if max <= 0 {
		max = 30
	}
	for i := range r.Images {
		img := &r.Images[i]
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "leakpath: heap use %s\n", r.explain())
		unit := "unit"
		if r.By == usage.ByScope {
			unit = "scope"
		}
		fmt.Fprintf(w, "%s (pid %d) %s: %s\n", termsafe.String(img.Name), img.PID, img.Outcome, plural(len(img.Units), unit))
		if r.By == usage.ByScope {
			rows := make([]report.ScopeRow, len(img.Units))
			for j := range img.Units {
				rows[j] = *img.Units[j].Scope
			}
			if len(rows) > 0 || img.ScopeAnomalies > 0 {
				w.Flush()
				if err := report.WriteScopes(w, rows, img.ScopeAnomalies, 24); err != nil {
					return err
				}
			}
			continue
		}
		if len(img.Units) == 0 {
			continue
		}
		if r.By.Typed() {
			rows := [][]string{{"bytes", "blocks", r.By.String()}}
			for j := range img.Units[:min(max, len(img.Units))] {
				u := &img.Units[j]
				rows = append(rows, []string{sbytes(u.CurrentBytes), scount(u.CurrentBlocks), termsafe.String(u.Name)})
			}
			report.Table(w, "  ", rows)
			if n := len(img.Units); n > max {
				fmt.Fprintf(w, "  ... %s more; see --format json for all\n", plural(n-max, "unit"))
			}
			continue
		}
		fns := usedFns(img)
		head := []string{"current", "blocks", "max", "at s", "min", "at s", "allocated", "blocks"}
		for _, fn := range fns {
			head = append(head, fn.String())
		}
		head = append(head, r.By.String())
		rows := [][]string{head}
		for j := range img.Units {
			if j == max {
				break
			}
			u := &img.Units[j]
			row := []string{sbytes(u.CurrentBytes), scount(u.CurrentBlocks), sbytes(u.MaxBytes), fmt.Sprintf("%.3f", u.MaxSeconds),
				sbytes(u.MinBytes), fmt.Sprintf("%.3f", u.MinSeconds), report.Bytes(u.AllocatedBytes), report.Count(u.AllocatedBlocks)}
			for _, fn := range fns {
				row = append(row, report.Count(u.Calls[fn]))
			}
			rows = append(rows, append(row, r.unitText(u)))
		}
		report.Table(w, "  ", rows)
		if n := len(img.Units); n > max {
			var cur int64
			var alloc uint64
			for _, u := range img.Units[max:] {
				cur += u.CurrentBytes
				alloc += u.AllocatedBytes
			}
			fmt.Fprintf(w, "  ... %s more (%s current, %s allocated); see --format json for all\n",
				plural(n-max, "unit"), sbytes(cur), report.Bytes(alloc))
		}
		if len(img.Intervals) > 0 {
			r.textIntervals(w, img, fns, max)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "leakpath: warning: %s\n", warn)
	}
	return w.Flush()
}

func (r *Report) textIntervals(w *bufio.Writer, img *Image, fns []event.Fn, max int) {
	fmt.Fprintf(w, "\n  over time, per %v (units that did something; net: the change of their size):\n", r.Interval)
	head := []string{"net", "current", "min", "max", "allocated", "blocks"}
	for _, fn := range fns {
		head = append(head, fn.String())
	}
	head = append(head, r.By.String())
	digits := 3 // enough to tell the slices apart
	for x := r.Interval.Seconds(); x < 1e-3 && digits < 9; x *= 10 {
		digits++
	}
	for _, iv := range img.Intervals {
		fmt.Fprintf(w, "  %.*f to %.*f s\n", digits, iv.Start.Seconds(), digits, iv.End.Seconds())
		rows := [][]string{head}
		for j := range iv.Units {
			if j == max {
				break
			}
			u := &iv.Units[j]
			net := sbytes(u.NetBytes)
			if u.NetBytes > 0 {
				net = "+" + net
			}
			row := []string{net, sbytes(u.CurrentBytes), sbytes(u.MinBytes), sbytes(u.MaxBytes),
				report.Bytes(u.AllocatedBytes), report.Count(u.AllocatedBlocks)}
			for _, fn := range fns {
				row = append(row, report.Count(u.Calls[fn]))
			}
			rows = append(rows, append(row, termsafe.String(u.Name)))
		}
		report.Table(w, "    ", rows)
		if n := len(iv.Units); n > max {
			fmt.Fprintf(w, "    ... %s more\n", plural(n-max, "unit"))
		}
	}
}

// unitText names a unit in a table row, the target's names escaped.
func (r *Report) unitText(u *Unit) string { return termsafe.String(r.unitName(u)) }

func (r *Report) unitName(u *Unit) string {
	if u.Call > 0 {
		c := *u
		c.Call = 0
		return fmt.Sprintf("%s (tid %d, %.6f to %.6f s)", r.unitName(&c), u.CallTID, u.CallFirst, u.CallLast)
	}
	switch {
	case u.Kind == usage.KindExecutable:
		return u.Name + " (executable)"
	case u.Kind == usage.KindRuntime:
		return u.Name + " (C runtime)"
	case r.By == usage.ByFunction && u.Module != "" && !strings.Contains(u.Name, "+0x"):
		return u.Name + " in " + filepath.Base(u.Module)
	case r.By == usage.BySite && len(u.Stack) > 1:
		// The first frame names the site; its caller tells apart the
		// sites that share one.
		caller := u.Stack[1].Function
		if caller == "" {
			caller = u.Stack[1].String()
		}
		return u.Name + ", from " + caller
	case r.By == usage.ByThread:
		s := u.Name
		if u.ThreadStart != nil {
			s += fmt.Sprintf(", from %.3f s", *u.ThreadStart)
		}
		if u.ThreadExit != nil {
			s += fmt.Sprintf(" to %.3f s", *u.ThreadExit)
		}
		return s
	}
	return u.Name
}

// usedFns are the allocator functions some unit of img called.
func usedFns(img *Image) []event.Fn {
	var used [event.NumFn]bool
	for i := range img.Units {
		for fn, n := range img.Units[i].Calls {
			used[fn] = used[fn] || n > 0
		}
	}
	var out []event.Fn
	for fn := event.Fn(1); fn < event.NumFn; fn++ {
		if used[fn] {
			out = append(out, fn)
		}
	}
	return out
}

// sbytes formats a signed byte count.
func sbytes(n int64) string {
	if n < 0 {
		return "-" + report.Bytes(uint64(-n))
	}
	return report.Bytes(uint64(n))
}

// scount formats a signed count.
func scount(n int64) string {
	if n < 0 {
		return "-" + report.Count(uint64(-n))
	}
	return report.Count(uint64(n))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return report.Count(uint64(n)) + " " + what + "s"
}
