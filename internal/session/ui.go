package session

import (
	"bytes"
	"context"
	"errors"
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
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/progress"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/webui"
)

// ServeUI serves the UI of the trace at path (`leakpath ui`) on o.Listen
// until SIGINT or SIGTERM; the page's address goes to stdout. The page is
// served at once; the trace loads meanwhile, the page showing how far.
func ServeUI(path string, o *ReplayOptions, stdout, stderr io.Writer) error {
	// A file that is no trace fails now, not in the page.
	r, err := tracefile.Open(path)
	if err != nil {
		return err
	}
	r.Close()
	supp, err := o.Leaks.SuppressionSet()
	if err != nil {
		return err
	}
	if err := o.Leaks.Own.Check(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	acc, err := webui.NewAccess(o.Listen, ln.Addr())
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
	load.sym = NewSymbolizer(o.DebugDirs, load.warn)
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
	return serveUntil(ctx, hs, served)
}

// serveUntil waits for ctx's end, then shuts hs down (within 5 s); hs
// failing to serve (served) ends it sooner.
func serveUntil(ctx context.Context, hs *http.Server, served <-chan error) error {
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	return shutdown(hs)
}

// shutdown stops hs serving, giving the requests under way 5 s.
func shutdown(hs *http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// uiLoad is the loading of a trace for the UI.
type uiLoad struct {
	sym   *Symbolizer // goes on resolving the UI's stacks after loading
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
func (l *uiLoad) run(path string, supp *suppress.Set, o *ReplayOptions, prog func(done, total int64)) (*webui.Data, error) {
	sym := l.sym
	ix := webui.NewIndex()
	usage, err := StartUIUsage(sym)
	if err != nil {
		return nil, err
	}
	t, err := loadTrace(path, append(Observers{ix}, usage.Observers()...), prog)
	if err != nil {
		return nil, err
	}
	ix.Finish()
	ix.Leaked()
	r := report.New(t.model, t.main, o.Leaks.Own.With(report.Options{Symbolize: sym.Lookup, SymbolName: sym.SymbolName, TicksPerSec: t.tps, Warnings: append(t.warnings, l.early...),
		TracePath: path, Rank: t.meta.Rank, Suppressions: supp, ShowReachable: o.Leaks.ShowReachable}))
	l.rep = r
	return UIData(filepath.Base(path), ix, t.tps, r, usage)
}

// UIUsage is the heap use accounting of the UI's tables, by unit.
type UIUsage map[string]*Usage

// StartUIUsage starts accounting heap use by each of webui.UsageUnits.
func StartUIUsage(sym *Symbolizer) (UIUsage, error) {
	usage := UIUsage{}
	for _, by := range webui.UsageUnits {
		u, err := StartUsage(&UsageOptions{By: by}, sym)
		if err != nil {
			return nil, err
		}
		usage[by] = u
	}
	return usage, nil
}

// Observers are the engines that follow the model (units by scope are
// counted by the model itself).
func (usage UIUsage) Observers() Observers {
	var obs Observers
	for _, u := range usage {
		if u.engine.Observes() {
			obs = append(obs, u.engine)
		}
	}
	return obs
}

// UIData is what the UI shows of a finished model: the index (finished),
// rep and its JSON, and the usage tables.
func UIData(title string, ix *webui.Index, tps float64, rep *report.Report, usage UIUsage) (*webui.Data, error) {
	var js bytes.Buffer
	if err := rep.Generate(&js, "json"); err != nil {
		return nil, err
	}
	d := &webui.Data{Title: title, Index: ix, TicksPerSec: tps, Report: rep, ReportJSON: js.Bytes(), Usage: map[string][]byte{}}
	for by, u := range usage {
		var b bytes.Buffer
		if err := u.Report(rep, nil).Generate(&b, "json"); err != nil {
			return nil, fmt.Errorf("usage by %s: %w", by, err)
		}
		d.Usage[by] = b.Bytes()
	}
	return d, nil
}

// Observers tells each of its observers of every heap change.
type Observers []heap.Observer

func (obs Observers) Call(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	for _, o := range obs {
		o.Call(p, b, fn, t)
	}
}

func (obs Observers) Allocated(p *heap.Process, b heap.Block) {
	for _, o := range obs {
		o.Allocated(p, b)
	}
}

func (obs Observers) Freed(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	for _, o := range obs {
		o.Freed(p, b, fn, t)
	}
}

func (obs Observers) Folded(p *heap.Process, site heap.StackID, ev *event.Event) {
	for _, o := range obs {
		o.Folded(p, site, ev)
	}
}

func (obs Observers) Pending(p *heap.Process, bytes, t uint64) {
	for _, o := range obs {
		o.Pending(p, bytes, t)
	}
}

func (obs Observers) Forked(p *heap.Process) {
	for _, o := range obs {
		o.Forked(p)
	}
}
