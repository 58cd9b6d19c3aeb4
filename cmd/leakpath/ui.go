package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/progress"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/webui"

	"github.com/leakpath/leakpath/internal/session"
)

type uiOptions struct {
	listen    string
	debugDirs commaList
	leaks     session.LeakOptions
}

func uiFlags(o *uiOptions, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "serve on `ADDR` (host:port; the default is a free port of 127.0.0.1)")
	fs.Var(&o.debugDirs, "debug-dir", "look for separate debug files under `DIR` too (repeatable)")
	addLeakFlags(fs, &o.leaks)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: leakpath ui [flags] TRACE.lpt\n\n"+
			"Serves a web page to explore a trace kept with 'leakpath run -o TRACE.lpt':\n"+
			"memory over time, flame graphs of a chosen time range, the leaks with their\n"+
			"stacks, source lines and root causes, heap use by library, function, thread\n"+
			"and scope. It prints the page's address, which carries the token every\n"+
			"request needs, and serves until interrupted (Ctrl-C).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func cmdUI(args []string, stdout, stderr io.Writer) int {
	var o uiOptions
	fs := uiFlags(&o, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "leakpath ui: want one trace file (usage: leakpath ui [flags] TRACE.lpt)")
		return exitUsage
	}
	if err := serveUI(fs.Arg(0), &o, stdout, stderr); err != nil {
		fail(stderr, err)
		return 1
	}
	return 0
}

// serveUI serves the UI of the trace at path until SIGINT or SIGTERM. The
// page is served at once; the trace loads meanwhile, the page showing how
// far.
func serveUI(path string, o *uiOptions, stdout, stderr io.Writer) error {
	// A file that is no trace fails now, not in the page.
	r, err := tracefile.Open(path)
	if err != nil {
		return err
	}
	r.Close()
	supp, err := o.leaks.SuppressionSet()
	if err != nil {
		return err
	}
	if err := o.leaks.Own.Check(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	acc, err := webui.NewAccess(o.listen, ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	srv := webui.NewServer()
	hs := &http.Server{Handler: srv.Handler(acc), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "leakpath ui: serving %s at %s (Ctrl-C stops)\n", path, acc.URL())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	load := &uiLoad{}
	load.sym = session.NewSymbolizer(o.debugDirs, load.warn)
	loaded := make(chan struct{})
	defer func() {
		// Interrupted while loading: the loader still uses the symbolizer,
		// and the process is about to exit anyway.
		select {
		case <-loaded:
			load.sym.Close()
		default:
		}
	}()
	go func() {
		defer close(loaded)
		bar := progress.OnTerminal(stderr, "reading "+filepath.Base(path))
		d, err := load.run(path, supp, o, func(done, total int64) {
			bar.Set(done, total)
			srv.Progress(done, total)
		})
		bar.Done()
		if err != nil {
			fmt.Fprintf(stderr, "leakpath ui: %v\n", err)
		}
		srv.Ready(d, err)
	}()

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// uiLoad is the loading of a trace for the UI.
type uiLoad struct {
	sym   *session.Symbolizer // goes on resolving the UI's stacks after loading
	rep   *report.Report
	early []string // the symbolizer's warnings before rep was made
}

func (l *uiLoad) warn(msg string) {
	if l.rep == nil {
		l.early = append(l.early, msg)
	} else {
		l.rep.Warn(msg)
	}
}

// run replays the trace into the model, the UI's index and the usage
// tables, and makes the reports the UI serves.
func (l *uiLoad) run(path string, supp *suppress.Set, o *uiOptions, prog func(done, total int64)) (*webui.Data, error) {
	sym := l.sym
	ix := webui.NewIndex()
	usage, err := session.StartUIUsage(sym)
	if err != nil {
		return nil, err
	}
	t, err := loadTraceProgress(path, append(session.Observers{ix}, usage.Observers()...), prog)
	if err != nil {
		return nil, err
	}
	ix.Finish()
	ix.Leaked()
	r := report.New(t.model, t.main, o.leaks.Own.With(report.Options{Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: append(t.warnings, l.early...),
		TracePath: path, Rank: t.meta.Rank, Suppressions: supp, ShowReachable: o.leaks.ShowReachable}))
	l.rep = r
	return session.UIData(filepath.Base(path), ix, t.tps, r, usage)
}
