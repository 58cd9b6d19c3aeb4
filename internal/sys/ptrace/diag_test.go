package ptrace

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// diagnose describes, for a failure message, what the Tracer believes
// about the threads of its process and what /proc says about them.
func diagnose(tr *Tracer) string {
	var b strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		var s strings.Builder
		err := tr.do("diagnose", func() error {
			fmt.Fprintf(&s, "tracer (thread %d): gone=%v running=%v memTid=%d threads:", tr.tracerTid, tr.gone.Load(), tr.running, tr.memTid.Load())
			for _, tid := range tr.tids() {
				fmt.Fprintf(&s, " %d:%s", tid, tr.threads[tid].describe())
			}
			return nil
		})
		if err != nil {
			fmt.Fprintf(&s, "tracer: %v", err)
		}
		b.WriteString(s.String())
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		b.WriteString("tracer: busy for 5 s")
	}
	return b.String() + "\n" + procState(tr.pid)
}

func (th *thread) describe() string {
	s := [...]string{"running", "stopped", "listening", "exiting", "untraced"}[th.state]
	if th.state == stopped {
		s += fmt.Sprintf("/kind%d/sig%d", th.kind, th.sig)
	}
	return s
}

// procState describes process pid and its threads from /proc: state and
// tracer of each.
func procState(pid int) string {
	var b strings.Builder
	st, err := ProcStatus(pid, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return fmt.Sprintf("/proc/%d: gone", pid)
		}
		return err.Error()
	}
	fmt.Fprintf(&b, "/proc/%d: State %s, Threads %s, TracerPid %s; tasks:", pid, st["State"], st["Threads"], st["TracerPid"])
	tids, err := listTasks(pid)
	if err != nil {
		fmt.Fprintf(&b, " %v", err)
	}
	for _, tid := range tids {
		st, err := ProcStatus(pid, tid)
		if err != nil {
			fmt.Fprintf(&b, " %d:gone", tid)
			continue
		}
		fmt.Fprintf(&b, " %d:%s/tracer=%s", tid, strings.Fields(st["State"] + " ?")[0], st["TracerPid"])
	}
	return b.String()
}
