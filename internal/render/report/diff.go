package report

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
)

// DiffSchema names the JSON diff format.
const DiffSchema = "leakpath.diff/v1"

// Doc is a report as a document: read back from leakpath.report/v1 JSON
// (a snapshot, or a run's --json) or made from a Report. Diff compares two.
type Doc struct {
	Source string // where it came from, as the user named it
	r      jsonReport
}

// Doc returns the report as a document named source.
func (r *Report) Doc(source string) *Doc { return &Doc{Source: source, r: r.jsonReport()} }

// ReadDoc reads a leakpath.report/v1 JSON document.
func ReadDoc(rd io.Reader, source string) (*Doc, error) {
	d := &Doc{Source: source}
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&d.r); err != nil {
		return nil, fmt.Errorf("%s: not a leakpath report: %w", source, err)
	}
	if d.r.Schema != Schema {
		return nil, fmt.Errorf("%s: schema %q, want %q", source, d.r.Schema, Schema)
	}
	return d, nil
}

// DiffOptions shape a diff.
type DiffOptions struct {
	// Kinds counts only the blocks of these kinds (nil: all live blocks;
	// a document without kinds counts as unclassified).
	Kinds     map[event.LeakKind]bool
	MaxSites  int // sites shown in text; default 25 (JSON has all)
	MaxFrames int // frames shown per site in text; default 12
}

// Diff is what changed from one document to another, by allocation site.
type Diff struct {
	A, B  *Doc
	opts  DiffOptions
	sites []*diffSite // changed ones, most grown first
	// Totals of the counted blocks.
	TotalA, TotalB KindTotal
	same           int         // sites without a change
	types          []*diffType // by type, when both are typed (difftypes.go)
}

type diffSite struct {
	key      string
	a, b     KindTotal
	kind     event.LeakKind // the most important kind in B, else in A
	function string
	stack    []jsonFrame
}

func (s *diffSite) deltaBytes() int64  { return int64(s.b.Bytes) - int64(s.a.Bytes) }
func (s *diffSite) deltaBlocks() int64 { return int64(s.b.Blocks) - int64(s.a.Blocks) }

// NewDiff compares the main images of a and b. Sites are allocation
// stacks compared by their symbols (function, file and line of each
// frame; module and offset where there are no lines), so two runs of a
// program compare though their addresses differ.
func NewDiff(a, b *Doc, opts DiffOptions) *Diff {
	if opts.MaxSites == 0 {
		opts.MaxSites = 25
	}
	if opts.MaxFrames == 0 {
		opts.MaxFrames = 12
	}
	d := &Diff{A: a, B: b, opts: opts}
	bySite := map[string]*diffSite{}
	add := func(doc *Doc, inB bool) {
		for _, l := range doc.r.Leaks {
			if l.Kind == staleKind {
				continue // its blocks are listed under their own kind too
			}
			kind, ok := event.ParseLeakKind(l.Kind)
			if !ok {
				kind = event.Unclassified
			}
			if opts.Kinds != nil && !opts.Kinds[kind] {
				continue
			}
			fs := framesOf(l.Stack)
			k := stackKey(fs)
			s := bySite[k]
			if s == nil {
				s = &diffSite{key: k, kind: kind, stack: l.Stack}
				bySite[k] = s
			}
			if s.function == "" {
				s.function = l.Function
			}
			t, total := &s.a, &d.TotalA
			if inB {
				t, total = &s.b, &d.TotalB
				if s.b.Blocks == 0 || heap.KindMoreImportant(kind, s.kind) {
					s.kind = kind
				}
			} else if heap.KindMoreImportant(kind, s.kind) {
				s.kind = kind
			}
			t.Bytes += l.Bytes
			t.Blocks += l.Blocks
			total.Bytes += l.Bytes
			total.Blocks += l.Blocks
		}
	}
	add(a, false)
	add(b, true)
	for _, s := range bySite {
		if s.a == s.b {
			d.same++
			continue
		}
		d.sites = append(d.sites, s)
	}
	d.types = diffTypes(a, b)
	slices.SortFunc(d.sites, func(x, y *diffSite) int {
		if c := cmp.Compare(y.deltaBytes(), x.deltaBytes()); c != 0 {
			return c
		}
		if c := cmp.Compare(y.deltaBlocks(), x.deltaBlocks()); c != 0 {
			return c
		}
		return strings.Compare(x.key, y.key)
	})
	return d
}

// framesOf turns JSON frames back into frames (for stackKey).
func framesOf(js []jsonFrame) []Frame {
	out := make([]Frame, len(js))
	for i, f := range js {
		off, _ := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
		out[i] = Frame{Module: f.Module, Offset: off, Function: f.Function, File: f.File, Line: f.Line, Inlined: f.Inlined}
	}
	return out
}

// Generate writes the diff in format "text" or "json".
func (d *Diff) Generate(w io.Writer, format string) error {
	switch format {
	case "text", "":
		return d.text(w)
	case "json":
		return d.json(w)
	}
	return fmt.Errorf("diff: unknown format %q (want text or json)", format)
}

func (d *Diff) text(out io.Writer) error {
	return termsafe.Filter(out, d.writeText)
}

