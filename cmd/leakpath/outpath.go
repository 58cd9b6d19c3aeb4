package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/event"
	"github.com/leakpath/leakpath/internal/tracefile"
)

// The files `leakpath run` writes (-o, --json, --report) may be named
// after the process and the MPI rank, so that each rank of a parallel job
// (`mpiexec -n 4 leakpath run -o out.%r.lpt -- ./app`) writes its own:
//
//	%p  the program's pid (the pid its report shows)
//	%r  its MPI rank, from the environment (rankVars); without one, the
//	    pid, and a note says so
//	%%  a percent sign
//
// The pid is not known before the program starts, so a file named by it
// is created when it is: the trace when the program's first events
// arrive, the reports when it has ended. Its directory is checked before
// the run, so a bad path still fails fast.

// rankVars are the environment variables that give a process its MPI rank,
// in the order they are looked up: Open MPI, MPICH and Intel MPI (PMI),
// PMIx launchers, MVAPICH2, Slurm's srun.
var rankVars = []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}

// mpiRank returns the rank the first of rankVars set to a number gives;
// nil if none is.
func mpiRank(getenv func(string) string) *int {
	for _, v := range rankVars {
		s := strings.TrimSpace(getenv(v))
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return &n
		}
	}
	return nil
}

// pathPattern is an output path that may hold %p, %r and %%.
type pathPattern struct {
	s          string
	pid, rank  bool // has %p, has %r
	hasPercent bool
}

// parsePattern checks an output path given with flag; "" is no file.
func parsePattern(flag, s string) (pathPattern, error) {
	p := pathPattern{s: s}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		p.hasPercent = true
		if i+1 == len(s) {
			return p, fmt.Errorf("%s %q: ends with a lone %% (write %%%% for a percent sign)", flag, s)
		}
		switch s[i+1] {
		case 'p':
			p.pid = true
		case 'r':
			p.rank = true
		case '%':
		default:
			return p, fmt.Errorf("%s %q: unknown %%%c (want %%p for the pid, %%r for the MPI rank, %%%% for a percent sign)", flag, s, s[i+1])
		}
		i++
	}
	return p, nil
}

// needsPID reports whether the name depends on the program's pid.
func (p pathPattern) needsPID(rank *int) bool { return p.pid || p.rank && rank == nil }

