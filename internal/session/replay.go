package session

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// replayed is a trace replayed into the model.
type replayed struct {
	model *heap.Session
	main  int32 // the main program's last image; -1: none
	tps   float64
	// timeShift: the trace keeps times to 2^timeShift ticks.
	timeShift uint
	warnings  []string
	meta      tracefile.Meta
	cut       error // the trace ends early or is corrupt there: the model has what came before
}

// loadTrace replays the trace at path, with obs (nil: none) following the
// model and progress (nil: nobody) told how many bytes of the file it has
// read, of how many, as it goes. A trace cut short or corrupt somewhere is
// read up to there, with a warning; an error is a file that could not be
// read at all.
func loadTrace(path string, obs heap.Observer, progress func(done, total int64)) (*replayed, error) {
	r, err := tracefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var size int64
	if progress != nil {
		if fi, err := os.Stat(path); err == nil {
			size = fi.Size()
		}
		defer func() { progress(size, size) }()
	}
	model := heap.NewSession()
	model.Observer = obs
	var warnings []string
	main := int32(-1)
	var tps float64
	var cut error
	ahead := readAhead(r)
	defer ahead.stop()
	for b := range ahead.batches {
		buf, err := b.evs, b.err
		if progress != nil {
			progress(b.offset, size)
		}
		for i := range buf {
			ev := &buf[i]
			if ev.Kind == event.ProcessStart && main < 0 {
				main = int32(ev.Proc)
			}
			if ev.ClockInfo() != nil && ev.ClockInfo().TicksPerSec > 0 {
				tps = ev.ClockInfo().TicksPerSec
			}
		}
		model.Apply(buf)
		ahead.recycle(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			if !errors.Is(err, tracefile.ErrTruncated) {
				var ce *tracefile.CorruptError
				if !errors.As(err, &ce) {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
			}
			cut = err
			warnings = append(warnings, fmt.Sprintf("%s: %v; reporting what came before", path, err))
			model.Finish()
			break
		}
	}
	// The main program's last image: the latest one of the first pid.
	if main >= 0 {
		pid := model.Procs[main].Info.PID
		for i, p := range model.Procs {
			if p != nil && p.Info.PID == pid {
				main = int32(i)
			}
		}
	}
	return &replayed{model: model, main: main, tps: tps, warnings: warnings, meta: r.Meta(), cut: cut, timeShift: r.TimeShift()}, nil
}

// readBatch is a batch of a trace's events read ahead.
type readBatch struct {
	evs    []event.Event
	offset int64 // the reader's offset after it
	err    error
}

// aheadReader reads a trace's batches on a goroutine of its own, up to two
// ahead, so that decompressing and decoding the next ones overlaps with
// applying this one (~a fifth of `leakpath report`'s time on a trace of
// 3.6M events). The batches' events are fresh (tracefile.Reader.Next);
// only the slices are reused, once handed back with recycle.
type aheadReader struct {
	batches  chan readBatch // closed after the batch with an error (io.EOF at the end)
	free     chan []event.Event
	quit     chan struct{}
	finished chan struct{}
	once     sync.Once
}

// readAhead starts reading r.
func readAhead(r *tracefile.Reader) *aheadReader {
	a := &aheadReader{batches: make(chan readBatch, 2), free: make(chan []event.Event, 3),
		quit: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(a.finished)
		defer close(a.batches)
		for {
			var buf []event.Event
			select {
			case buf = <-a.free:
			default:
			}
			buf, err := r.Next(buf)
			select {
			case a.batches <- readBatch{evs: buf, offset: r.Offset(), err: err}:
			case <-a.quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return a
}

// recycle hands a batch's slice back, its events applied.
func (a *aheadReader) recycle(evs []event.Event) {
	select {
	case a.free <- evs:
	default:
	}
}

// stop ends the reading, early or not, and waits for it: r can be closed
// then.
func (a *aheadReader) stop() {
	a.once.Do(func() {
		close(a.quit)
		<-a.finished
	})
}
