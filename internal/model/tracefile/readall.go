package tracefile

import (
	"io"

	"github.com/leakpath/leakpath/internal/model/event"
)

// ReadBatches reads the whole trace at path into batches of up to n
// events, as Next returns them, with its time shift: for benchmarks that
// replay a real trace through one stage of the pipeline.
func ReadBatches(path string, n int) (batches [][]event.Event, shift uint, err error) {
	r, err := Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	for {
		buf, err := r.Next(make([]event.Event, 0, n))
		if len(buf) > 0 {
			batches = append(batches, buf)
		}
		if err == io.EOF {
			return batches, r.TimeShift(), nil
		}
		if err != nil {
			return nil, 0, err
		}
	}
}
