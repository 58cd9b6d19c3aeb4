package stale

import (
	"errors"
	"time"

	"github.com/leakpath/leakpath/internal/collect"
	"github.com/leakpath/leakpath/internal/model/event"
)

// Watch is the stale epochs as an analysis of the collector
// (collect.Analysis): every epoch it reads which pages of each image's
// slot pool (region.Options.StaleSlots) were touched since the last one,
// as a StaleEpoch event, and at every stop, before the scan reads the
// blocks, what was touched since the last epoch.
type Watch struct {
	epoch time.Duration
}

// NewWatch returns the watch of epochs of the given length (> 0), to
// register with the collector (collect.Options.Analyses) before the scan.
func NewWatch(epoch time.Duration) *Watch { return &Watch{epoch: epoch} }

// Image follows one image (collect.Analysis).
func (w *Watch) Image(im *collect.Image) collect.ImageAnalysis {
	return &imageWatch{epoch: w.epoch, im: im}
}

// imageWatch is an image's stale epochs, owned by its pipeline.
type imageWatch struct {
	epoch   time.Duration
	im      *collect.Image
	next    time.Time // when the next epoch is due
	warned  bool
	over    bool   // the process is exiting: no more epochs
	watched uint32 // the most pages a reading found mappings of their own
}

// Poll reads an epoch when one is due (collect.Poller).
func (w *imageWatch) Poll() []event.Event {
	if w.over || time.Now().Before(w.next) {
		return nil
	}
	if ev := w.read(true); ev != nil {
		return []event.Event{*ev}
	}
	return nil
}

// BeforeStop ends the epochs at the image's exit: its last reading is
// the stop's (collect.BeforeStopper).
func (w *imageWatch) BeforeStop(kind collect.StopKind) func() {
	if kind == collect.StopExit {
		w.over = true
	}
	return nil
}

// Stopped takes the reading before the scan reads the blocks (which
// touches them): registered before the scan (collect.ImageAnalysis).
func (w *imageWatch) Stopped(st *collect.Stopped) error {
	if ev := w.read(false); ev != nil {
		st.Emit(*ev)
	}
	return nil
}

// AfterStop clears the accessed bits after the scan read the memory,
// while the program is still stopped: an access of its own after that
// must count (collect.AfterStopper).
func (w *imageWatch) AfterStop(*collect.Stopped) {
	if reg := w.im.Region(); reg != nil {
		if _, ok := reg.StalePool(); ok {
			ClearRefs(int(w.im.PID)) // best effort: the process may be gone
		}
	}
}

// read reads which pages of the image's slot pool were touched since the
// last epoch and clears the accessed bits. With clear false it is a
// reading between epochs, before a scan reads the memory (and clears
// after it): its event takes the accesses and ages nothing. nil: no pool
// (yet) or the reading failed (said once).
func (w *imageWatch) read(clear bool) *event.Event {
	if clear {
		w.next = time.Now().Add(w.epoch)
	}
	reg := w.im.Region()
	if reg == nil {
		return nil
	}
	p, ok := reg.StalePool()
	if !ok {
		return nil
	}
	pid := int(w.im.PID)
	st, err := Read(pid, Pool{Base: p.Base, Count: p.Count, Page: p.Page})
	if err == nil && clear {
		err = ClearRefs(pid)
	}
	if err == nil && st.Watched == 0 {
		// (A zombie's smaps is empty: no reading at all.)
		err = errors.New("no page of the slot pool is a mapping of its own; nothing is watched")
	}
	if err == nil && st.Watched < w.watched {
		// Fewer pages than before: the process is tearing its mappings
		// down (exiting); a page not watched would count as touched.
		w.over = true
		return nil
	}
	if err != nil {
		if !w.warned && !w.im.Exited() {
			w.im.Warn("pid %d: --stale: %v", pid, err)
			w.warned = true
		}
		return nil
	}
	w.watched = st.Watched
	ev := &event.Event{Kind: event.StaleEpoch, Proc: w.im.Proc, Time: w.im.Now(), X: &event.Extra{Stale: st}}
	if clear {
		reg.EndStaleEpoch()
	} else {
		ev.SetBetweenEpochs()
	}
	return ev
}
