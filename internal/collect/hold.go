package collect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/analysis/leak"
	"github.com/leakpath/leakpath/internal/analysis/scan"
	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/sys/ptrace"
	"github.com/leakpath/leakpath/internal/target/control"
	"github.com/leakpath/leakpath/internal/target/region"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// maxSuppressions bounds the text read from __lsan_default_suppressions.
const maxSuppressions = 1 << 20

// scanBatch is the most blocks one Scan event carries.
const scanBatch = 1 << 20

// scanHeld serves an image's exit hold: it stops the process, brings the
// model up to date (everything in the rings; what the threads keep
// pending is classified too, though the model learns of it only later),
// classifies every live block and records the result as Scan events,
// then lets the process exit. A failed scan is recorded too, so that the
// report says why it has no kinds.
func (c *collector) scanHeld(im *image, m *merger, direct *directTarget) {
	if !im.reg.TakeHold() {
		return
	}
	im.scanned = true
	defer im.reg.ReleaseHold()
	im.stale.over = true // its last reading is the scan's
	if err := c.scan(im, m, direct, false, nil, nil); err != nil {
		c.sink.send(im.idx, c.scanFailed(im, &event.ScanInfo{}, err), false)
	}
}

// snapshot serves a snapshot request: the scan of scanHeld on a process
// that goes on running, then the response Options.Snapshot makes of the
// model as the scan left it (made while the process runs again).
// caller, if not nil, is the asking thread's state where the program
// asked.
func (c *collector) snapshot(im *image, m *merger, direct *directTarget, req control.Request, caller *scan.Caller) control.Response {
	var resp control.Response
	err := c.scan(im, m, direct, true, caller, func(s *heap.Session) { resp = c.opts.Snapshot(s, im.idx, req) })
	if err != nil {
		return control.Response{Error: fmt.Sprintf("pid %d: %v", im.pid, err)}
	}
	return resp
}

// serveAsk serves a request of the program itself (leakpath_snapshot,
// leakpath_leak_check): a snapshot, as `leakpath snapshot` takes it,
// while the asking thread waits; it returns 0, or for a leak check the
// blocks leaked, or -1 when the snapshot failed.
func (c *collector) serveAsk(im *image, m *merger, direct *directTarget) {
	a, ok := im.reg.TakeAsk()
	if !ok {
		return
	}
	req := control.Request{Op: "snapshot", PID: int(im.pid), TID: int(a.TID), Label: a.Label}
	if a.Kind == wire.AskLeakCheck {
		req.Op = "leak-check"
	}
	var resp control.Response
	if c.opts.Snapshot == nil {
		resp.Error = "this leakpath run takes no snapshots"
	} else {
		var caller *scan.Caller
		if a.SP != 0 && a.Regs != 0 {
			// The scan starts at the program's frame that asked, not at
			// the agent's (whose dead frames below hold stale pointers).
			caller = &scan.Caller{TID: int(a.TID), SP: a.SP, RegsAddr: a.Regs}
		}
		resp = c.snapshot(im, m, direct, req, caller)
	}
	result := int64(-1)
	if resp.Error == "" {
		result = 0
		if req.Op == "leak-check" {
			result = int64(min(resp.LeakedBlocks, 1<<62))
		}
	}
	im.reg.Answer(result)
	if c.opts.Asked != nil {
		c.opts.Asked(im.pid, req, resp)
	}
}

