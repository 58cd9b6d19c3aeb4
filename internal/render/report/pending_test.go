package report

import (
	stdbytes "bytes"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// TestPendingBlockUnknownFunction: a snapshot's pending block at a stack
// that has allocated nothing yet in the model (its site's function is not
// known) has no "function" in the JSON report, as the text names none: not
// "fn(0)".
func TestPendingBlockUnknownFunction(t *testing.T) {
	s := goldenSession(running)
	p := s.Process(0)
	const freeStack = 5 // a stack only frees were made at
	if site := p.Site(freeStack); site == nil || site.Fn != 0 {
		t.Fatalf("stack %d: want a site that allocated nothing, got %+v", freeStack, site)
	}
	p.Pending = map[uint64]heap.Block{0x90000: {Size: 32, Site: freeStack, Fn: event.Malloc}}
	opts := goldenOptions()
	snapshot(&opts)
	for _, format := range []string{"json", "text"} {
		var b stdbytes.Buffer
		if err := New(s, 0, opts).Generate(&b, format); err != nil {
			t.Fatal(err)
		}
		if format == "json" {
			checkSchema(t, "the snapshot", b.Bytes())
		}
		if strings.Contains(b.String(), "fn(") {
			t.Errorf("%s report names a function fn(N):\n%s", format, b.String())
		}
		if !strings.Contains(b.String(), "32") {
			t.Errorf("%s report does not show the pending block of 32 B:\n%s", format, b.String())
		}
	}
}
