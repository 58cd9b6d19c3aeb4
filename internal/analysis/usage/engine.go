package usage

import (
	"fmt"
	"sort"
	"time"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/symbols/frame"
)

// By says what a unit is.
type By uint8

// The kinds of units.
const (
	ByLibrary By = iota + 1
	ByFunction
	ByThread
	BySite
	// ByScope: the scopes the program marked (heap.Scope); counted by
	// the model, not by the engine.
	ByScope
	// Units of the types of the live blocks, from the last typed scan
	// (run --types): the type (qualified), the module and the source
	// file of the code that allocated its instances, its namespace.
	ByType
	ByTypeModule
	ByTypeFile
	ByNamespace
)

var byNames = [...]string{ByLibrary: "library", ByFunction: "function", ByThread: "thread", BySite: "site", ByScope: "scope",
	ByType: "type", ByTypeModule: "module", ByTypeFile: "file", ByNamespace: "namespace"}

// typed reports whether units come from a typed scan, not from events.
func (b By) typed() bool { return b >= ByType && b <= ByNamespace }

func (b By) String() string {
	if int(b) < len(byNames) && byNames[b] != "" {
		return byNames[b]
	}
	return fmt.Sprintf("by(%d)", uint8(b))
}

// ParseBy reads "library", "function", "thread", "site", "scope",
// "type", "module", "file" or "namespace".
func ParseBy(s string) (By, error) {
	for b, n := range byNames {
		if n != "" && n == s {
			return By(b), nil
		}
	}
	return 0, fmt.Errorf("unknown unit %q (want library, function, thread, site, scope, type, module, file or namespace)", s)
}

// Attribution says which units of a stack a block counts for (library
// and function units; see the package documentation).
type Attribution uint8

// The attributions.
const (
	Entry Attribution = iota + 1
	Caller
	Inclusive
)

var attributionNames = [...]string{Entry: "entry", Caller: "caller", Inclusive: "inclusive"}

func (a Attribution) String() string {
	if int(a) < len(attributionNames) && attributionNames[a] != "" {
		return attributionNames[a]
	}
	return fmt.Sprintf("attribution(%d)", uint8(a))
}

// ParseAttribution reads "entry", "caller" or "inclusive".
func ParseAttribution(s string) (Attribution, error) {
	for a, n := range attributionNames {
		if n != "" && n == s {
			return Attribution(a), nil
		}
	}
	return 0, fmt.Errorf("unknown attribution %q (want entry, caller or inclusive)", s)
}

// StackFunc returns the frames of stack id of image p, innermost first,
// the allocator's own frames at the top dropped: (*report.Report).Stack.
type StackFunc func(p *heap.Process, id heap.StackID) []frame.Frame

// Options say what an Engine accounts.
type Options struct {
	By By
	// Attribution applies to ByLibrary and ByFunction; 0 means Caller.
	Attribution Attribution
	// Interval, when positive, also accounts per time slice of this length.
	Interval time.Duration
	// Stack resolves stacks for ByLibrary and ByFunction. It is called
	// once per allocation site, on the goroutine applying events. Units by
	// library only need the frames' modules and the allocator's own frames
	// told apart: a Stack that symbolizes no other frame is enough (and
	// much cheaper while a program runs).
	Stack StackFunc
	// PerCall makes each invocation of an entry unit a row of its own
	// (units by library or function; the attribution is then entry; see
	// percall.go).
	PerCall bool
}

// Engine accounts heap use per unit. It is a heap.Observer: set it as
// the model's Session.Observer before the first event, then read its
// Units.
// It is not safe for concurrent use (the model calls it from the one
// goroutine that applies events).
type Engine struct {
	opts   Options
	folded uint64 // Agg events met
	images map[*heap.Process]*image
	last   *heap.Process
	lastIm *image
}

// New returns an engine; it fails on options that cannot work.
func New(opts Options) (*Engine, error) {
	if opts.By == 0 || int(opts.By) >= len(byNames) {
		return nil, fmt.Errorf("usage: no unit given")
	}
	if opts.PerCall {
		if opts.By != ByLibrary && opts.By != ByFunction {
			return nil, fmt.Errorf("usage: per-call rows need units by library or function, not by %s", opts.By)
		}
		if opts.Attribution != 0 && opts.Attribution != Entry {
			return nil, fmt.Errorf("usage: per-call rows are invocations of entry units, not %s attribution", opts.Attribution)
		}
		opts.Attribution = Entry
	}
	if opts.Attribution == 0 {
		opts.Attribution = Caller
	}
	if int(opts.Attribution) >= len(attributionNames) {
		return nil, fmt.Errorf("usage: bad attribution %d", opts.Attribution)
	}
	if (opts.By == ByLibrary || opts.By == ByFunction) && opts.Stack == nil {
		return nil, fmt.Errorf("usage: units by %s need stacks", opts.By)
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("usage: negative interval %v", opts.Interval)
	}
	if opts.By.typed() && opts.Interval > 0 {
		return nil, fmt.Errorf("usage: types are known at a scan, not per time interval")
	}
	if opts.By == ByScope && opts.Interval > 0 {
		return nil, fmt.Errorf("usage: scopes are not accounted per time interval (each has its first and last times)")
	}
	return &Engine{opts: opts, images: map[*heap.Process]*image{}}, nil
}