// scan stops im's process, brings the model up to date, classifies every
// live block and records the result as Scan events (live: the process
// goes on). Then, with the process running again, it calls after (if not
// nil) on the sink's goroutine with the Scan events applied. A scan that
// fails after the stop is recorded for the exit's (live false). caller, if
// not nil, is a thread's state where the program called the agent (the
// exit's comes from the hold).
func (c *collector) scan(im *image, m *merger, direct *directTarget, live bool, caller *scan.Caller, after func(*heap.Session)) error {
	c.prefetchTypes(im)
	pause := time.Now()
	c.mu.Lock()
	rc := im.rc
	c.mu.Unlock()
	// A thread has one tracer at a time: no window during the scan; a
	// snapshot's program goes on, and so do its windows.
	if rc.pause() && live {
		defer rc.resume()
	}
	var tr *ptrace.Tracer
	var held *unix.PtraceRegs
	if !live {
		sp, tp, regs := im.reg.HoldStack()
		if regs != 0 && sp != 0 {
			caller = &scan.Caller{TP: tp, SP: sp, RegsAddr: regs}
		}
		tr, held = heldAlone(im.pid, sp, tp)
	}
	if held == nil {
		var err error
		if tr, err = ptrace.Seize(int(im.pid)); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = tr.StopAll(ctx)
		cancel()
		if err != nil {
			tr.Close()
			return err
		}
	}
	defer tr.Close()
	// Stopped: its threads write nothing more (a corrupt region stops
	// here; its pipeline sees it next).
	for range finalDrains {
		if n, _ := im.reg.Drain(m); n == 0 {
			break
		}
	}
	out := m.take(0, true, direct.out)
	direct.out = c.sink.buffer()
	if c.opts.StaleEpoch > 0 {
		// Before the scan reads the blocks (which touches them).
		if ev := c.staleEpoch(im, &im.stale, false); ev != nil {
			out = append(out, *ev)
		}
	}
	if !live && im.reg.HoldFlags()&wire.HoldFlagOff != 0 {
		// The program's __lsan_is_turned_off said no leak check: as
		// LeakSanitizer, none (the model learns why).
		out = append(out, event.Event{Kind: event.LeakCheckOff, Proc: im.idx, Time: c.src.Now()})
		c.sink.send(im.idx, out, false)
		return nil
	}
	pending := im.reg.PeekPending()
	suppAddr, own, tlsOff, tlsSize := im.reg.HoldInfo()
	supp := ""
	if suppAddr != 0 {
		supp, _ = scan.ReadString(tr, suppAddr, maxSuppressions)
	}
	target := scan.Target{PID: int(im.pid), Tracer: tr, Held: held, Caller: caller, OwnTable: own, TLSOffset: tlsOff, TLSSize: tlsSize}
	done := make(chan error, 1)
	c.sink.sendAfter(im.idx, out, func(s *heap.Session) []event.Event {
		p := s.Process(im.idx)
		if p == nil {
			err := errors.New("the process is not in the model")
			done <- err
			if live {
				return nil
			}
			return c.scanFailed(im, &event.ScanInfo{Live: live}, err)
		}
		blocks, keys := liveBlocks(p, pending)
		target.Extra = lsanRoots(p)
		res, st, hp, err := scan.RunHeap(target, blocks, leak.DefaultOptions())
		if err == nil {
			lsanIgnored(p, blocks, res)
		}
		info := &event.ScanInfo{Suppressions: supp, PauseNs: uint64(time.Since(pause)), RootBytes: st.RootBytes, HeapBytes: st.HeapBytes, Live: live}
		if err != nil {
			done <- err
			if live {
				return nil
			}
			return c.scanFailed(im, info, err)
		}
		var typed func([]event.ScannedBlock)
		if c.opts.Types != nil {
			typed = func(sbs []event.ScannedBlock) { c.typeBlocks(p, blocks, keys, hp, sbs, info) }
		}
		// Typing reads the process: it must still be stopped.
		evs := scanEvents(im.idx, c.src.Now(), info, blocks, res, typed, keys)
		done <- nil
		if live && rc != nil {
			// A snapshot shows the root causes found so far (those at
			// the end replace them).
			evs = append(evs, rootCauseEvents(im.idx, rc.traces(p, false), true)...)
		}
		return evs
	})
	err := <-done
	// The scan read the blocks: clear what it touched while the program
	// is still stopped (an access of its own after that must count).
	c.staleCleared(im)
	if err != nil {
		if !live {
			return nil // recorded
		}
		return err
	}
	if hook := c.stoppedHook; hook != nil && held == nil {
		// Still stopped: a detach now leaves no block unscanned.
		c.stoppedHook = nil
		hook(tr)
	}
	if after == nil {
		return nil
	}
	tr.Close()
	finished := make(chan struct{})
	c.sink.sendAfter(im.idx, nil, func(s *heap.Session) []event.Event {
		defer close(finished)
		if p := s.Process(im.idx); p != nil {
			p.Pending = pendingBlocks(p, pending)
			defer func() { p.Pending = nil }()
		}
		after(s)
		return nil
	})
	<-finished
	return nil
}

