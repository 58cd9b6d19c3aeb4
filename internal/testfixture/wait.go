package testfixture

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// HangGuard bounds every wait of a test for something a program or
// leakpath does: far beyond what a loaded 2-core machine needs (seconds
// at most), so it ends only a test that would otherwise hang. Nothing is
// ever timed against it.
const HangGuard = 5 * time.Minute

// Output collects what a program writes (give it as the Cmd's Stdout or
// Stderr) and lets the test wait for a mark in it, safely while the
// program writes.
type Output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	closed  bool
	changed chan struct{} // closed, and replaced, at every write and at Close
}

// Write appends p and wakes the waiters.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	o.wake()
	return len(p), nil
}

func (o *Output) wake() {
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

// Close says no more will come (the program ended): a wait for a mark not
// there by then fails instead of waiting on.
func (o *Output) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	o.wake()
}

// String is what was written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// Await waits until the output holds mark count times; it fails the test
// if the output is closed first or HangGuard passes.
func (o *Output) Await(tb testing.TB, mark string, count int) {
	tb.Helper()
	guard := time.NewTimer(HangGuard)
	defer guard.Stop()
	for {
		o.mu.Lock()
		n, closed, text := strings.Count(o.buf.String(), mark), o.closed, o.buf.String()
		if o.changed == nil {
			o.changed = make(chan struct{})
		}
		changed := o.changed
		o.mu.Unlock()
		switch {
		case n >= count:
			return
		case closed:
			tb.Fatalf("the output ended with %d of %d %q:\n%s", n, count, mark, text)
		}
		select {
		case <-changed:
		case <-guard.C:
			tb.Fatalf("%d of %d %q after %v:\n%s", n, count, mark, HangGuard, text)
		}
	}
}

// Poll calls cond until it is true, failing the test (saying what was
// awaited) if HangGuard passes first. For states only polling can see
// (a /proc file); a program's own mark is better awaited with Output.
func Poll(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(HangGuard)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 100*time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not so after %v", what, HangGuard)
		}
		time.Sleep(pause)
	}
}
