// Package progress draws a progress bar for long analyses on a terminal,
// and nothing anywhere else (a file, a pipe, a CI log).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar is a one-line progress bar redrawn in place. Its methods are safe
// for concurrent use.
type Bar struct {
	w     io.Writer
	label string
	mu    sync.Mutex
	last  time.Time
	shown bool
	now   func() time.Time
}

// OnTerminal returns a bar drawing on w when w is a terminal, else nil
// (whose methods do nothing).
func OnTerminal(w io.Writer, label string) *Bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return New(w, label)
}

// New returns a bar drawing on w whatever w is.
func New(w io.Writer, label string) *Bar { return &Bar{w: w, label: label, now: time.Now} }

// Set shows done of total (bytes), redrawn at most ten times a second.
func (b *Bar) Set(done, total int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.shown && now.Sub(b.last) < 100*time.Millisecond && done < total {
		return
	}
	b.last, b.shown = now, true
	const width = 30
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	n := int(frac * width)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %s / %s\x1b[K", b.label, strings.Repeat("#", n), strings.Repeat(" ", width-n),
		100*frac, mb(done), mb(total))
}

// Done erases the bar.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shown {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.shown = false
	}
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
