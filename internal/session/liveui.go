package session

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/render/webui"
)

// liveUI is the web UI of `leakpath run --ui`: while the program runs, the
// chart, flame graphs and diff from an index the model feeds; at its end,
// the whole page of the finished model, served until SIGINT or SIGTERM.
type liveUI struct {
	srv    *webui.Server
	hs     *http.Server
	url    string
	mu     sync.Mutex // the index and the engines, which the goroutine applying events changes
	ix     *webui.Index
	inner  Observers
	usage  UIUsage
	sym    *Symbolizer
	served chan error

	stacksMu sync.Mutex
	stacks   map[webui.SiteKey]rawStack // the sites' frames, copied when first seen
}

// rawStack is a stack as the model had it: return addresses and their
// modules (nil: none known).
type rawStack struct {
	addrs []uint64
	mods  []*heap.Module
}

// startLiveUI listens on addr and serves the live view; the address goes
// to stderr (the program's stdout is its own).
func startLiveUI(addr, title string, sym *Symbolizer, stderr io.Writer) (*liveUI, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--ui-listen: %w", err)
	}
	usage, err := StartUIUsage(sym)
	if err != nil {
		ln.Close()
		return nil, err
	}
	acc, err := webui.NewAccess(addr, ln.Addr())
	if err != nil {
		ln.Close()
		return nil, err
	}
	u := &liveUI{srv: webui.NewServer(), ix: webui.NewIndex(), sym: sym, usage: usage,
		stacks: map[webui.SiteKey]rawStack{}, served: make(chan error, 1)}
	u.inner = append(Observers{u.ix}, usage.Observers()...)
	u.srv.Live(&webui.Data{Title: title, Index: u.ix, Names: u.names}, &u.mu)
	u.hs = &http.Server{Handler: u.srv.Handler(acc), ReadHeaderTimeout: 10 * time.Second}
	u.url = acc.URL()
	go func() { u.served <- u.hs.Serve(ln) }()
	fmt.Fprintf(stderr, "leakpath: live view at %s\n", u.url)
	return u, nil
}

// capture copies site's frames of p the first time it is seen (on the
// goroutine applying events, which alone may read p's tables; u.mu held).
func (u *liveUI) capture(p *heap.Process, site heap.StackID) {
	k := webui.SiteKey{Image: u.ix.Image(p), Site: site}
	u.stacksMu.Lock()
	defer u.stacksMu.Unlock()
	if _, ok := u.stacks[k]; ok {
		return
	}
	addrs := slices.Clone(p.Stacks.Frames(site))
	mods := make([]*heap.Module, len(addrs))
	for i, m := range p.Stacks.Modules(site) {
		if m >= 0 && int(m) < len(p.Modules) && i < len(mods) {
			mods[i] = p.Modules[m]
		}
	}
	u.stacks[k] = rawStack{addrs, mods}
}

// names names a site's frames, outermost first, as the flame graphs of a
// trace do (the allocator's own frames at the top left out).
func (u *liveUI) names(k webui.SiteKey) []string {
	u.stacksMu.Lock()
	st, ok := u.stacks[k]
	u.stacksMu.Unlock()
	if !ok {
		return []string{"[no stack]"}
	}
	var names []string // innermost first
	top := true
	for i, a := range st.addrs {
		m := st.mods[i]
		if m == nil {
			names = append(names, fmt.Sprintf("0x%x", a))
			top = false
			continue
		}
		sfs := u.sym.Lookup(m, a-m.Bias-1)
		if top && len(sfs) > 0 && sfs[len(sfs)-1].Allocator {
			continue
		}
		top = false
		if len(sfs) == 0 {
			names = append(names, report.FoldedFrame(report.Frame{Module: m.Path, Offset: a - m.Bias}))
		}
		for _, sf := range sfs {
			names = append(names, sf.Function)
		}
	}
	slices.Reverse(names)
	if len(names) == 0 {
		return []string{"[no stack]"}
	}
	return names
}

// Call implements heap.Observer.
func (u *liveUI) Call(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	u.mu.Lock()
	u.inner.Call(p, b, fn, t)
	u.mu.Unlock()
}

// Allocated implements heap.Observer.
func (u *liveUI) Allocated(p *heap.Process, b heap.Block) {
	u.mu.Lock()
	u.inner.Allocated(p, b)
	u.capture(p, b.Site)
	u.mu.Unlock()
}

// Freed implements heap.Observer.
func (u *liveUI) Freed(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	u.mu.Lock()
	u.inner.Freed(p, b, fn, t)
	u.mu.Unlock()
}

// Folded implements heap.Observer.
func (u *liveUI) Folded(p *heap.Process, site heap.StackID, ev *event.Event) {
	u.mu.Lock()
	u.inner.Folded(p, site, ev)
	u.capture(p, site)
	u.mu.Unlock()
}

// Pending implements heap.Observer.
func (u *liveUI) Pending(p *heap.Process, bytes, t uint64) {
	u.mu.Lock()
	u.inner.Pending(p, bytes, t)
	u.mu.Unlock()
}

// Forked implements heap.Observer.
func (u *liveUI) Forked(p *heap.Process) {
	u.mu.Lock()
	u.inner.Forked(p)
	u.mu.Unlock()
}

// finish gives the page the finished run (rep, of the model the index
// followed) and serves it until SIGINT or SIGTERM.
func (u *liveUI) finish(rep *report.Report, tps float64, title string, stderr io.Writer) error {
	u.mu.Lock()
	u.ix.Finish()
	u.ix.Leaked()
	u.mu.Unlock()
	d, err := UIData(title, u.ix, tps, rep, u.usage)
	if err != nil {
		return err
	}
	u.srv.Ready(d, nil)
	fmt.Fprintf(stderr, "leakpath: the run is over; its view stays at %s until Ctrl-C\n", u.url)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveUntil(ctx, u.hs, u.served)
}

// close stops serving.
func (u *liveUI) close() error { return shutdown(u.hs) }
