package main

import (
	"io"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/tracefile"
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
	tr, err := tracefile.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s := heap.NewSession()
	var buf []event.Event
	for {
		buf, err = tr.Next(buf)
		s.Apply(buf)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for _, th := range s.Procs[0].Threads {
		names = append(names, th.Name)
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "named-by-main,self-named,the-main" {
		t.Errorf("thread names %q, want named-by-main, self-named, the-main", got)
	}
}
