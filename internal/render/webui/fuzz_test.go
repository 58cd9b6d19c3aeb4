package webui

import (
	"encoding/binary"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
)

// FuzzIndex feeds the index allocations, frees and folded pairs at
// arbitrary times (a trace's times are whatever its file says): it must
// neither panic nor hang, keep at most MaxBuckets buckets aligned to their
// width, and count every byte in the bucket of its time.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 8, 1, 2, 0, 0, 0, 0, 0, 0, 0, 8})
	f.Add([]byte{0, 255, 255, 255, 255, 255, 255, 255, 255, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 128, 3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		ix := NewIndex()
		p := &heap.Process{}
		var allocBytes, allocs uint64
		var times []uint64
		for len(data) >= 10 {
			op, tm, size := data[0]%4, binary.LittleEndian.Uint64(data[1:9]), uint64(data[9])
			data = data[10:]
			b := heap.Block{Size: size, Time: tm, Site: heap.StackID(size % 5)}
			switch op {
			case 0:
				ix.Allocated(p, b)
				allocBytes += size
				allocs++
			case 1:
				ix.Freed(p, b, event.FreeFn, tm)
			case 2:
				ix.Folded(p, b.Site, &event.Event{Time: tm, Addr: 2, Size: size, Addr2: 1})
				allocBytes += size
				allocs += 2
			case 3:
				ix.Pending(p, size, tm)
			}
			times = append(times, tm)
		}
		ix.Finish()
		if len(ix.Buckets) > MaxBuckets {
			t.Fatalf("%d buckets", len(ix.Buckets))
		}
		if len(times) == 0 {
			return
		}
		if ix.Width == 0 || ix.Start%ix.Width != 0 {
			t.Fatalf("start %d, width %d", ix.Start, ix.Width)
		}
		for _, tm := range times {
			if ix.Width >= maxWidth {
				break // the widest buckets: times before the first are counted in it
			}
			if tm < ix.Start || (tm-ix.Start)/ix.Width >= uint64(len(ix.Buckets)) {
				t.Fatalf("time %d outside the %d buckets of %d from %d", tm, len(ix.Buckets), ix.Width, ix.Start)
			}
		}
		var gotBytes, gotAllocs uint64
		for _, b := range ix.Buckets {
			gotBytes += b.AllocBytes
			gotAllocs += b.Allocs
		}
		if gotBytes != allocBytes || gotAllocs != allocs {
			t.Fatalf("buckets count %d bytes in %d allocations, want %d in %d", gotBytes, gotAllocs, allocBytes, allocs)
		}
		for _, kind := range FlameKinds {
			if _, err := ix.SiteValues(kind, 0, len(ix.Buckets)-1); err != nil {
				t.Fatal(err)
			}
		}
		ix.Diff(0, len(ix.Buckets)-1)
	})
}
