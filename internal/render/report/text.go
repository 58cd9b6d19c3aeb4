package report

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
	"golang.org/x/sys/unix"
)

// text writes the report for people: per image a summary, then its leaks
// biggest first, then improper uses; a last line sums up.
func (r *Report) text(out io.Writer) error {
	return termsafe.Filter(out, r.writeText)
}

// writeText is text without the escapes of the target's names.
func (r *Report) writeText(out io.Writer) error {
	w := bufio.NewWriter(out)
	imgs := r.Images()
	var own, libs, errs int
	var leakBytes uint64
	for i, p := range imgs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		o, l, e := r.textImage(w, p, i == 0)
		own += o
		libs += l
		errs += e
		if !execd(p) {
			leakBytes += r.totals(p).LiveBytes
		}
	}
	if used := r.SuppressionsUsed(); len(used) > 0 {
		fmt.Fprintln(w, "leakpath: suppressions used:")
		for _, u := range used {
			fmt.Fprintf(w, "  %s (%s) %s\n", plural64(u.Count, "block"), bytes(u.Bytes), u.Suppression)
		}
	}
	for _, warn := range r.warnings {
		fmt.Fprintf(w, "leakpath: warning: %s\n", warn)
	}
	if note := r.linesNoteFor(true); note != "" {
		fmt.Fprintf(w, "leakpath: %s\n", note)
	}
	notFreed := "not freed"
	if r.opts.Snapshot {
		notFreed = "live at the snapshot"
	}
	fmt.Fprintf(w, "leakpath: %s (%s) %s", plural(own+libs, "leak group"), bytes(leakBytes), notFreed)
	if libs > 0 {
		fmt.Fprintf(w, ", %s in your code", count(own))
	}
	fmt.Fprintf(w, "; %s.", plural(errs, "improper use"))
	if r.opts.TracePath != "" {
		fmt.Fprintf(w, " Trace: %s", r.opts.TracePath)
	}
	fmt.Fprintln(w)
	return w.Flush()
}

// textImage writes image p's report; it returns the leak groups it
// listed, the user's and the libraries', and its improper uses.
func (r *Report) textImage(w *bufio.Writer, p *heap.Process, first bool) (nown, nlibs, errs int) {
	t := r.totals(p)
	switch {
	case r.opts.LeakCheck:
		fmt.Fprint(w, "leakpath: leak check: ")
	case r.opts.Snapshot && r.opts.Label != "":
		fmt.Fprintf(w, "leakpath: snapshot %q: ", r.opts.Label)
	case r.opts.Snapshot:
		fmt.Fprint(w, "leakpath: snapshot: ")
	default:
		fmt.Fprint(w, "leakpath: ")
	}
	fmt.Fprintf(w, "%s %s", termsafe.String(commandName(p)), r.outcome(p))
	if first && r.opts.Elapsed > 0 {
		fmt.Fprintf(w, " after %.1f s", r.opts.Elapsed.Seconds())
	}
	fmt.Fprintf(w, " (pid %d", p.Info.PID)
	if first && r.opts.Rank != nil {
		fmt.Fprintf(w, ", rank %d", *r.opts.Rank)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "  %s (%s), %s", plural64(t.Allocations, "allocation"), bytes(t.AllocatedBytes), plural64(t.Frees, "free"))
	if t.PeakBytes > 0 {
		fmt.Fprintf(w, ", peak %s at %.3g s", bytes(t.PeakBytes), r.seconds(p, t.PeakTime))
		if t.Folded > 0 && t.PendingHighs == 0 {
			// A trace from before the agent wrote its pending bytes:
			// folded pairs are never live in the model (docs/design.md, "Folding").
			fmt.Fprintf(w, " (not counting %s folded)", plural64(t.Folded, "short-lived block"))
		}
	}
	at := "not freed at exit"
	switch {
	case execd(p):
		at = "not freed at exec"
	case r.opts.Snapshot:
		at = "live"
	case p.End != nil && p.End.Detached:
		at = "live at detach"
	}
	fmt.Fprintf(w, ",\n  %s temporary; %s (%s) %s\n", count(t.Temporary), plural64(t.LiveBlocks, "block"), bytes(t.LiveBytes), at)
	if calls := fnCalls(t); len(calls) > 0 {
		fmt.Fprintf(w, "  calls: %s\n", strings.Join(calls, ", "))
	}
	for _, a := range r.Allocators(p) {
		fmt.Fprintf(w, "  %s\n", termsafe.String(allocatorLine(a)))
	}
	if t.FailedAllocs > 0 {
		fmt.Fprintf(w, "  %s failed\n", plural64(t.FailedAllocs, "allocation"))
	}
	if p.Info.Attached {
		// Everything above counts from the attach on.
		fmt.Fprintf(w, "  recorded since attach only: blocks allocated before are unknown (%s of them)\n", plural64(t.UnknownFrees, "free"))
	}
	if execd(p) {
		// exec discards the heap: nothing there is a leak of this image.
		fmt.Fprintln(w, "  (its heap was discarded by exec: the blocks not freed are not listed)")
		r.textErrors(w, p)
		return 0, 0, len(p.Errors)
	}
	if p.Info.ForkID != 0 && p.Info.ParentProc >= 0 {
		fmt.Fprintf(w, "  forked from pid %d: blocks it inherited count as not freed unless it freed them\n", r.s.Procs[p.Info.ParentProc].Info.PID)
	}
	if p.LeakCheckOff {
		// As LeakSanitizer: the program asked for no leak check.
		fmt.Fprintln(w, "  leak check turned off by the program (its __lsan_is_turned_off returned nonzero): no leaks are listed")
		r.textErrors(w, p)
		return 0, 0, len(p.Errors)
	}
	r.textKinds(w, p)
	var own, libs []leak
	ls := r.leaks(p)
	if r.opts.ShowReachable {
		ls = r.allLeaks(p)
	}
	for _, l := range ls {
		if l.supp == nil && (l.Kind != event.Reachable || r.opts.ShowReachable) {
			if l.own {
				own = append(own, l)
			} else {
				libs = append(libs, l)
			}
		}
	}
	r.textLeaks(w, p, own)
	if len(libs) > 0 {
		fmt.Fprintf(w, "\nLIBRARY LEAKS, not in your code: ")
		if r.opts.ShowLibraryLeaks {
			fmt.Fprintln(w, "listed below")
		} else {
			fmt.Fprintln(w, "--show-library-leaks lists them (--own PATTERN makes a module yours)")
		}
		for _, s := range librarySummaries(libItems(libs)) {
			fmt.Fprintf(w, "  %s: %s\n", libName(s.lib), s.text())
		}
		if r.opts.ShowLibraryLeaks {
			r.textLeaks(w, p, libs)
		}
	}
	r.textStale(w, p)
	r.textErrors(w, p)
	r.textScopes(w, p)
	r.textTypes(w, p)
	return len(own), len(libs), len(p.Errors)
}

