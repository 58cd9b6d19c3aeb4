package wire

import (
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// heapRecords is a ring's worth of the long-lived loop's records
// (bench/workloads/longlived.c): allocations kept pending by the agent
// (late) and plain ones, each followed by a free.
func heapRecords(n int) []byte {
	var in []uint64
	t := uint64(1000)
	for i := 0; i < n; i++ {
		t += 40
		a := 0x5555_0000_0000 + uint64(i*48)
		if i%2 == 0 {
			in = append(in, hdr(RecAllocLate, int(event.Malloc), 6, uint32(1+i%4)), t, a, uint64(16+i%500), t-30, 0)
		} else {
			in = append(in, hdr(RecAlloc, int(event.Malloc), 4, uint32(1+i%4)), t, a, uint64(16+i%500))
		}
		in = append(in, hdr(RecFree, int(event.FreeFn), 3, uint32(5+i%4)), t+20, a-4800)
	}
	return words(in...)
}

// BenchmarkDecodeHeap decodes allocations and frees into a reused
// buffer, as the collector drains a ring into its queue.
func BenchmarkDecodeHeap(b *testing.B) {
	const n = 8192
	data := heapRecords(n)
	var r Ring
	r.Thread = 7
	var out []event.Event
	for b.Loop() {
		var err error
		out, err = Decode(data, 1, &r, out[:0])
		if err != nil || len(out) != 2*n {
			b.Fatal(err, len(out))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2*n), "ns/record")
}
