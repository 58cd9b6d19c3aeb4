package main

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestThreadNames: names set with prctl in the thread, with
// pthread_setname_np from another thread, and on the main thread reach
// the model.
func TestThreadNames(t *testing.T) {
	bin := fixture(t, "threadnames.c")
	trace := filepath.Join(t.TempDir(), "names.lpt")
	r := leakpath(t, []string{"-o", trace}, nil, bin)
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	names := traceThreadNames(t, trace)
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "named-by-main,self-named,the-main" {
		t.Errorf("thread names %q, want named-by-main, self-named, the-main", got)
	}
}

// traceThreadNames replays the trace at path and returns the names of its
// last image's threads (the program's, after any exec; "" for a thread
// never named).
func traceThreadNames(t *testing.T, path string) []string {
	t.Helper()
	s := heap.NewSession()
	eachTraceEvent(t, path, func(ev *event.Event) { s.Apply([]event.Event{*ev}) })
	var names []string
	for _, th := range s.Procs[len(s.Procs)-1].Threads {
		names = append(names, th.Name)
	}
	return names
}