// heldAlone returns, for a scan without ptrace of process pid held at its
// exit by a thread with stack pointer sp and thread pointer tp
// (region.HoldStack), a Tracer that only reads the process's memory and
// that thread's registers; nil, nil unless the thread is the process's
// only one (then nothing else runs in it: no stop is needed) and the
// memory can be read so.
func heldAlone(pid int32, sp, tp uint64) (*ptrace.Tracer, *unix.PtraceRegs) {
	if sp == 0 {
		return nil, nil
	}
	if n, err := ptrace.ThreadCount(int(pid)); err != nil || n != 1 {
		return nil, nil
	}
	tr := ptrace.Untraced(int(pid))
	var b [8]byte
	if _, err := tr.ReadMemory(sp, b[:]); err != nil {
		return nil, nil // not readable without ptrace (not our child under Yama, say)
	}
	return tr, &unix.PtraceRegs{Rsp: sp, Fs_base: tp}
}

// newArray0 tells an 8-byte block from operator new[]: new T[0] of a type
// with a destructor (its element count, 0, then no element), whose only
// pointer is the address just past it. An array with elements has more
// bytes; 8 bytes of elements without a count are held by their start.
func newArray0(fn event.Fn, size uint64) bool {
	return fn == event.NewArray && size == 8
}

// liveBlocks lists the model's live blocks and the pending ones, marking
// those the dynamic linker allocated (its TLS bookkeeping) as Runtime.
// When the program has pools, keys are the blocks' keys in the model (a
// pool's object is kept under its address and pool: heap.BlockAddr), and
// the blocks that hold pool objects, the pools' memory, are left out, as
// memcheck leaves out a malloc'd block that holds mempool chunks; keys is
// nil otherwise.
func liveBlocks(p *heap.Process, pending []region.PendingBlock) (blocks []leak.Block, keys []uint64) {
	// By site: 0 not known yet, 1 the loader's, 2 not.
	var rt []uint8
	runtime := func(site heap.StackID) bool {
		if int(site) >= len(rt) {
			rt = append(rt, make([]uint8, int(site)+1-len(rt)+1024)...)
		}
		if rt[site] == 0 {
			rt[site] = 2
			if fromLoader(p, site) {
				rt[site] = 1
			}
		}
		return rt[site] == 1
	}
	pools := p.PoolObjects() > 0
	blocks = make([]leak.Block, 0, p.Totals.LiveBlocks+uint64(len(pending))+uint64(p.PoolObjects()))
	var spans []heap.SpanBlock
	p.Live(func(key uint64, b heap.Block) {
		blocks = append(blocks, leak.Block{Addr: heap.BlockAddr(key), Size: b.Size, Runtime: runtime(b.Site), PastEnd: newArray0(b.Fn, b.Size)})
		if pools {
			spans = append(spans, heap.SpanBlock{Key: key, Size: b.Size})
		}
	})
	for _, pb := range pending {
		if _, known := p.LiveBlock(pb.Addr); !known {
			blocks = append(blocks, leak.Block{Addr: pb.Addr, Size: pb.Size, Runtime: runtime(p.StackOf(pb.Stack)),
				PastEnd: newArray0(pb.Fn, pb.Size)})
			if pools {
				spans = append(spans, heap.SpanBlock{Key: pb.Addr, Size: pb.Size})
			}
		}
	}
	if !pools {
		leak.SortBlocks(blocks)
		return blocks, nil
	}
	holders, overlapping := heap.PoolLayout(spans)
	type keyed struct {
		b   leak.Block
		key uint64
	}
	ks := make([]keyed, 0, len(blocks))
	for i, b := range blocks {
		if k := spans[i].Key; !holders[k] && !overlapping[k] {
			ks = append(ks, keyed{b, k})
		}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return cmp.Compare(a.b.Addr, b.b.Addr) })
	blocks, keys = blocks[:0], make([]uint64, len(ks))
	for i, k := range ks {
		blocks = append(blocks, k.b)
		keys[i] = k.key
	}
	return blocks, keys
}

// pendingBlocks returns the pending blocks the model does not know yet,
// by address.
func pendingBlocks(p *heap.Process, pending []region.PendingBlock) map[uint64]heap.Block {
	out := map[uint64]heap.Block{}
	for _, pb := range pending {
		if _, known := p.LiveBlock(pb.Addr); !known {
			out[pb.Addr] = heap.Block{Size: pb.Size, Time: pb.Time, Site: p.StackOf(pb.Stack), Fn: pb.Fn}
		}
	}
	return out
}