// image is the accounting of one process image.
type image struct {
	p     *heap.Process
	exe   string // the executable's path
	units []*unit
	index map[string]int32 // unit key → index in units
	sites [][]int32        // by site: its units; nil until resolved
	tids  map[int32]int32  // thread units
	// the previous thread unit, for runs of events of one thread
	lastTID  int32
	lastTU   []int32
	start    uint64  // ticks at the image's start
	perSlice float64 // ticks per interval; 0: no intervals
	// Per-call rows (percall.go).
	callSites   []callSite // by site
	callThreads map[int32]*callThread
	callCount   map[int32]int // by entry unit: its invocations so far
	one         [1]int32      // the one row of a per-call lookup
}

// unit is what one unit of one image did.
type unit struct {
	key    string
	name   string
	kind   string       // library units: executable, runtime, library, unknown
	module string       // function units: the module's path
	tid    int32        // thread units
	site   heap.StackID // site units

	cur, curBlocks             int64 // net size now
	inherited, inheritedBlocks int64 // what a fork child started with
	min, max                   int64
	minT, maxT                 uint64
	allocBytes, allocBlocks    uint64
	freedBytes, freedBlocks    uint64
	calls                      [event.NumFn]uint64
	slices                     []slice // by index, ascending
	// Per-call rows: the invocation's number (from 1), its thread, and
	// the times of its first and last allocator calls.
	call        int
	callTID     int32
	first, last uint64
}

// slice is what a unit did during one time interval.
type slice struct {
	idx                     uint64
	allocBytes, allocBlocks uint64
	freedBytes, freedBlocks uint64
	calls                   [event.NumFn]uint64
	net, netBlocks          int64
	lo, hi                  int64 // the running net size within, when seen
	seen                    bool
}

func (e *Engine) image(p *heap.Process) *image {
	if p == e.last {
		return e.lastIm
	}
	im := e.images[p]
	if im == nil {
		im = &image{p: p, index: map[string]int32{}, start: p.Clock.Ticks, exe: exePath(p)}
		if e.opts.Interval > 0 {
			tps := p.Clock.TicksPerSec
			if tps <= 0 {
				tps = 1e9
			}
			im.perSlice = e.opts.Interval.Seconds() * tps
		}
		e.images[p] = im
	}
	e.last, e.lastIm = p, im
	return im
}

// exePath is the path of image p's executable: the module whose path is
// the one the process reported, else the first module loaded.
func exePath(p *heap.Process) string {
	if p.Info.Exe != "" {
		return p.Info.Exe
	}
	if len(p.Modules) > 0 {
		return p.Modules[0].Path
	}
	return ""
}

// unitsOf returns the units block b counts for.
func (e *Engine) unitsOf(im *image, b *heap.Block) []int32 {
	switch e.opts.By {
	case ByScope, ByType, ByTypeModule, ByTypeFile, ByNamespace:
		return nil // the model counts scopes; types come from a scan
	case ByThread:
		if im.lastTU != nil && im.lastTID == b.Thread {
			return im.lastTU
		}
		if im.tids == nil {
			im.tids = map[int32]int32{}
		}
		u, ok := im.tids[b.Thread]
		if !ok {
			u = im.add(&unit{key: fmt.Sprint(b.Thread), tid: b.Thread})
			im.tids[b.Thread] = u
		}
		im.lastTID, im.lastTU = b.Thread, []int32{u}
		return im.lastTU
	}
	return e.siteUnits(im, b.Site)
}

// Observes reports whether the engine needs to follow the model (be its
// Observer): units by scope do not, the model counts them.
func (e *Engine) Observes() bool { return e.opts.By != ByScope && !e.opts.By.typed() }

// callUnits returns the units an allocator call at time t counts for
// (b: the block it allocated, or its stack and thread): per call, its
// invocation.
func (e *Engine) callUnits(im *image, b *heap.Block, t uint64) []int32 {
	if e.opts.PerCall {
		return e.callRow(im, b.Site, b.Thread, t)
	}
	return e.unitsOf(im, b)
}

// blockUnits returns the units an existing block counts for: per call,
// the invocation that allocated it.
func (e *Engine) blockUnits(im *image, b *heap.Block) []int32 {
	if e.opts.PerCall {
		return e.rowAt(im, b.Site, b.Thread, b.Time)
	}
	return e.unitsOf(im, b)
}

// siteUnits returns the units of a site, attributing it on first use.
func (e *Engine) siteUnits(im *image, site heap.StackID) []int32 {
	if int(site) < len(im.sites) {
		if us := im.sites[site]; us != nil {
			return us
		}
	} else {
		n := int(site) + 1
		if n < 2*len(im.sites) {
			n = 2 * len(im.sites)
		}
		im.sites = append(im.sites, make([][]int32, n-len(im.sites))...)
	}
	us := e.attribute(im, site)
	im.sites[site] = us
	return us
}

