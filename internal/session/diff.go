package session

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
)

// CheckDiff checks `leakpath diff`'s --format and --kinds: a usage error.
func (o *ReplayOptions) CheckDiff() error {
	_, err := o.diffOptions()
	return err
}

// diffOptions turns --format, --kinds and --max-sites into the diff's
// options.
func (o *ReplayOptions) diffOptions() (report.DiffOptions, error) {
	opts := report.DiffOptions{MaxSites: o.MaxSites}
	if o.Format != "text" && o.Format != "json" {
		return opts, fmt.Errorf("--format %q: want text or json", o.Format)
	}
	if o.Kinds != "" {
		opts.Kinds = map[event.LeakKind]bool{}
		for _, k := range strings.Split(o.Kinds, ",") {
			kind, ok := event.ParseLeakKind(strings.TrimSpace(k))
			if !ok {
				return opts, fmt.Errorf("--kinds: unknown leak kind %q", k)
			}
			opts.Kinds[kind] = true
		}
	}
	return opts, nil
}

// Diff writes what grew from a to b to o.Output (default: stdout); each is
// a snapshot, a JSON report or a trace, replayed. The symbolizer's
// warnings go to stderr.
func Diff(a, b string, o *ReplayOptions, stdout, stderr io.Writer) error {
	opts, err := o.diffOptions()
	if err != nil {
		return err
	}
	sym := NewSymbolizer(o.DebugDirs, func(msg string) { logTo(stderr)("warning: %s", msg) })
	defer sym.Close()
	var docs [2]*report.Doc
	for i, path := range []string{a, b} {
		d, err := readDoc(path, sym)
		if err != nil {
			return err
		}
		docs[i] = d
	}
	d := report.NewDiff(docs[0], docs[1], opts)
	return WriteOutput(o.Output, stdout, func(w io.Writer) error { return d.Generate(w, o.Format) })
}

// readDoc reads a snapshot or JSON report, or replays a trace into one.
func readDoc(path string, sym *Symbolizer) (*report.Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	head, _ := br.Peek(len(tracefile.Magic))
	if string(head) == tracefile.Magic {
		t, err := loadTrace(path, nil, nil)
		if err != nil {
			return nil, err
		}
		rep := report.New(t.model, t.main, report.Options{Symbolize: sym.Lookup, TicksPerSec: t.tps, Warnings: t.warnings, TracePath: path})
		return rep.Doc(path), nil
	}
	first, err := firstNonSpace(br)
	if err != nil || first != '{' {
		return nil, fmt.Errorf("%s: not a leakpath snapshot, JSON report or trace", path)
	}
	return report.ReadDoc(br, path)
}

// firstNonSpace peeks at the first byte of br that is not white space.
func firstNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.ReadByte()
		if err != nil {
			return 0, err
		}
		if b != ' ' && b != '\t' && b != '\n' && b != '\r' {
			return b, br.UnreadByte()
		}
	}
}
