package session

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/leakpath/leakpath/internal/render/report"
	"github.com/leakpath/leakpath/internal/sys/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
)

// askedLog keeps the snapshots and leak checks the program asked for
// itself (leakpath_snapshot, leakpath_leak_check of
// agent/include/leakpath.h): each is written to a file, like `leakpath
// snapshot` writes one, and listed after the run's report.
type askedLog struct {
	dir     string // where the files go
	started time.Time
	mu      sync.Mutex
	notes   []string
}

// add writes what one request produced and notes it; it runs on the
// collector's pipeline, after the program got its answer.
func (a *askedLog) add(pid int32, req control.Request, resp control.Response) {
	what := fmt.Sprintf("snapshot %q", req.Label)
	if req.Op == "leak-check" {
		what = "leak check"
	}
	at := time.Since(a.started).Seconds()
	note := ""
	switch {
	case resp.Error != "":
		note = fmt.Sprintf("%s asked by tid %d at %.3g s failed: %s", what, req.TID, at, resp.Error)
	default:
		f, path, err := createSnapshotFile(a.dir, "", int(pid))
		if err == nil {
			_, err = f.Write(append(resp.Report, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		where := path
		if err != nil {
			where = fmt.Sprintf("not written: %v", err)
		}
		found := ""
		if req.Op == "leak-check" {
			unit := "blocks"
			if resp.LeakedBlocks == 1 {
				unit = "block"
			}
			found = fmt.Sprintf(", %s %s (%s) leaked", report.Count(resp.LeakedBlocks), unit, report.Bytes(resp.LeakedBytes))
		}
		note = fmt.Sprintf("%s asked by tid %d at %.3g s (paused %.3g s)%s: %s", what, req.TID, at, resp.PauseSeconds, found, where)
	}
	a.mu.Lock()
	a.notes = append(a.notes, note)
	a.mu.Unlock()
}

// write lists the requests after the run's report.
func (a *askedLog) write(w io.Writer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.notes {
		fmt.Fprintf(w, "leakpath: %s\n", termsafe.Text(n))
	}
}
