package testfixture

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// TraceBatches returns the events of the trace named by $LPT_FILE in
// batches of n and the trace's time shift, or skips tb: the benchmarks of
// the model and the sink on a real trace (e.g. of
// bench/workloads/longlived.c).
func TraceBatches(tb testing.TB, n int) ([][]event.Event, uint) {
	tb.Helper()
	path := os.Getenv("LPT_FILE")
	if path == "" {
		tb.Skip("needs LPT_FILE (a trace, e.g. of bench/workloads/longlived.c)")
	}
	batches, shift, err := tracefile.ReadBatches(path, n)
	if err != nil {
		tb.Fatal(err)
	}
	return batches, shift
}

// ThreadCPU is the CPU time of the calling thread and of the process: on
// a loaded machine, what a benchmark spends waiting for a core is no cost
// of its own.
func ThreadCPU() (thread, proc time.Duration) {
	var t, p unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &t)
	unix.Getrusage(unix.RUSAGE_SELF, &p)
	d := func(r *unix.Rusage) time.Duration { return time.Duration(r.Utime.Nano() + r.Stime.Nano()) }
	return d(&t), d(&p)
}