// fromLoader reports whether a stack's allocating caller is the dynamic
// linker (ld-linux*.so, ld.so).
func fromLoader(p *heap.Process, site heap.StackID) bool {
	frames := p.Stacks.Frames(site)
	for i, pc := range frames {
		if i >= 2 {
			break
		}
		mi := p.ModuleOf(pc)
		if mi < 0 || int(mi) >= len(p.Modules) {
			continue
		}
		base := filepath.Base(p.Modules[mi].Path)
		if strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld.so") || strings.HasPrefix(base, "ld-2.") {
			return true
		}
	}
	return false
}

// scanFailed returns the Scan event that says why the scan of im failed:
// scan_error and the image's text report say it (once: no warning too).
func (c *collector) scanFailed(im *image, info *event.ScanInfo, err error) []event.Event {
	info.Error = err.Error()
	return scanEvents(im.idx, c.src.Now(), info, nil, nil, nil, nil)
}

// scanEvents turns a classification into Scan events of at most
// scanBatch blocks each (one event with none when res is nil); typed, if
// not nil, adds the blocks' types (to them and to info). keys, when not
// nil, are the blocks' keys in the model (liveBlocks): the events name
// the blocks by them.
func scanEvents(proc uint32, now uint64, info *event.ScanInfo, blocks []leak.Block, res *leak.Result, typed func([]event.ScannedBlock), keys []uint64) []event.Event {
	sbs := make([]event.ScannedBlock, len(blocks))
	for i, b := range blocks {
		sbs[i] = event.ScannedBlock{Addr: b.Addr, Size: b.Size, Kind: res.Kinds[i]}
		if o := res.Owner[i]; o >= 0 {
			sbs[i].Owner = blocks[o].Addr
		}
	}
	if typed != nil && len(sbs) > 0 {
		typed(sbs)
	}
	if keys != nil {
		keyOf := func(a uint64) uint64 {
			i, ok := slices.BinarySearchFunc(blocks, a, func(b leak.Block, a uint64) int { return cmp.Compare(b.Addr, a) })
			if !ok {
				return a
			}
			return keys[i]
		}
		for i := range sbs {
			sb := &sbs[i]
			sb.Addr = keys[i]
			if sb.Owner != 0 {
				sb.Owner = keyOf(sb.Owner)
			}
			if sb.Holder != 0 {
				sb.Holder = keyOf(sb.Holder)
			}
		}
	}
	var evs []event.Event
	for part := 0; part == 0 || len(sbs) > 0; part++ {
		n := min(len(sbs), scanBatch)
		si := &event.ScanInfo{Blocks: sbs[:n], Part: uint32(part)}
		if part == 0 {
			head := *info
			head.Blocks, head.Part = sbs[:n], 0
			si = &head
		}
		evs = append(evs, event.Event{Kind: event.Scan, Proc: proc, Time: now, X: &event.Extra{Scan: si}})
		sbs = sbs[n:]
	}
	return evs
}

// lsanRoots returns the roots the program gave through LeakSanitizer's
// interface (agent/lsan.c): its registered root regions, and the blocks
// it said are no leaks, whose contents LeakSanitizer scans as reachable.
func lsanRoots(p *heap.Process) []leak.Root {
	var out []leak.Root
	for _, r := range p.RootRegions() {
		out = append(out, leak.Root{Addr: r[0], Len: r[1], What: "root region"})
	}
	for _, a := range p.IgnoredBlocks() {
		if b, ok := p.LiveBlock(a); ok && b.Size > 0 {
			out = append(out, leak.Root{Addr: a, Len: b.Size, What: "ignored object"})
		}
	}
	return out
}

// lsanIgnored makes the blocks the program said are no leaks reachable
// in res (blocks are sorted by address): their contents were roots, so
// what they point to is reachable already.
func lsanIgnored(p *heap.Process, blocks []leak.Block, res *leak.Result) {
	for _, a := range p.IgnoredBlocks() {
		i, ok := slices.BinarySearchFunc(blocks, a, func(b leak.Block, a uint64) int { return cmp.Compare(b.Addr, a) })
		if !ok {
			continue
		}
		res.Kinds[i] = leak.Reachable
		res.Owner[i] = -1
		res.IndirectBytes[i], res.IndirectBlocks[i] = 0, 0
	}
}