func (d *Diff) writeText(out io.Writer) error {
	w := bufio.NewWriter(out)
	fmt.Fprintln(w, "leakpath: diff of the live blocks, A to B")
	for _, x := range []struct {
		name string
		doc  *Doc
		t    KindTotal
	}{{"A", d.A, d.TotalA}, {"B", d.B, d.TotalB}} {
		fmt.Fprintf(w, "  %s: %s: %s, %s in %s\n", x.name, x.doc.Source, x.doc.title(), bytes(x.t.Bytes), plural64(x.t.Blocks, "block"))
	}
	grew, shrank, newSites, gone := 0, 0, 0, 0
	for _, s := range d.sites {
		switch {
		case s.a.Blocks == 0:
			newSites++
		case s.b.Blocks == 0:
			gone++
		}
		if s.deltaBytes() > 0 || s.deltaBytes() == 0 && s.deltaBlocks() > 0 {
			grew++
		} else {
			shrank++
		}
	}
	fmt.Fprintf(w, "  change: %s in %s blocks; %s grew (%d new), %d shrank (%d gone), %d unchanged\n",
		signedBytes(int64(d.TotalB.Bytes)-int64(d.TotalA.Bytes)), signedCount(int64(d.TotalB.Blocks)-int64(d.TotalA.Blocks)),
		plural(grew, "site"), newSites, shrank, gone, d.same)
	shown := 0
	for _, s := range d.sites {
		if s.deltaBytes() < 0 || s.deltaBytes() == 0 && s.deltaBlocks() <= 0 {
			continue
		}
		if shown == d.opts.MaxSites {
			fmt.Fprintf(w, "\n... %s more grew; see --json for all\n", pluralWord(grew-shown, "site"))
			break
		}
		shown++
		fmt.Fprintf(w, "\nGREW %s in %s blocks", signedBytes(s.deltaBytes()), signedCount(s.deltaBlocks()))
		if s.kind != event.Unclassified {
			fmt.Fprintf(w, " (%s)", s.kind)
		}
		if s.function != "" {
			fmt.Fprintf(w, " from %s", s.function)
		}
		if s.a.Blocks == 0 {
			fmt.Fprintln(w, ": a new site")
		} else {
			fmt.Fprintf(w, ": %s in %s, then %s in %s\n", bytes(s.a.Bytes), plural64(s.a.Blocks, "block"), bytes(s.b.Bytes), plural64(s.b.Blocks, "block"))
		}
		fs := framesOf(s.stack)
		if len(fs) == 0 {
			fmt.Fprintln(w, "  (no stack)")
		}
		for i, f := range fs {
			if i >= d.opts.MaxFrames {
				fmt.Fprintf(w, "  ... %d more frames\n", len(fs)-i)
				break
			}
			f.Address, _ = strconv.ParseUint(strings.TrimPrefix(s.stack[i].Address, "0x"), 16, 64)
			fmt.Fprintf(w, "  #%-2d %s\n", i, textFrame(f))
		}
	}
	if shown == 0 {
		fmt.Fprintln(w, "\nno site grew")
	}
	d.textTypes(w)
	return w.Flush()
}

// title says what a document is of: the program, its pid, and whether it
// is a snapshot or how it ended.
func (d *Doc) title() string {
	cmd := "?"
	if len(d.r.Command) > 0 {
		cmd = d.r.Command[0]
	}
	what := "report of " + cmd
	if d.r.Snapshot {
		what = "snapshot of " + cmd
	}
	return fmt.Sprintf("%s (pid %d)", what, d.r.PID)
}

type jsonDiff struct {
	Schema string         `json:"schema"`
	A      jsonDiffDoc    `json:"a"`
	B      jsonDiffDoc    `json:"b"`
	Delta  jsonDelta      `json:"delta"`
	Sites  []jsonDiffSite `json:"sites"`
	Same   int            `json:"unchanged_sites"`
	Kinds  []string       `json:"kinds,omitempty"`
	// Types: by type, when both documents are typed (run --types).
	Types []jsonDiffType `json:"types,omitempty"`
}

type jsonDiffDoc struct {
	Source   string    `json:"source"`
	Command  []string  `json:"command"`
	PID      int32     `json:"pid"`
	Snapshot bool      `json:"snapshot"`
	Live     KindTotal `json:"live"`
}

type jsonDelta struct {
	Bytes  int64 `json:"bytes"`
	Blocks int64 `json:"blocks"`
}

type jsonDiffSite struct {
	Delta    jsonDelta   `json:"delta"`
	A        KindTotal   `json:"a"`
	B        KindTotal   `json:"b"`
	Kind     string      `json:"kind"`
	Function string      `json:"function,omitempty"`
	Stack    []jsonFrame `json:"stack"`
}

func (d *Diff) json(w io.Writer) error {
	doc := func(x *Doc, t KindTotal) jsonDiffDoc {
		return jsonDiffDoc{Source: x.Source, Command: x.r.Command, PID: x.r.PID, Snapshot: x.r.Snapshot, Live: t}
	}
	out := jsonDiff{Schema: DiffSchema, A: doc(d.A, d.TotalA), B: doc(d.B, d.TotalB), Same: d.same, Sites: []jsonDiffSite{},
		Delta: jsonDelta{int64(d.TotalB.Bytes) - int64(d.TotalA.Bytes), int64(d.TotalB.Blocks) - int64(d.TotalA.Blocks)}}
	for k := range event.NumLeakKinds {
		if d.opts.Kinds[k] {
			out.Kinds = append(out.Kinds, k.String())
		}
	}
	for _, s := range d.sites {
		out.Sites = append(out.Sites, jsonDiffSite{Delta: jsonDelta{s.deltaBytes(), s.deltaBlocks()}, A: s.a, B: s.b,
			Kind: s.kind.String(), Function: s.function, Stack: s.stack})
	}
	out.Types = d.jsonTypes()
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// signedBytes formats a byte delta with its sign.
func signedBytes(n int64) string {
	if n < 0 {
		return "-" + bytes(uint64(-n))
	}
	return "+" + bytes(uint64(n))
}

func signedCount(n int64) string {
	if n < 0 {
		return "-" + count(uint64(-n))
	}
	return "+" + count(uint64(n))
}
