package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/termsafe"

	"github.com/leakpath/leakpath/internal/session"
)

type diffOptions struct {
	format    string
	output    string
	kinds     string
	maxSites  int
	debugDirs commaList
}

func diffFlags(o *diffOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.format, "format", "text", "output `format`: text or json (leakpath.diff/v1)")
	fs.StringVar(&o.output, "output", "", "write to `FILE` instead of stdout")
	fs.StringVar(&o.kinds, "kinds", "", "count only blocks of these leak `KINDS` (comma-separated: definite, indirect, possible, reachable, unclassified; default: every live block)")
	fs.IntVar(&o.maxSites, "max-sites", 25, "show at most `N` sites that grew in text (JSON has all)")
	fs.Var(&o.debugDirs, "debug-dir", "look for separate debug files under `DIR` too, for traces (repeatable)")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath diff [flags] A B\n\n"+
			"Shows what grew from A to B: the live blocks by allocation site, the sites\n"+
			"that grew most first. A and B are snapshots (leakpath snapshot), JSON\n"+
			"reports (leakpath run --json) or traces (leakpath run -o), in any mix; sites\n"+
			"compare by their symbolized stacks, so A and B may come from different runs.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdDiff(args []string, stdout, stderr io.Writer) int {
	var o diffOptions
	fs := diffFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "leakpath diff: want two files (usage: leakpath diff [flags] A B)")
		return exitUsage
	}
	opts := report.DiffOptions{MaxSites: o.maxSites}
	if o.format != "text" && o.format != "json" {
		fail(stderr, fmt.Errorf("--format %q: want text or json", o.format))
		return exitUsage
	}
	if o.kinds != "" {
		opts.Kinds = map[event.LeakKind]bool{}
		for _, k := range strings.Split(o.kinds, ",") {
			kind, ok := event.ParseLeakKind(strings.TrimSpace(k))
			if !ok {
				fail(stderr, fmt.Errorf("--kinds: unknown leak kind %q", k))
				return exitUsage
			}
			opts.Kinds[kind] = true
		}
	}
	sym := session.NewSymbolizer(o.debugDirs, func(msg string) { fmt.Fprintf(stderr, "leakpath: warning: %s\n", termsafe.Text(msg)) })
	defer sym.Close()
	var docs [2]*report.Doc
	for i, path := range fs.Args() {
		d, err := readDoc(path, sym)
		if err != nil {
			fail(stderr, err)
			return 1
		}
		docs[i] = d
	}
	d := report.NewDiff(docs[0], docs[1], opts)
	if err := session.WriteOutput(o.output, stdout, func(w io.Writer) error { return d.Generate(w, o.format) }); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

// readDoc reads a snapshot or JSON report, or replays a trace into one.
func readDoc(path string, sym *session.Symbolizer) (*report.Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReader(f)
	head, _ := br.Peek(len(tracefile.Magic))
	if string(head) == tracefile.Magic {
		t, err := loadTrace(path)
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
