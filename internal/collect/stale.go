package collect

import (
	"errors"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/stale"
	"github.com/leakpath/leakpath/internal/model/event"
)

// staleWatch is an image's stale epochs (Options.StaleEpoch).
type staleWatch struct {
	next    time.Time // when the next epoch is due
	warned  bool
	over    bool   // the process is exiting: no more epochs
	watched uint32 // the most pages a reading found mappings of their own
}

// staleDue reports whether im's next epoch is due.
func (c *collector) staleDue(w *staleWatch) bool {
	return c.opts.StaleEpoch > 0 && !w.over && !time.Now().Before(w.next)
}

// staleEpoch reads which pages of im's slot pool were touched since the
// last epoch and clears the accessed bits. With clear false it is a
// reading between epochs, before a scan reads the memory (and clears
// after it): its event takes the accesses and ages nothing. nil: no pool
// (yet) or the reading failed (said once).
func (c *collector) staleEpoch(im *image, w *staleWatch, clear bool) *event.Event {
	if clear {
		w.next = time.Now().Add(c.opts.StaleEpoch)
	}
	p, ok := im.reg.StalePool()
	if !ok {
		return nil
	}
	st, err := stale.Read(int(im.pid), stale.Pool{Base: p.Base, Count: p.Count, Page: p.Page})
	if err == nil && clear {
		err = stale.ClearRefs(int(im.pid))
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
		if !w.warned && !exited(im.pidfd) {
			c.warn("pid %d: --stale: %v", im.pid, err)
			w.warned = true
		}
		return nil
	}
	w.watched = st.Watched
	ev := &event.Event{Kind: event.StaleEpoch, Proc: im.idx, Time: c.src.Now(), X: &event.Extra{Stale: st}}
	if !clear {
		ev.SetBetweenEpochs()
	}
	return ev
}

// staleCleared clears the accessed bits after a scan read the memory.
func (c *collector) staleCleared(im *image) {
	if c.opts.StaleEpoch > 0 {
		if _, ok := im.reg.StalePool(); ok {
			stale.ClearRefs(int(im.pid)) // best effort: the process may be gone
		}
	}
}