// textLeaks writes leak groups in full, at most MaxLeaks of them.
func (r *Report) textLeaks(w *bufio.Writer, p *heap.Process, leaks []leak) {
	for i, g := range leaks {
		if i >= r.opts.MaxLeaks {
			var rest uint64
			for _, h := range leaks[i:] {
				rest += h.Bytes
			}
			fmt.Fprintf(w, "\n... %s more (%s); see --json for all\n", plural(len(leaks)-i, "leak group"), bytes(rest))
			break
		}
		fmt.Fprintf(w, "\nLEAK %s in %s", bytes(g.Bytes), plural64(g.Blocks, "block"))
		if g.Kind != event.Unclassified {
			fmt.Fprintf(w, " (%s)", g.Kind)
		}
		if g.IndirectBlocks > 0 {
			fmt.Fprintf(w, ", plus %s in %s indirectly", bytes(g.IndirectBytes), plural64(g.IndirectBlocks, "block"))
		}
		if g.fn != 0 {
			fmt.Fprintf(w, " from %s", g.fn)
		}
		if g.allocs > g.Blocks {
			fmt.Fprintf(w, " (%s of %s allocated here)", count(g.Blocks), count(g.allocs))
		}
		fmt.Fprintln(w)
		if g.stacks > 1 {
			fmt.Fprintf(w, "  (%d stacks folded: they differ only in return addresses inside functions without debug information)\n", g.stacks)
		}
		r.textStack(w, p, g.Stack)
		if rc := r.rootCause(p, g.Stack); rc != nil && g.Kind != event.Indirect && (g.Kind != event.Reachable || rc.Status == event.RootCauseFound) {
			r.textRootCause(w, p, rc)
		}
		if g.Kind == event.Indirect && g.Owner != 0 {
			fmt.Fprintln(w, "  held by a definite leak allocated at:")
			fs := r.Stack(p, g.Owner)
			if len(fs) > 0 {
				fmt.Fprintf(w, "    %s\n", textFrame(fs[0]))
			}
		}
	}
}

