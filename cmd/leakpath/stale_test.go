package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/model/tracefile"
	"github.com/leakpath/leakpath/internal/render/report"
)

// staleReport is what the stale tests read of a JSON report.
type staleReport struct {
	StaleWatch *struct {
		Epochs       uint32 `json:"epochs"`
		Watched      int    `json:"watched_blocks"`
		Stale        int    `json:"stale_blocks"`
		PoolBase     string `json:"pool_base"`
		PoolPages    uint32 `json:"pool_pages"`
		WatchedPages uint32 `json:"watched_pages"`
	} `json:"stale_watch"`
	Leaks []struct {
		Kind        string      `json:"kind"`
		Blocks      uint64      `json:"blocks"`
		AgeEpochs   uint32      `json:"age_epochs"`
		LastAccess  *float64    `json:"last_access"`
		Sampled     bool        `json:"sampled"`
		Estimated   uint64      `json:"estimated_blocks"`
		Stack       []jsonFrame `json:"stack"`
		StaleBlocks []struct {
			Address   string `json:"address"`
			AgeEpochs uint32 `json:"age_epochs"`
		} `json:"stale_blocks"`
	} `json:"leaks"`
}

func parseAddr(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("address %q: %v", s, err)
	}
	return v
}

// TestStale: a server loop whose cache entries are inserted and never
// read again, beside a hot set another thread reads many times an epoch
// and config data read every 4 epochs (under T2, the default 10): the
// cache entries are reported stale, and not one hot or config block (zero
// false positives), though the pool watches some of each. The program
// paces itself by the epochs (leakpath_stale_epoch), not by the clock, so
// a slow machine changes how long the run takes, not what it tests. A
// snapshot at epoch 20 of its loop reports the stale entries so far, and
// its scan (which reads every block) resets no age. The trace replayed
// epoch by epoch gives the detection latency. The accessed bits miss a
// read at times (see internal/analysis/stale): a run where a hot block
// went T2 epochs unseen or a hot or config block was reported stale is
// tried again, up to three in all.
func TestStale(t *testing.T) {
	bin := fixture(t, "staleserver.c", includeFlag())
	const t2 = report.DefaultStaleT2
	const loopEpochs = 30 // the program's loop: 10 cache entries an epoch
	var (
		dir, trace string
		r          result
		rep        staleReport
		watched    map[string]int
		kept       map[uint64]string // hot and config blocks in the pool
	)
	for try := 1; ; try++ {
		dir = t.TempDir()
		trace = filepath.Join(dir, "stale.lpt")
		r = leakpath(t, []string{"-o", trace, "--stale", "--stale-epoch", "100ms", "--stale-sample", "2",
			"--stale-t1", "3", "--stale-t2", strconv.Itoa(t2), "--snapshot-dir", dir}, nil, bin, strconv.Itoa(loopEpochs), "4", "20")
		if r.code != 0 || !bytes.Contains(r.stdout, []byte("300 cached")) {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		rep = staleReport{}
		if err := json.Unmarshal(r.reportJSON, &rep); err != nil {
			t.Fatal(err)
		}
		w := rep.StaleWatch
		if w == nil {
			t.Fatalf("no stale_watch in the report:\n%s", r.text)
		}
		if w.Epochs < loopEpochs || w.WatchedPages != w.PoolPages || w.PoolPages == 0 {
			t.Fatalf("stale_watch %+v: want %d+ epochs, every pool page a mapping of its own", *w, loopEpochs)
		}
		base := parseAddr(t, w.PoolBase)
		inPool := func(a uint64) bool { return a >= base && a < base+uint64(w.PoolPages)*4096 }
		watched, kept = map[string]int{}, map[uint64]string{}
		for _, line := range strings.Split(string(r.stdout), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && (f[0] == "hot" || f[0] == "config") {
				if a := parseAddr(t, f[1]); inPool(a) {
					watched[f[0]]++
					kept[a] = f[0]
				}
			}
		}
		// A hot block (read in every epoch) seen untouched for T2 epochs
		// in a row, or a config block (every 4) reported stale, is the
		// accessed bits missing its reads, not the model (TestAccessedBits
		// tries again for the same reason).
		_, _, _, hotAge := replayStale(t, trace, nil, kept, t2)
		keptStale := 0
		for _, l := range rep.Leaks {
			for _, b := range l.StaleBlocks {
				if _, ok := kept[parseAddr(t, b.Address)]; ok && l.Kind == "stale" {
					keptStale++
				}
			}
		}
		if hotAge < t2 && keptStale == 0 || try == 3 {
			break
		}
		t.Logf("run %d: a hot block went %d epochs unseen, %d hot or config blocks reported stale (the accessed bits missed their reads, or the reader did not run: %s); again",
			try, hotAge, keptStale, hotUnread(r.stdout))
	}
	w := rep.StaleWatch
	if watched["hot"] == 0 || watched["config"] == 0 {
		t.Fatalf("the pool watches %d hot and %d config blocks: the test needs some of each", watched["hot"], watched["config"])
	}
	var cache []uint64
	falsePositives := 0
	for _, l := range rep.Leaks {
		if l.Kind != "stale" {
			continue
		}
		if !l.Sampled || l.LastAccess == nil || l.AgeEpochs < t2 || int(l.Blocks) != len(l.StaleBlocks) {
			t.Errorf("stale entry %+v", l)
		}
		for _, b := range l.StaleBlocks {
			if what, ok := kept[parseAddr(t, b.Address)]; ok {
				falsePositives++
				t.Errorf("%s block %s reported stale (age %d)", what, b.Address, b.AgeEpochs)
			}
		}
		switch {
		case stackHas(l.Stack, "cache_insert"):
			for _, b := range l.StaleBlocks {
				cache = append(cache, parseAddr(t, b.Address))
			}
			if l.Estimated < l.Blocks {
				t.Errorf("cache: %d stale blocks extrapolated to %d", l.Blocks, l.Estimated)
			}
		case stackHas(l.Stack, "hot_alloc"), stackHas(l.Stack, "config_alloc"):
			t.Errorf("a stale entry of hot or config data: %+v", l)
		}
	}
	if len(cache) == 0 {
		t.Fatalf("no stale cache entry:\n%s", r.text)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "leakpath.snapshot.*.json"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v, want 1", snaps)
	}
	b, err := os.ReadFile(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	var snap staleReport
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	snapCache := 0
	for _, l := range snap.Leaks {
		if l.Kind == "stale" && stackHas(l.Stack, "cache_insert") {
			snapCache += int(l.Blocks)
		}
	}
	if snap.StaleWatch == nil || snapCache == 0 {
		t.Fatalf("the snapshot reports no stale cache entry:\n%s", b)
	}
	oldest := uint32(0)
	for _, l := range rep.Leaks {
		if l.Kind == "stale" && stackHas(l.Stack, "cache_insert") {
			oldest = max(oldest, l.AgeEpochs)
		}
	}
	if since := w.Epochs - snap.StaleWatch.Epochs; oldest <= since+1 {
		t.Errorf("the oldest cache entry is %d epochs old at exit, %d epochs after the snapshot: its scan reset the ages", oldest, since)
	}
	if !strings.Contains(r.text, "STALE") || !strings.Contains(r.text, "cache_insert") {
		t.Errorf("the text report lacks the stale cache:\n%s", r.text)
	}
	t.Logf("watched %d hot, %d config blocks: %d false positives; %d cache entries stale; %s", watched["hot"], watched["config"], falsePositives, len(cache), hotUnread(r.stdout))

	// The trace keeps the epochs: `leakpath report` finds the same.
	out, err := exec.Command(lpBin, "report", "--stale-t1", "3", "--stale-t2", strconv.Itoa(t2), trace).CombinedOutput()
	if err != nil {
		t.Fatalf("leakpath report: %v\n%s", err, out)
	}
	if want := staleSummary(r.text); want == "" || staleSummary(string(out)) != want {
		t.Errorf("leakpath report of the trace says %q, the run said %q", staleSummary(string(out)), want)
	}

	// The trace replayed: each cache entry (written once, at insertion)
	// turns stale T2 epochs after the first epoch that saw it touched;
	// a hot block is seen untouched in an epoch only when an access was
	// missed.
	lat, missed, hotEpochs, hotAge := replayStale(t, trace, cache, kept, t2)
	if len(lat) == 0 {
		t.Fatal("the replayed trace turned no cache entry stale")
	}
	slices.Sort(lat)
	t.Logf("detection latency from insertion: %d to %d epochs (median %d) for %d entries; hot blocks seen untouched in %d of %d block-epochs, at most %d in a row",
		lat[0], lat[len(lat)-1], lat[len(lat)/2], len(lat), missed, hotEpochs, hotAge)
	if hotAge >= t2 {
		t.Errorf("a hot block went %d epochs unseen: stale for a while", hotAge)
	}
	if lat[0] < t2 || lat[len(lat)-1] > t2+2 {
		t.Errorf("latencies %v: want %d to %d epochs", lat, t2, t2+2)
	}
}

// hotUnread is staleserver's line on its hot reader: the most epochs in
// a row it was not run in (then a hot block is untouched, rightly).
func hotUnread(stdout []byte) string {
	for _, line := range strings.Split(string(stdout), "\n") {
		if s, ok := strings.CutPrefix(line, "hot reader: "); ok {
			return s
		}
	}
	return "no hot reader line"
}

// replayStale replays trace event by event and returns, for each block of
// cache, how many epochs after its allocation it first turned stale, and
// for the kept blocks of the "hot" kind how many epochs saw them
// untouched, of how many, and the oldest any got.
func replayStale(t *testing.T, trace string, cache []uint64, kept map[uint64]string, t2 uint32) (lat []int, missed, hotEpochs int, hotAge uint32) {
	t.Helper()
	rd, err := tracefile.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	want := map[uint64]bool{}
	for _, a := range cache {
		want[a] = true
	}
	s := heap.NewSession()
	var epochs []uint64
	done := map[uint64]bool{}
	var buf []event.Event
	for {
		buf, err = rd.Next(buf)
		for i := range buf {
			s.Apply(buf[i : i+1])
			if buf[i].Kind != event.StaleEpoch || buf[i].Proc != 0 {
				continue
			}
			epochs = append(epochs, buf[i].Time)
			p := s.Procs[0]
			for addr, a := range p.Stale.Slots {
				if kept[addr] == "hot" {
					hotEpochs++
					if a.Age > 0 {
						missed++
					}
					hotAge = max(hotAge, a.Age)
				}
				if want[addr] && !done[addr] && a.Age >= t2 {
					done[addr] = true
					first, _ := slices.BinarySearch(epochs, a.Block)
					lat = append(lat, len(epochs)-first)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return lat, missed, hotEpochs, hotAge
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaleTouch: blocks served from the slot pool behave as any other:
// read(2) into them, write(2) from them, memcpy, another thread, realloc
// in and out, calloc after reuse, malloc_usable_size, a fork child. The
// program's output and exit code are the same as without leakpath, with
// an epoch (a clear of the accessed bits) every 20 ms; the program waits
// 2 epochs (leakpath_stale_epoch) at each of its 6 naps.
func TestStaleTouch(t *testing.T) {
	bin := fixture(t, "staletouch.c", includeFlag())
	want := native(t, nil, bin)
	got := leakpath(t, []string{"--stale", "--stale-epoch", "20ms", "--stale-sample", "1"}, nil, bin)
	if !bytes.Equal(got.stdout, want.stdout) || !bytes.Equal(got.stderr, want.stderr) || got.code != want.code {
		t.Fatalf("with leakpath: exit %d, stdout:\n%s\nstderr:\n%s\nwithout: exit %d, stdout:\n%s\nstderr:\n%s",
			got.code, got.stdout, got.stderr, want.code, want.stdout, want.stderr)
	}
	var rep staleReport
	if err := json.Unmarshal(got.reportJSON, &rep); err != nil {
		t.Fatal(err)
	}
	// The blocks still live at exit (in, shared) were served from the pool.
	if rep.StaleWatch == nil || rep.StaleWatch.Watched < 2 || rep.StaleWatch.Epochs < 12 {
		t.Fatalf("stale_watch %+v: the pool served too little for the test to mean anything\n%s", rep.StaleWatch, got.text)
	}
}

// staleSummary is the "STALE: ..." line of a text report.
func staleSummary(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "STALE: ") {
			return line
		}
	}
	return ""
}
