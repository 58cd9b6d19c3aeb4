// Command bench measures leakpath against running natively, heaptrack and
// valgrind on the same workloads in one run, and prints tables of
// medians and ratios (run it with `make bench`, which also writes them into
// docs/bench.md with -write).
//
// Each workload runs -runs times under each tool, the tools taking turns
// so that drift of a noisy machine spreads over all of them. For each run
// it takes the wall time, the CPU time of the whole process tree, and the
// peak resident set of its processes, sampled from /proc (the largest
// single process, and the tool's own process: leakpath's collector,
// heaptrack's interpreter). Then it sizes the traces and times the
// reports (leakpath report vs heaptrack_print). Valgrind runs a smaller
// size of the workload (it is 20-130 times slower) and is compared by
// ratio to native at that size.
//
// It installs nothing: a missing tool is a printed skip.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

type workload struct {
	name  string
	argv  []string // the program and its arguments
	small []string // a smaller run for valgrind (nil: same)
	stdin string
}

// The long-lived rows whose cost per record is compared (one thread and
// four, with frame pointers).
const (
	longFPName      = "long-lived, frame pointers"
	longThreadsName = "long-lived, 4 threads"
)

type measure struct {
	wall, cpu  time.Duration
	peakRSS    int64 // KiB, largest process of the tree
	toolRSS    int64 // KiB, the tool's own process (0: none)
	traceBytes int64
	reportWall time.Duration
	failed     string
}