// add adds a new unit, or returns the one with its key.
func (im *image) add(u *unit) int32 {
	if i, ok := im.index[u.key]; ok {
		return i
	}
	i := int32(len(im.units))
	u.minT, u.maxT = im.start, im.start
	im.units = append(im.units, u)
	im.index[u.key] = i
	return i
}

// sliceOf returns u's slice of time t.
func (im *image) sliceOf(u *unit, t uint64) *slice {
	var idx uint64
	if t > im.start {
		idx = uint64(float64(t-im.start) / im.perSlice)
	}
	n := len(u.slices)
	if n > 0 && u.slices[n-1].idx == idx {
		return &u.slices[n-1]
	}
	if n == 0 || u.slices[n-1].idx < idx {
		u.slices = append(u.slices, slice{idx: idx})
		return &u.slices[n]
	}
	i := sort.Search(n, func(i int) bool { return u.slices[i].idx >= idx })
	if u.slices[i].idx != idx {
		u.slices = append(u.slices, slice{})
		copy(u.slices[i+1:], u.slices[i:])
		u.slices[i] = slice{idx: idx}
	}
	return &u.slices[i]
}

// change adds d bytes and db blocks to u's net size at time t.
func (im *image) change(u *unit, d, db int64, t uint64) {
	u.cur += d
	u.curBlocks += db
	if u.cur > u.max {
		u.max, u.maxT = u.cur, t
	}
	if u.cur < u.min {
		u.min, u.minT = u.cur, t
	}
	if im.perSlice > 0 {
		s := im.sliceOf(u, t)
		s.net += d
		s.netBlocks += db
		if !s.seen || u.cur < s.lo {
			s.lo = u.cur
		}
		if !s.seen || u.cur > s.hi {
			s.hi = u.cur
		}
		s.seen = true
	}
}

// Call implements heap.Observer.
func (e *Engine) Call(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	im := e.image(p)
	for _, i := range e.callUnits(im, &b, t) {
		u := im.units[i]
		u.calls[fn]++
		if im.perSlice > 0 {
			im.sliceOf(u, t).calls[fn]++
		}
	}
}

// Allocated implements heap.Observer.
func (e *Engine) Allocated(p *heap.Process, b heap.Block) {
	im := e.image(p)
	for _, i := range e.callUnits(im, &b, b.Time) {
		u := im.units[i]
		u.allocBytes += b.Size
		u.allocBlocks++
		if im.perSlice > 0 {
			s := im.sliceOf(u, b.Time)
			s.allocBytes += b.Size
			s.allocBlocks++
		}
		im.change(u, int64(b.Size), 1, b.Time)
	}
}

// Freed implements heap.Observer.
func (e *Engine) Freed(p *heap.Process, b heap.Block, fn event.Fn, t uint64) {
	im := e.image(p)
	for _, i := range e.blockUnits(im, &b) {
		u := im.units[i]
		u.calls[fn]++
		u.freedBytes += b.Size
		u.freedBlocks++
		if im.perSlice > 0 {
			s := im.sliceOf(u, t)
			s.calls[fn]++
			s.freedBytes += b.Size
			s.freedBlocks++
		}
		im.change(u, -int64(b.Size), -1, t)
	}
}

// Pending implements heap.Observer: a thread's pending bytes belong to no
// unit that is known at the time (see doc.go).
func (e *Engine) Pending(p *heap.Process, bytes, t uint64) {}

// Folded implements heap.Observer.
func (e *Engine) Folded(p *heap.Process, site heap.StackID, ev *event.Event) {
	im := e.image(p)
	e.folded++
	n, bytes := ev.AggPairs(), ev.Size
	_, ffn := ev.AggFree()
	b := heap.Block{Site: site, Thread: ev.Thread, Time: ev.Time}
	for _, i := range e.blockUnits(im, &b) {
		u := im.units[i]
		u.calls[ev.Fn] += n
		u.calls[ffn] += n
		u.allocBytes += bytes
		u.allocBlocks += n
		u.freedBytes += bytes
		u.freedBlocks += n
		if im.perSlice > 0 {
			s := im.sliceOf(u, ev.Time)
			s.calls[ev.Fn] += n
			s.calls[ffn] += n
			s.allocBytes += bytes
			s.allocBlocks += n
			s.freedBytes += bytes
			s.freedBlocks += n
		}
	}
}

// Forked implements heap.Observer: the child starts with its parent's
// live blocks.
func (e *Engine) Forked(p *heap.Process) {
	im := e.image(p)
	p.Live(func(_ uint64, b heap.Block) {
		for _, i := range e.blockUnits(im, &b) {
			u := im.units[i]
			u.cur += int64(b.Size)
			u.curBlocks++
			u.inherited += int64(b.Size)
			u.inheritedBlocks++
		}
	})
	for _, u := range im.units {
		u.min, u.max = u.cur, u.cur
	}
}
