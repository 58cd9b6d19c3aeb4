package report

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// rootCause returns the analysis of p's site, or nil.
func (r *Report) rootCause(p *heap.Process, site heap.StackID) *event.RootCauseInfo {
	return p.RootCauses[site]
}

// codeFrame symbolizes an instruction's address (not a return address).
func (r *Report) codeFrame(p *heap.Process, addr uint64) Frame {
	// frame takes return addresses (it looks up the byte before).
	f := r.frame(p, p.ModuleOf(addr), addr+1)[0] // the innermost inlined function holds it
	f.Address, f.Offset = addr, f.Offset-1
	return f
}

// textRootCause writes the root cause of a leak group.
func (r *Report) textRootCause(w *bufio.Writer, p *heap.Process, rc *event.RootCauseInfo) {
	if rc.Status != event.RootCauseFound {
		fmt.Fprintf(w, "  root cause: %s", strings.ReplaceAll(rc.Status.String(), "_", " "))
		if rc.Note != "" {
			fmt.Fprintf(w, " (%s)", rc.Note)
		}
		if rc.Traced > 0 {
			fmt.Fprintf(w, "; traced %s: %d freed, %d leaked", plural(int(rc.Traced), "execution"), rc.Freed, rc.Leaked)
		}
		fmt.Fprintln(w)
		return
	}
	fmt.Fprint(w, "  root cause: ")
	for i, a := range rc.Functions {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprint(w, textFrame(r.codeFrame(p, a)))
	}
	for _, b := range rc.Branches {
		f := r.codeFrame(p, b.Addr)
		way := "not taken"
		if b.LeaksWhenTaken {
			way = "taken"
		}
		fmt.Fprintf(w, "\n    leaks when the branch at %s", termsafe.String(codePlace(f)))
		if src := sourceLine(f.File, f.Line); src != "" {
			fmt.Fprintf(w, " `%s`", termsafe.String(src))
		}
		// Where it went says more than the jump's direction, which is
		// the compiler's choice.
		if b.To != 0 {
			t := r.codeFrame(p, b.To)
			fmt.Fprintf(w, " goes to %s", termsafe.String(codePlace(t)))
			if src := sourceLine(t.File, t.Line); src != "" && t.Line != f.Line {
				fmt.Fprintf(w, " `%s`", termsafe.String(src))
			}
			fmt.Fprintf(w, " (jump %s)", way)
		} else {
			fmt.Fprintf(w, " is %s", way)
		}
	}
	fmt.Fprintf(w, "\n    traced %s: %d freed, %d leaked\n", plural(int(rc.Traced), "execution"), rc.Freed, rc.Leaked)
	if rc.Note != "" {
		// The branches' scores, in their order.
		fmt.Fprintf(w, "    %s\n", rc.Note)
	}
}

// codePlace says where a frame is: file:line, or module+offset.
func codePlace(f Frame) string {
	if f.File != "" {
		return fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
}

// sourceLine returns line n of file, trimmed ("" if unreadable). The
// file is named by the program's debug info (#line 1 "/etc/shadow", a
// FIFO): it is read under ReadSource's rules.
func sourceLine(file string, n int) string {
	if file == "" || n <= 0 {
		return ""
	}
	b, err := ReadSource(file)
	if err != nil {
		return ""
	}
	for i, line := range strings.Split(string(b), "\n") {
		if i+1 == n {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// jsonRootCause is the report's root_cause object (docs/json.md).
type jsonRootCause struct {
	Status    string      `json:"status"`
	Traced    uint32      `json:"traced_runs"`
	Freed     uint32      `json:"freed_runs"`
	Leaked    uint32      `json:"leaked_runs"`
	Functions []jsonFrame `json:"functions"`
	Branches  []jsonFrame `json:"branches"`
	// LeaksWhenTaken: per branch, whether the leaking executions took
	// it; LeakTargets: where they went from it.
	LeaksWhenTaken []bool      `json:"leaks_when_taken"`
	LeakTargets    []jsonFrame `json:"leak_targets"`
	Note           string      `json:"note,omitempty"`
	WindowSeconds  float64     `json:"window_seconds"`
	Stops          uint64      `json:"stops"`
	FoundAfter     float64     `json:"found_after_seconds"`
}

func (r *Report) jsonRootCause(p *heap.Process, rc *event.RootCauseInfo) *jsonRootCause {
	out := &jsonRootCause{Status: rc.Status.String(), Traced: rc.Traced, Freed: rc.Freed, Leaked: rc.Leaked, Note: rc.Note,
		WindowSeconds: float64(rc.WindowNs) / 1e9, Stops: rc.Stops, FoundAfter: float64(rc.FoundAfterNs) / 1e9,
		Functions: []jsonFrame{}, Branches: []jsonFrame{}, LeaksWhenTaken: []bool{}, LeakTargets: []jsonFrame{}}
	for _, a := range rc.Functions {
		out.Functions = append(out.Functions, jsonFrames([]Frame{r.codeFrame(p, a)})...)
	}
	for _, b := range rc.Branches {
		out.Branches = append(out.Branches, jsonFrames([]Frame{r.codeFrame(p, b.Addr)})...)
		out.LeaksWhenTaken = append(out.LeaksWhenTaken, b.LeaksWhenTaken)
		out.LeakTargets = append(out.LeakTargets, jsonFrames([]Frame{r.codeFrame(p, b.To)})...)
	}
	return out
}