// textKinds writes the sums by leak kind, memcheck's LEAK SUMMARY, and
// the suppressions that hid leaks.
func (r *Report) textKinds(w *bufio.Writer, p *heap.Process) {
	if p.Scan == nil {
		return
	}
	if p.Scan.Error != "" {
		fmt.Fprintf(w, "  leak kinds unknown: the scan failed: %s\n", p.Scan.Error)
		return
	}
	kinds, supp := r.byKind(p)
	var parts []string
	for _, k := range []event.LeakKind{event.Definite, event.Indirect, event.Possible, event.Reachable, event.Unclassified} {
		if k == event.Unclassified && kinds[k].Blocks == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s in %s", k, bytes(kinds[k].Bytes), plural64(kinds[k].Blocks, "block")))
	}
	if supp.Blocks > 0 {
		parts = append(parts, fmt.Sprintf("suppressed %s in %s", bytes(supp.Bytes), plural64(supp.Blocks, "block")))
	}
	fmt.Fprintf(w, "  by kind: %s", strings.Join(parts, ", "))
	if r.opts.Snapshot {
		fmt.Fprintf(w, " (paused %.3g s)", float64(p.Scan.PauseNs)/1e9)
	}
	fmt.Fprintln(w)
	if kinds[event.Reachable].Blocks > 0 && !r.opts.ShowReachable {
		fmt.Fprintln(w, "  (still reachable blocks are not listed; --show-reachable lists them)")
	}
}

// noStack says why an error has no stack: a realloc the program died in
// left only its begin record (the stack comes with the call's return).
func noStack(e heap.Error) string {
	if e.Fn == event.ReallocFn || e.Fn == event.ReallocArray {
		return "  (no stack: the program died in this realloc)"
	}
	return "  (stack of the free not recorded)"
}

func (r *Report) textErrors(w *bufio.Writer, p *heap.Process) {
	for _, e := range p.Errors {
		fmt.Fprintf(w, "\n%s", errorTitle(e))
		if e.Count > 1 {
			fmt.Fprintf(w, " (%s times)", count(e.Count))
		}
		fmt.Fprintf(w, " at 0x%x\n", e.Addr)
		if e.Stack != 0 {
			r.textStack(w, p, e.Stack)
		} else {
			fmt.Fprintln(w, noStack(e))
		}
		if e.FreeStack != 0 && e.FreeCallSite {
			fmt.Fprintln(w, "  first freed at (its call site only: the pair was folded; --fold=false records the whole stack):")
			r.textStack(w, p, e.FreeStack)
		} else if e.FreeStack != 0 {
			fmt.Fprintln(w, "  first freed at:")
			r.textStack(w, p, e.FreeStack)
		}
		if e.AllocStack != 0 {
			fmt.Fprintf(w, "  allocated by %s at:\n", e.AllocFn)
			r.textStack(w, p, e.AllocStack)
		}
	}
}

func errorTitle(e heap.Error) string {
	switch e.Kind {
	case heap.InvalidFree:
		return fmt.Sprintf("INVALID FREE: %s of an address that was never allocated", e.Fn)
	case heap.DoubleFree:
		return fmt.Sprintf("DOUBLE FREE: %s of a block already freed", e.Fn)
	case heap.MismatchedFree:
		return fmt.Sprintf("MISMATCHED FREE: %s of a block allocated by %s", e.Fn, e.AllocFn)
	case heap.InvalidRealloc:
		return fmt.Sprintf("INVALID REALLOC: %s of an address that was never allocated", e.Fn)
	case heap.PoolDestroyedLive:
		return "POOL DESTROYED WITH LIVE OBJECTS: an object of a pool still live when its pool was destroyed"
	}
	return e.Kind.String()
}

func (r *Report) textStack(w *bufio.Writer, p *heap.Process, id heap.StackID) {
	writeFrames(w, "  ", r.Stack(p, id), r.opts.MaxFrames)
}

// writeFrames writes a stack, a frame per line, at most max of them.
func writeFrames(w *bufio.Writer, indent string, fs []Frame, max int) {
	if len(fs) == 0 {
		fmt.Fprintf(w, "%s(no stack)\n", indent)
		return
	}
	for i, f := range fs {
		if i >= max {
			fmt.Fprintf(w, "%s... %d more frames\n", indent, len(fs)-i)
			break
		}
		fmt.Fprintf(w, "%s#%-2d %s\n", indent, i, textFrame(f))
	}
}

// textFrame is Frame.String for a line of a text report: a name with a
// newline in it (the target's) cannot make lines of its own.
func textFrame(f Frame) string { return termsafe.String(f.String()) }

// count formats n with thousands separators.
func count[T ~int | ~uint64](n T) string {
	s := fmt.Sprint(n)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return count(n) + " " + what + "s"
}

func plural64(n uint64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return count(n) + " " + what + "s"
}

// bytes formats a byte count: exact below 10 kB, else with a decimal unit.
func bytes(n uint64) string {
	if n < 10000 {
		return count(n) + " B"
	}
	v := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 1000 {
			return strconv.FormatFloat(v, 'f', 1, 64) + " " + u
		}
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " PB"
}

func signalName(sig int32) string {
	if n := unix.SignalName(syscall.Signal(sig)); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", sig)
}
