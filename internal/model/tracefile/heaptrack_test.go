package tracefile

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
)

// heaptrackText renders evs the way heaptrack_interpret writes a trace
// (heaptrack 1.4: "s" strings, "i" instruction pointers, "t" trace nodes,
// "a" allocation infos, "+"/"-" per malloc/free by allocation info index,
// "c" a timestamp in ms every 10 ms), so that its size after `zstd -c`
// (what heaptrack runs) can be compared with ours.
func heaptrackText(evs []event.Event, ticksPerSec float64) []byte {
	var b bytes.Buffer
	b.WriteString("v 10400 3\nX ./prog arg\nI 1000 3e8a7f\n")
	ips := map[uint64]int{}
	nodes := map[[2]int]int{}
	traces := map[uint32]int{}
	infos := map[[2]uint64]int{}
	live := map[uint64]int{}
	nstr := 0
	lastMs := -1
	var t0 uint64
	for _, ev := range evs {
		if ev.Time != 0 {
			if t0 == 0 {
				t0 = ev.Time
			}
			ms := int(float64(ev.Time-t0) / ticksPerSec * 1000)
			if ms >= lastMs+10 {
				fmt.Fprintf(&b, "c %x\n", ms)
				lastMs = ms
			}
		}
		switch ev.Kind {
		case event.StackDef:
			parent := 0
			for i := len(ev.Frames()) - 1; i >= 0; i-- {
				ip, ok := ips[ev.Frames()[i]]
				if !ok {
					nstr++
					name := fmt.Sprintf("ns::function_%d(int, char const*)", nstr)
					fmt.Fprintf(&b, "s %x %s\n", len(name), name)
					ip = len(ips) + 1
					ips[ev.Frames()[i]] = ip
					fmt.Fprintf(&b, "i %x 1 %x 2 %x\n", ev.Frames()[i], nstr+2, 10+nstr%500)
				}
				n, ok := nodes[[2]int{ip, parent}]
				if !ok {
					n = len(nodes) + 1
					nodes[[2]int{ip, parent}] = n
					fmt.Fprintf(&b, "t %x %x\n", ip, parent)
				}
				parent = n
			}
			traces[ev.Stack] = parent
		case event.Alloc:
			k := [2]uint64{ev.Size, uint64(traces[ev.Stack])}
			ai, ok := infos[k]
			if !ok {
				ai = len(infos)
				infos[k] = ai
				fmt.Fprintf(&b, "a %x %x\n", ev.Size, traces[ev.Stack])
			}
			live[ev.Addr] = ai
			fmt.Fprintf(&b, "+ %x\n", ai)
		case event.Free:
			if ai, ok := live[ev.Addr]; ok {
				delete(live, ev.Addr)
				fmt.Fprintf(&b, "- %x\n", ai)
			}
		}
	}
	return b.Bytes()
}

// TestHeaptrackCompare compares our trace of the synthetic stream with
// heaptrack's (go test -run HeaptrackCompare -v -report).
func TestHeaptrackCompare(t *testing.T) {
	if !*report {
		t.Skip("needs -report")
	}
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("no zstd command:", err)
	}
	evs := synth1M()
	text := heaptrackText(evs, 2.9e9)
	cmd := exec.Command("zstd", "-c")
	cmd.Stdin = bytes.NewReader(text)
	z, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("heaptrack-style text: %d bytes, zstd -3: %d bytes, %.3f B/event", len(text), len(z), float64(len(z))/float64(len(evs)))
	for _, c := range []Compression{CompressFastest, CompressDefault, CompressBetter} {
		data := writeTrace(t, evs, Options{Compression: c}, 4096)
		t.Logf("leakpath compression %d: %d bytes, %.3f B/event, %.2f× heaptrack", c, len(data),
			float64(len(data))/float64(len(evs)), float64(len(data))/float64(len(z)))
	}
}