// expand names the file for the program's pid and MPI rank (nil: none, %r
// is the pid).
func (p pathPattern) expand(pid int, rank *int) string {
	if !p.hasPercent {
		return p.s
	}
	var b strings.Builder
	for i := 0; i < len(p.s); i++ {
		c := p.s[i]
		if c != '%' || i+1 == len(p.s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch p.s[i] {
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		case 'r':
			if rank != nil {
				b.WriteString(strconv.Itoa(*rank))
			} else {
				b.WriteString(strconv.Itoa(pid))
			}
		default:
			b.WriteByte(p.s[i])
		}
	}
	return b.String()
}

// checkOutputNames checks the % directives of o's output paths.
func checkOutputNames(o *runOptions) error {
	for _, f := range []struct{ flag, path string }{{"-o", o.trace}, {"--json", o.jsonOut}, {"--report", o.reportOut}} {
		if _, err := parsePattern(f.flag, f.path); err != nil {
			return err
		}
	}
	return nil
}

// outputs are the files of one `leakpath run`.
type outputs struct {
	rank                *int
	trace, json, report pathPattern
	tr                  *traceOut
	jsonFile, textFile  *os.File
	pid                 int // the pid the names were made with; 0: not yet known
}

// newOutputs checks o's output paths and creates the files whose names do
// not depend on the pid. It prints the note about a missing rank.
func newOutputs(o *runOptions, stderr io.Writer) (*outputs, error) {
	out := &outputs{}
	var err error
	if out.trace, err = parsePattern("-o", o.trace); err != nil {
		return nil, err
	}
	if out.json, err = parsePattern("--json", o.jsonOut); err != nil {
		return nil, err
	}
	if out.report, err = parsePattern("--report", o.reportOut); err != nil {
		return nil, err
	}
	out.rank = mpiRank(os.Getenv)
	if out.rank == nil && (out.trace.rank || out.json.rank || out.report.rank) {
		fmt.Fprintf(stderr, "leakpath: no MPI rank in the environment (%s): %%r is the program's pid\n", strings.Join(rankVars, ", "))
	}
	for _, f := range []struct {
		what string
		p    pathPattern
		file **os.File
	}{{"report file", out.report, &out.textFile}, {"JSON report file", out.json, &out.jsonFile}} {
		if f.p.s == "" {
			continue
		}
		if f.p.needsPID(out.rank) {
			if err := checkDir(f.p); err != nil {
				out.close()
				return nil, fmt.Errorf("%s: %w", f.what, err)
			}
			continue
		}
		if *f.file, err = os.Create(f.p.expand(0, out.rank)); err != nil {
			out.close()
			return nil, fmt.Errorf("%s: %w", f.what, err)
		}
	}
	if out.trace.s != "" && out.trace.needsPID(out.rank) {
		if err := checkDir(out.trace); err != nil {
			out.close()
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	return out, nil
}

// checkDir checks that the directory of a file named by the pid is there
// to create it in.
func checkDir(p pathPattern) error {
	if err := writableDir(filepath.Dir(p.expand(1, nil))); err != nil {
		return fmt.Errorf("%s: %w", p.s, err)
	}
	return nil
}

// writableDir checks that files can be created in dir.
func writableDir(dir string) error {
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot create files in %s: %w", dir, err)
	}
	return nil
}

// startTrace creates the trace file now if its name is known, else
// returns a writer that creates it when the program's first events
// arrive; its header is written then, with the time shift shift gives
// (measured meanwhile). nil: no trace.
func (out *outputs) startTrace(meta tracefile.Meta, opts tracefile.Options, shift func() uint) (*traceOut, error) {
	if out.trace.s == "" {
		return nil, nil
	}
	meta.Rank = out.rank
	out.tr = &traceOut{out: out, meta: meta, opts: opts, shift: shift}
	if !out.trace.needsPID(out.rank) {
		if err := out.tr.create(0); err != nil {
			return nil, err
		}
	}
	return out.tr, nil
}

// files returns the report files (nil: not asked for), creating those
// named by the pid: the one the trace was named with, else pid.
func (out *outputs) files(pid int) (text, json *os.File, err error) {
	if out.pid == 0 {
		out.pid = pid
	}
	if out.report.s != "" && out.textFile == nil {
		if out.textFile, err = os.Create(out.report.expand(out.pid, out.rank)); err != nil {
			return nil, nil, fmt.Errorf("report file: %w", err)
		}
	}
	if out.json.s != "" && out.jsonFile == nil {
		if out.jsonFile, err = os.Create(out.json.expand(out.pid, out.rank)); err != nil {
			return nil, nil, fmt.Errorf("JSON report file: %w", err)
		}
	}
	return out.textFile, out.jsonFile, nil
}

func (out *outputs) close() {
	for _, f := range []*os.File{out.textFile, out.jsonFile} {
		if f != nil {
			f.Close()
		}
	}
}

// traceOut is the trace of a run (collect.TraceWriter). One named by the
// pid is created at the first events, which start with the first image's
// ProcessStart: the program's own unless it records nothing (a static
// binary) and a descendant does.
type traceOut struct {
	out   *outputs
	meta  tracefile.Meta
	opts  tracefile.Options
	shift func() uint
	path  string
	f     *os.File // created, its header not yet written
	w     *tracefile.Writer
}

// create creates the file, named with pid.
func (t *traceOut) create(pid int) error {
	t.path = t.out.trace.expand(pid, t.out.rank)
	f, err := os.Create(t.path)
	if err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	t.f = f
	if pid != 0 {
		t.out.pid = pid
	}
	return nil
}

// open creates the file unless it is, and starts the trace in it.
func (t *traceOut) open(pid int) error {
	if t.f == nil {
		if err := t.create(pid); err != nil {
			return err
		}
	}
	t.opts.TimeShift = t.shift()
	w, err := tracefile.NewFileWriter(t.f, t.meta, t.opts)
	if err != nil {
		t.discard()
		return err
	}
	t.w, t.f = w, nil
	return nil
}

// discard closes and removes a file created whose trace never started.
func (t *traceOut) discard() {
	if t.f != nil {
		t.f.Close()
		os.Remove(t.path)
		t.f = nil
	}
}

// Write starts the trace if it is not yet, then writes evs.
func (t *traceOut) Write(evs []event.Event) error {
	if t.w == nil {
		pid := os.Getpid() // there is always a ProcessStart first; in case not
		for i := range evs {
			if pi := evs[i].ProcessInfo(); evs[i].Kind == event.ProcessStart && pi != nil {
				pid = int(pi.PID)
				break
			}
		}
		if err := t.open(pid); err != nil {
			return err
		}
	}
	return t.w.Write(evs)
}

// Flush writes what was written so far, once the file exists.
func (t *traceOut) Flush() error {
	if t.w == nil {
		return nil
	}
	return t.w.Flush()
}

// finish closes the trace. ok: the run went well enough to report, and a
// trace not started yet is started now (with pid), holding no events;
// otherwise a trace created is removed.
func (t *traceOut) finish(ok bool, pid int) error {
	if t.w == nil && ok {
		if err := t.open(pid); err != nil {
			return err
		}
	}
	if t.w == nil {
		t.discard()
		return nil
	}
	err := t.w.Close()
	if err != nil {
		err = fmt.Errorf("trace %s: %w", t.path, err)
	}
	if !ok {
		os.Remove(t.path)
	}
	return err
}