func main() {
	runs := flag.Int("runs", 5, "runs per tool and workload (medians are reported)")
	size := flag.Int("n", 2000000, "allocations of the allocation loop")
	only := flag.String("only", "", "run only the workloads whose name contains this")
	leakpathBin := flag.String("leakpath", "", "leakpath binary (default: bin/leakpath of this repository)")
	scanMB := flag.String("scan-mb", "100,500", "heap sizes (MB) of the exit-scan table; empty: none")
	ab := flag.String("ab", "", "instead of the tables: this leakpath binary (A) against -leakpath (B) on the program after --, runs alternating")
	write := flag.String("write", "", "also write the printed tables into the results block of FILE (make bench: docs/bench.md); not with -only or -ab")
	flag.Parse()
	if *write != "" && (*only != "" || *ab != "") {
		fmt.Fprintln(os.Stderr, "bench: -write takes the whole run's tables: not with -only or -ab")
		os.Exit(2)
	}
	var printed func() ([]byte, error)
	if *write != "" {
		var err error
		if printed, err = teeStdout(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *ab != "" {
		if err := abBench(*runs, *ab, *leakpathBin, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*runs, *size, *only, *leakpathBin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *scanMB != "" && (*only == "" || strings.Contains("exit scan", *only)) {
		if err := scanBench(*runs, *leakpathBin, *scanMB); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *only == "" || strings.Contains("--json on cc1plus", *only) {
		if err := jsonBench(*runs, *leakpathBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *only == "" || strings.Contains("scopes", *only) {
		if err := scopeBench(*runs, *leakpathBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if *only == "" || strings.Contains("root cause", *only) {
		if err := rootCauseBench(min(*runs, 3), *leakpathBin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	}
	if printed != nil {
		out, err := printed()
		if err == nil {
			err = writeResults(*write, out)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "bench: tables written to %s\n", *write)
	}
}

// benchDir returns the repository, the leakpath binary (lp, or the
// repository's bin/leakpath) and a new work directory named after what,
// which the caller removes.
func benchDir(lp, what string) (root, bin, work string, err error) {
	root = repoRoot()
	if lp == "" {
		lp = filepath.Join(root, "bin", "leakpath")
	}
	work, err = os.MkdirTemp("", "leakpath-bench-"+what+"-")
	return root, lp, work, err
}

// repoRoot returns the repository's directory.
func repoRoot() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(here))
}

func run(runs, size int, only, lp string) error {
	root, lp, work, err := benchDir(lp, "main")
	if err != nil {
		return err
	}
	if _, err := os.Stat(lp); err != nil {
		os.RemoveAll(work)
		return fmt.Errorf("%s not found: run make first", lp)
	}
	defer os.RemoveAll(work)

	cc := func(out string, flags ...string) (string, error) {
		bin := filepath.Join(work, out)
		args := append([]string{"-o", bin, filepath.Join(root, "bench", "workloads", "allocloop.c"), "-pthread", "-g"}, flags...)
		if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("compiling allocloop: %v\n%s", err, b)
		}
		return bin, nil
	}
	fp, err := cc("allocloop-fp", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return err
	}
	nofp, err := cc("allocloop", "-O2")
	if err != nil {
		return err
	}
	// The same loop with blocks that outlive the agent's fold window:
	// every allocation and free is a record.
	ccLong := func(out string, flags ...string) (string, error) {
		bin := filepath.Join(work, out)
		args := append([]string{"-o", bin, filepath.Join(root, "bench", "workloads", "longlived.c"), "-pthread", "-g"}, flags...)
		if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("compiling longlived: %v\n%s", err, b)
		}
		return bin, nil
	}
	longFP, err := ccLong("longlived-fp", "-O2", "-fno-omit-frame-pointer")
	if err != nil {
		return err
	}
	longNoFP, err := ccLong("longlived", "-O2")
	if err != nil {
		return err
	}
	n := strconv.Itoa(size)
	small := strconv.Itoa(size / 20)
	workloads := []workload{
		{name: "alloc loop, frame pointers", argv: []string{fp, n}, small: []string{fp, small}},
		{name: "alloc loop, -O2", argv: []string{nofp, n}, small: []string{nofp, small}},
		{name: "alloc loop, 1 thread", argv: []string{nofp, n, "1"}, small: []string{nofp, small, "1"}},
		{name: "alloc loop, 2 threads", argv: []string{nofp, n, "2"}, small: []string{nofp, small, "2"}},
		{name: longFPName, argv: []string{longFP, n}, small: []string{longFP, small}},
		{name: "long-lived, -O2", argv: []string{longNoFP, n}, small: []string{longNoFP, small}},
		{name: longThreadsName, argv: []string{longFP, n, "4"}, small: []string{longFP, small, "4"}},
	}
	// C++ containers: many call sites in libstdc++ (no frame pointers),
	// most blocks outliving the agent's window, freed in tree order.
	cxx := filepath.Join(work, "cxxmap")
	if b, err := exec.Command("c++", "-O2", "-g", "-o", cxx, filepath.Join(root, "bench", "workloads", "cxxmap.cc")).CombinedOutput(); err == nil {
		workloads = append(workloads, workload{name: "C++ map, -O2", argv: []string{cxx, strconv.Itoa(size / 10)}, small: []string{cxx, strconv.Itoa(size / 200)}})
	} else {
		fmt.Printf("skip: C++ map workload (c++ failed: %v %s)\n", err, bytes.TrimSpace(b))
	}
	if _, err := exec.LookPath("sqlite3"); err == nil {
		workloads = append(workloads, workload{name: "sqlite3 inserts", argv: []string{"sqlite3", ":memory:"}, stdin: sqliteScript(200000),
			small: []string{"sqlite3", ":memory:"}})
	} else {
		fmt.Println("skip: sqlite3 workload (sqlite3 not installed)")
	}
	// The real interpreter, not a wrapper script (pyenv's shims are bash,
	// and heaptrack does not follow exec).
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		py, err = exec.LookPath("python3")
	}
	if err == nil {
		workloads = append(workloads, workload{name: "python3 script", argv: []string{py, "-c", pythonScript}})
	} else {
		fmt.Println("skip: python3 workload (python3 not installed)")
	}
	// A program that does nothing: each tool's fixed cost (start-up, the
	// agent's registration, the exit scan, the trace and the report).
	if t, err := exec.LookPath("true"); err == nil {
		workloads = append(workloads, workload{name: "empty program (true)", argv: []string{t}})
	}
	workloads = slices.DeleteFunc(workloads, func(w workload) bool { return only != "" && !strings.Contains(w.name, only) })
	if len(workloads) == 0 {
		return nil
	}
	haveHeaptrack := lookup("heaptrack") && lookup("heaptrack_print")
	if !haveHeaptrack {
		fmt.Println("skip: heaptrack columns (heaptrack/heaptrack_print not installed: apt-get install heaptrack)")
	}
	haveValgrind := lookup("valgrind")
	if !haveValgrind {
		fmt.Println("skip: valgrind columns (valgrind not installed)")
	}

	tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	longArgv := map[string][]string{}
	fmt.Fprintf(tw, "workload\tnative\tleakpath\t×native\theaptrack\t×native\tlp/ht\tCPU lp/ht\tcollector/interp RSS\ttrace lp/ht\treport lp/ht\tvalgrind ×native\t\n")
	for _, w := range workloads {
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", w.name)
		var nat, lpm, htm []measure
		for i := 0; i < runs; i++ {
			nat = append(nat, measureCmd(w.argv, w.stdin, nil))
			trace := filepath.Join(work, "t.lpt")
			os.Remove(trace)
			m := measureCmd(append([]string{lp, "run", "-o", trace, "--report", os.DevNull, "--"}, w.argv...), w.stdin, []string{"leakpath"})
			m.traceBytes = fileSize(trace)
			m.reportWall = timeCmd(lp, "report", "--output", os.DevNull, trace)
			lpm = append(lpm, m)
			if haveHeaptrack {
				out := filepath.Join(work, "ht")
				removeGlob(out + "*")
				m := measureCmd(append([]string{"heaptrack", "-o", out}, w.argv...), w.stdin, []string{"heaptrack_inter"})
				if files, _ := filepath.Glob(out + "*"); len(files) == 1 {
					m.traceBytes = fileSize(files[0])
					m.reportWall = timeCmd("heaptrack_print", "-f", files[0])
				}
				htm = append(htm, m)
			}
		}
		vg := "-"
		if haveValgrind {
			argv := w.argv
			if w.small != nil {
				argv = w.small
			}
			vn := measureCmd(argv, w.stdin, nil)
			vm := measureCmd(append([]string{"valgrind", "-q", "--leak-check=no", "--log-file=" + os.DevNull}, argv...), w.stdin, nil)
			vg = fmt.Sprintf("%.1f", vm.wall.Seconds()/vn.wall.Seconds())
		}
		natW := median(nat, func(m measure) float64 { return m.wall.Seconds() })
		lpW := median(lpm, func(m measure) float64 { return m.wall.Seconds() })
		lpC := median(lpm, func(m measure) float64 { return m.cpu.Seconds() })
		lpR := median(lpm, func(m measure) float64 { return float64(m.toolRSS) })
		lpT := median(lpm, func(m measure) float64 { return float64(m.traceBytes) })
		lpP := median(lpm, func(m measure) float64 { return m.reportWall.Seconds() })
		htCols := "-\t-\t-\t-\t-\t-\t-"
		if len(htm) > 0 {
			htW := median(htm, func(m measure) float64 { return m.wall.Seconds() })
			htC := median(htm, func(m measure) float64 { return m.cpu.Seconds() })
			htR := median(htm, func(m measure) float64 { return float64(m.toolRSS) })
			htT := median(htm, func(m measure) float64 { return float64(m.traceBytes) })
			htP := median(htm, func(m measure) float64 { return m.reportWall.Seconds() })
			htCols = fmt.Sprintf("%.3f s\t%.1f\t%.2f\t%.2f\t%s/%s\t%.2f\t%.2f",
				htW, htW/natW, lpW/htW, lpC/htC, kib(lpR), kib(htR), lpT/htT, lpP/htP)
		}
		// Two decimals: the loop's target is 2.0 (issue 4).
		fmt.Fprintf(tw, "%s\t%.3f s\t%.3f s\t%.2f\t%s\t%s\t\n", w.name, natW, lpW, lpW/natW, htCols, vg)
		if w.name == longFPName || w.name == longThreadsName {
			longArgv[w.name] = w.argv
		}
		for _, ms := range [][]measure{nat, lpm, htm} {
			for _, m := range ms {
				if m.failed != "" {
					fmt.Fprintf(os.Stderr, "bench: %s: a run failed: %s\n", w.name, m.failed)
					break
				}
			}
		}
	}
	tw.Flush()
	if one, four := longArgv[longFPName], longArgv[longThreadsName]; one != nil && four != nil {
		fmt.Fprintf(os.Stderr, "bench: long-lived, 1 and 4 threads in turn ...\n")
		// Each allocation and free of the loop is a record.
		c1, c4 := perRecord(lp, filepath.Join(work, "t.lpt"), one, four, 2*runs, 2*size)
		fmt.Printf("long-lived loop, leakpath's CPU time per allocation or free over native's (program and collector; 1 and 4 threads in turn, medians of %d runs): 1 thread %.0f ns, 4 threads %.0f ns (%.2f×)\n",
			2*runs, c1, c4, c4/c1)
	}
	fmt.Printf("medians of %d runs; ×native = wall time over native; lp/ht = leakpath over heaptrack (below 1: leakpath is better);\n"+
		"RSS: peak of leakpath's collector / heaptrack's interpreter; valgrind (memcheck) ran a twentieth of the loops;\n"+
		"leakpath's DWARF cache ($LEAKPATH_CACHE_DIR) is as the runs leave it: cold at most for the first.\n", runs)
	fmt.Printf("%s, %s\n", sourceCommit(root), time.Now().Format("2006-01-02"))
	return nil
}

// sourceCommit says which commit of the repository the bench ran at, and
// whether its tree had changes (the binaries are built from the tree).
func sourceCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "commit unknown (no git)"
	}
	c := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " with uncommitted changes"
	}
	return c
}

func lookup(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

func kib(k float64) string {
	if k <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0fM", k/1024)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

func removeGlob(pattern string) {
	files, _ := filepath.Glob(pattern)
	for _, f := range files {
		os.RemoveAll(f)
	}
}

// perRecord returns leakpath's CPU time per record over native's, in ns,
// of programs one and four (records each, with a trace): the four
// commands take turns, run after run, so that the machine's speed, which
// can drift by tens of percent from one minute to the next, is the same
// for both. Failed runs are said and left out.
func perRecord(lp, trace string, one, four []string, runs, records int) (float64, float64) {
	type pair struct{ nat, lp []measure }
	var p [2]pair
	for range runs {
		for i, argv := range [][]string{one, four} {
			p[i].nat = append(p[i].nat, measureCmd(argv, "", nil))
			p[i].lp = append(p[i].lp, measureCmd(append([]string{lp, "run", "-o", trace, "--report", os.DevNull, "--"}, argv...), "", []string{"leakpath"}))
		}
	}
	c := func(m measure) float64 { return m.cpu.Seconds() }
	var ns [2]float64
	for i := range p {
		for _, m := range append(p[i].nat, p[i].lp...) {
			if m.failed != "" {
				fmt.Fprintf(os.Stderr, "bench: long-lived in turn: a run failed: %s\n", m.failed)
			}
		}
		ns[i] = (median(p[i].lp, c) - median(p[i].nat, c)) / float64(records) * 1e9
	}
	return ns[0], ns[1]
}

func median(ms []measure, f func(measure) float64) float64 {
	var v []float64
	for _, m := range ms {
		if m.failed == "" {
			v = append(v, f(m))
		}
	}
	return medianOf(v)
}

func medianOf(v []float64) float64 { return quantile(v, 0.5) }

// quantile returns the value of v at fraction f of its sorted order
// (0.5: the median, the upper one of an even count); 0 for none.
func quantile(v []float64, f float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[int(f*float64(len(v)-1)+0.5)]
}

func timeCmd(argv ...string) time.Duration {
	start := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Run(); err != nil {
		return 0
	}
	return time.Since(start)
}

// measureCmd runs argv and measures it. tool names (by /proc comm) the
// tool's own process, whose peak RSS is reported on its own.
func measureCmd(argv []string, stdin string, tool []string) measure {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return measure{failed: err.Error()}
	}
	var mu sync.Mutex
	peak, toolPeak := int64(0), int64(0)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		ts := newTreeSampler(cmd.Process.Pid, tool)
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p, tp := ts.sample()
				mu.Lock()
				peak, toolPeak = max(peak, p), max(toolPeak, tp)
				mu.Unlock()
			}
		}
	}()
	err := cmd.Wait()
	wall := time.Since(start)
	close(done)
	m := measure{wall: wall}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		m.peakRSS = ru.Maxrss
	}
	mu.Lock()
	m.peakRSS = max(m.peakRSS, peak)
	m.toolRSS = toolPeak
	mu.Unlock()
	if err != nil {
		m.failed = fmt.Sprintf("%v: %s", err, lastLine(errb.String()))
	}
	return m
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// treeSampler follows the peak RSS of a process tree. It reads the status
// of a process outside the tree once (to learn its parent), and of one in
// it each time: reading all of /proc every few milliseconds took a tenth
// of a core from the runs it measured.
type treeSampler struct {
	root   int
	tool   []string
	seen   map[int]bool // pids whose parent is known
	parent map[int]int
	comm   map[int]string
}

