package session

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/tracefile"
)

// The files `leakpath run` writes (-o, --json, --report) may be named
// after the process and the MPI rank, so that each rank of a parallel job
// (`mpiexec -n 4 leakpath run -o out.%r.lpt -- ./app`) writes its own:
//
//	%p  the program's pid (the pid its report shows)
//	%r  its MPI rank, from the environment (RankVars); without one, the
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
var RankVars = []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}

// mpiRank returns the rank the first of rankVars set to a number gives;
// nil if none is.
func mpiRank(getenv func(string) string) *int {
	for _, v := range RankVars {
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

// CheckOutputNames checks the % directives of o's output paths.
func CheckOutputNames(o *Options) error {
	for _, f := range []struct{ flag, path string }{{"-o", o.Trace}, {"--json", o.JSON}, {"--report", o.Report}} {
		if _, err := parsePattern(f.flag, f.path); err != nil {
			return err
		}
	}
	return nil
}

// outputs are the files of one `leakpath run` or `leakpath attach`.
type outputs struct {
	rank                *int
	trace, json, report pathPattern
	tr                  *traceOut
	jsonFile, textFile  *os.File
	pid                 int // the pid the names were made with; 0: not yet known
	// emptying: the truncations of report files an earlier run left,
	// each sending its error when done; pending counts those not
	// received yet (see emptyLater).
	emptying chan error
	pending  int
}

// newOutputs checks o's output paths and creates the files whose names do
// not depend on the pid. It prints the note about a missing rank.
func newOutputs(o *Options, stderr io.Writer) (*outputs, error) {
	out := &outputs{}
	var err error
	if out.trace, err = parsePattern("-o", o.Trace); err != nil {
		return nil, err
	}
	if out.json, err = parsePattern("--json", o.JSON); err != nil {
		return nil, err
	}
	if out.report, err = parsePattern("--report", o.Report); err != nil {
		return nil, err
	}
	out.rank = mpiRank(os.Getenv)
	if out.rank == nil && (out.trace.rank || out.json.rank || out.report.rank) {
		fmt.Fprintf(stderr, "leakpath: no MPI rank in the environment (%s): %%r is the program's pid\n", strings.Join(RankVars, ", "))
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
		var reused bool
		if *f.file, reused, err = openOutput(f.p.expand(0, out.rank)); err != nil {
			out.close()
			return nil, fmt.Errorf("%s: %w", f.what, err)
		}
		if reused {
			out.emptyLater(*f.file, f.what)
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
// to create it in, and reached as CreateOutput will.
func checkDir(p pathPattern) error {
	dir, _ := splitOutput(p.expand(1, nil))
	if err := writableDir(dir); err != nil {
		return fmt.Errorf("%s: %w", p.s, err)
	}
	fd, _, err := openOutputDir(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", p.s, err)
	}
	unix.Close(fd)
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
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	return out.tr, nil
}

// emptyLater truncates f, a report file an earlier run left, while the
// program runs: dropping the pages of a large JSON report takes the
// kernel tens of milliseconds, a delay before the program started.
// files waits for it.
func (out *outputs) emptyLater(f *os.File, what string) {
	if out.emptying == nil {
		out.emptying = make(chan error, 2) // the text and the JSON report
	}
	out.pending++
	go func() {
		err := f.Truncate(0)
		if err != nil {
			err = fmt.Errorf("%s: %w", what, err)
		}
		out.emptying <- err
	}()
}

// emptied waits for the truncations emptyLater started; the first error.
func (out *outputs) emptied() error {
	var first error
	for ; out.pending > 0; out.pending-- {
		if err := <-out.emptying; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// files returns the report files (nil: not asked for), creating those
// named by the pid: the one the trace was named with, else pid.
func (out *outputs) files(pid int) (text, json *os.File, err error) {
	if err := out.emptied(); err != nil {
		return nil, nil, err
	}
	if out.pid == 0 {
		out.pid = pid
	}
	if out.report.s != "" && out.textFile == nil {
		if out.textFile, err = CreateOutput(out.report.expand(out.pid, out.rank)); err != nil {
			return nil, nil, fmt.Errorf("report file: %w", err)
		}
	}
	if out.json.s != "" && out.jsonFile == nil {
		if out.jsonFile, err = CreateOutput(out.json.expand(out.pid, out.rank)); err != nil {
			return nil, nil, fmt.Errorf("JSON report file: %w", err)
		}
	}
	return out.textFile, out.jsonFile, nil
}

func (out *outputs) close() {
	out.emptied()
	for _, f := range []*os.File{out.textFile, out.jsonFile} {
		if f != nil {
			f.Close()
		}
	}
}

// traceOut is the trace of a recording (collect.TraceWriter). One named by the
// pid is created at the first events, which start with the first image's
// ProcessStart: the program's own unless it records nothing (a static
// binary) and a descendant does.
//
// A trace that cannot be written on (a full disk) is cut where it failed,
// and the run goes on: the report made from memory covers the whole run,
// and says where the trace stops (cutWarning).
type traceOut struct {
	out   *outputs
	meta  tracefile.Meta
	opts  tracefile.Options
	shift func() uint
	path  string
	f     *os.File // created, its header not yet written
	// emptying, if not nil, gives the error of the truncation of f, a
	// trace an earlier run left there (see emptyLater).
	emptying chan error
	w        *tracefile.Writer
	// failed is the first write error; the trace then holds cutEvents
	// events in cutBytes bytes, up to the event time cutTime.
	failed    error
	cutEvents int64
	cutBytes  int64
	cutTime   uint64
}

// kept is the trace's path, "" when no file was kept.
func (t *traceOut) kept() string {
	if t.w == nil {
		return ""
	}
	return t.path
}

// fail notes the trace's first write error and what the file keeps.
func (t *traceOut) fail(err error) {
	if t.failed != nil {
		return
	}
	t.failed = err
	if t.w != nil {
		t.cutEvents, t.cutBytes, t.cutTime = t.w.Kept()
	}
}

// cutWarning says where the trace stopped after a write failed ("" when
// none did); seconds converts an event time into seconds of the run.
func (t *traceOut) cutWarning(seconds func(ticks uint64) float64) string {
	if t == nil || t.failed == nil {
		return ""
	}
	reason := t.failed.Error()
	var pe *fs.PathError
	if errors.As(t.failed, &pe) {
		reason = pe.Err.Error()
	}
	if t.w == nil {
		return fmt.Sprintf("the trace %s could not be written (%s): no trace was kept; this report covers the whole run", t.path, reason)
	}
	at := "before its first events"
	if t.cutEvents > 0 && t.cutTime != 0 {
		at = fmt.Sprintf("at %.2f s, after %d events", seconds(t.cutTime), t.cutEvents)
	}
	return fmt.Sprintf("writing the trace %s failed at %s (%s): the trace is cut %s; this report covers the whole run",
		t.path, sizeString(t.cutBytes), reason, at)
}

// sizeString is n bytes in KiB or MiB.
func sizeString(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// create creates the file, named with pid.
func (t *traceOut) create(pid int) error {
	t.path = t.out.trace.expand(pid, t.out.rank)
	f, reused, err := openOutput(t.path)
	if err != nil {
		return err
	}
	if reused {
		// Dropped while the program starts, as the reports are: the
		// pages of a 9 MB trace took 2 ms before it could. The header
		// waits for it.
		t.emptying = make(chan error, 1)
		go func() { t.emptying <- f.Truncate(0) }()
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
	if err := t.emptied(); err != nil {
		t.discard()
		return err
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

// emptied waits for the truncation of the file, if one was started.
func (t *traceOut) emptied() error {
	if t.emptying == nil {
		return nil
	}
	err := <-t.emptying
	t.emptying = nil
	return err
}

// discard closes and removes a file created whose trace never started.
func (t *traceOut) discard() {
	t.emptied()
	if t.f != nil {
		t.f.Close()
		os.Remove(t.path)
		t.f = nil
	}
}

// Write starts the trace if it is not yet, then writes evs. It fails
// never: a trace that cannot be written is cut (fail), the recording goes
// on.
func (t *traceOut) Write(evs []event.Event) error {
	if t.failed != nil {
		return nil
	}
	if t.w == nil {
		pid := os.Getpid() // there is always a ProcessStart first; in case not
		for i := range evs {
			if pi := evs[i].ProcessInfo(); evs[i].Kind == event.ProcessStart && pi != nil {
				pid = int(pi.PID)
				break
			}
		}
		if err := t.open(pid); err != nil {
			t.fail(err)
			return nil
		}
	}
	if err := t.w.Write(evs); err != nil {
		t.fail(err)
	}
	return nil
}

// Flush writes what was written so far, once the file exists.
func (t *traceOut) Flush() error {
	if t.w == nil || t.failed != nil {
		return nil
	}
	if err := t.w.Flush(); err != nil {
		t.fail(err)
	}
	return nil
}

// finish closes the trace. ok: the run went well enough to report, and a
// trace not started yet is started now (with pid), holding no events;
// otherwise a trace created is removed.
func (t *traceOut) finish(ok bool, pid int) error {
	if t.w == nil && ok && t.failed == nil {
		if err := t.open(pid); err != nil {
			t.fail(err)
		}
	}
	if t.w == nil {
		t.discard()
		return nil
	}
	err := t.w.Close()
	if !ok {
		os.Remove(t.path)
		return nil
	}
	if err != nil {
		t.fail(err) // the last chunk or the end marker: cut there
	}
	return nil
}

// CreateOutput creates the output file path (or truncates the one there)
// for leakpath to write, never through something another user planted
// there: leakpath often runs as root, and a name in /tmp (out.%p.lpt) is
// easy to guess.
//
//   - Its directory is reached without following a symbolic link that
//     another user could have put on the way (openOutputDir).
//   - A new file is created with O_EXCL and O_NOFOLLOW, readable and
//     writable by its owner only (0600).
//   - A symbolic link there is refused, unless its directory is private
//     (only its owner, root or us, may write there: /dev/stdout is fine).
//   - An existing file is reused (truncated) when it is a regular file of
//     ours with no other name, or anything at all in a private directory
//     (/dev/null); the file opened must be the one looked at.
func CreateOutput(path string) (*os.File, error) {
	f, reused, err := openOutput(path)
	if err != nil || !reused {
		return f, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openOutput is CreateOutput but for the truncation of a regular file
// already there (reused), left to the caller.
func openOutput(path string) (f *os.File, reused bool, err error) {
	dirName, base := splitOutput(path)
	if base == "" || base == "." || base == ".." {
		return nil, false, fmt.Errorf("%s names a directory, not a file", path)
	}
	dir, dirSt, err := openOutputDir(dirName)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	err = unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		f, err := openAt(dir, path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return nil, false, fmt.Errorf("%s: appeared while leakpath was creating it: not overwritten", path)
		}
		return f, false, err
	}
	if err != nil {
		return nil, false, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	private := privateStat(dirSt)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if !private {
			return nil, false, fmt.Errorf("%s is a symbolic link in a directory others may write to: leakpath does not write through it (remove it, or name its target)", path)
		}
		f, err := openAt(dir, path, unix.O_WRONLY|unix.O_TRUNC, 0o600)
		return f, false, err
	}
	regular := st.Mode&unix.S_IFMT == unix.S_IFREG
	if !private && (!regular || st.Uid != uint32(os.Geteuid()) || st.Nlink > 1) {
		return nil, false, fmt.Errorf("%s exists and is not a file of ours, in a directory others may write to: not overwritten (remove it)", path)
	}
	f, err = openAt(dir, path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, err
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &fst); err != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		f.Close()
		return nil, false, fmt.Errorf("%s changed while leakpath was opening it: not overwritten", path)
	}
	return f, regular, nil
}

// splitOutput splits path into its directory and last component as the
// kernel reads it: without filepath.Clean, whose lexical ".." would
// differ from the kernel's after a symbolic link.
func splitOutput(path string) (dir, base string) {
	i := strings.LastIndexByte(path, '/')
	switch {
	case i < 0:
		return ".", path
	case i == 0:
		return "/", path[1:]
	}
	return path[:i], path[i+1:]
}

// openAt opens path's last component in the directory dir.
func openAt(dir int, path string, flags int, mode uint32) (*os.File, error) {
	_, base := splitOutput(path)
	fd, err := unix.Openat(dir, base, flags|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// WriteOutput runs write on path (created) or, when path is "", on
// stdout; a file that cannot be written completely is an error.
func WriteOutput(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "" {
		return write(stdout)
	}
	f, err := CreateOutput(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
