package collect

import (
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/target/control"
)

// fakeRequester answers "probe" requests, recording the image asked about.
type fakeRequester struct{ asked *Image }

func (f *fakeRequester) Image(*Image) ImageAnalysis { return nil }
func (f *fakeRequester) Op() string                 { return "probe" }
func (f *fakeRequester) Request(im *Image, req control.Request) control.Response {
	f.asked = im
	return control.Response{Text: "probed"}
}

// TestControlAsksAnalyses: a control request that is not the collector's
// own goes to the analysis that answers its operation, about the image
// of its pid; with none, it is refused as coming to a run started without
// that flag; about a pid not recorded, it is refused as such.
func TestControlAsksAnalyses(t *testing.T) {
	f := &fakeRequester{}
	c := newCollector(Options{Analyses: []Analysis{f}})
	defer c.sink.close()
	go c.sink.run()
	im := &image{idx: 3, pid: 4242}
	im.img = &Image{PID: im.pid, Proc: im.idx, c: c, im: im}
	c.current[im.pid] = im

	if r := c.control(control.Request{Op: "root-cause", PID: 4242}); !strings.Contains(r.Error, "without --root-cause") {
		t.Errorf("a request no analysis answers: %+v", r)
	}
	if r := c.control(control.Request{Op: "probe", PID: 1}); !strings.Contains(r.Error, "pid 1 is not recorded") {
		t.Errorf("a request about a pid not recorded: %+v", r)
	}
	if f.asked != nil {
		t.Fatalf("the analysis was asked about %+v", f.asked)
	}
	if r := c.control(control.Request{Op: "probe", PID: 4242}); r.Text != "probed" || r.Error != "" {
		t.Errorf("the analysis's answer: %+v", r)
	}
	if f.asked != im.img {
		t.Errorf("the analysis was asked about %+v, want image %d", f.asked, im.idx)
	}
}