func newTreeSampler(root int, tool []string) *treeSampler {
	return &treeSampler{root: root, tool: tool, seen: map[int]bool{}, parent: map[int]int{}, comm: map[int]string{}}
}

// inTree reports whether pid descends from the root (or is it).
func (s *treeSampler) inTree(pid int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		if pid == s.root {
			return true
		}
		pid = s.parent[pid]
	}
	return false
}

// sample returns the largest VmHWM (KiB, the peak resident size so far)
// among the tree's processes, and among those whose comm starts with one
// of tool.
func (s *treeSampler) sample() (peak, toolPeak int64) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || (s.seen[p] && !s.inTree(p)) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var hwm int64
		for _, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "Name:"):
				s.comm[p] = strings.TrimSpace(line[5:]) // exec changes it
			case strings.HasPrefix(line, "PPid:"):
				s.parent[p], _ = strconv.Atoi(strings.TrimSpace(line[5:]))
			case strings.HasPrefix(line, "VmHWM:"):
				if f := strings.Fields(line); len(f) >= 2 {
					hwm, _ = strconv.ParseInt(f[1], 10, 64)
				}
			}
		}
		s.seen[p] = true
		if !s.inTree(p) {
			continue
		}
		peak = max(peak, hwm)
		for _, t := range s.tool {
			if strings.HasPrefix(s.comm[p], t) {
				toolPeak = max(toolPeak, hwm)
			}
		}
	}
	return peak, toolPeak
}

// sqliteScript inserts n rows in one transaction, indexes them, reads them.
func sqliteScript(n int) string {
	return fmt.Sprintf(`create table t(id integer primary key, name text, v real);
begin;
with recursive c(x) as (select 1 union all select x+1 from c where x < %d)
insert into t select x, 'name-' || x || '-' || hex(randomblob(8)), x * 0.5 from c;
commit;
create index t_name on t(name);
select count(*), sum(v) from t where name like 'name-1%%';
`, n)
}

const pythonScript = `
import json, collections
words = ("alpha beta gamma delta epsilon zeta eta theta " * 20000).split()
c = collections.Counter(words)
d = {i: [w] * 3 for i, w in enumerate(words[:50000])}
s = json.dumps(d)
print(len(s), c.most_common(2))
`
