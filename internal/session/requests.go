package session

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leakpath/leakpath/internal/sys/termsafe"
	"github.com/leakpath/leakpath/internal/target/control"
)

// RootCause asks the recording of pid (Run's, with root cause on
// request) to start root-cause tracing, and writes its answer to stdout.
func RootCause(ctx context.Context, pid int, stdout io.Writer) error {
	resp, _, err := ask(ctx, pid, "root-cause")
	if err != nil {
		return fmt.Errorf("root cause of pid %d: %w", pid, err)
	}
	io.WriteString(stdout, termsafe.Text(resp.Text))
	return nil
}

// Detach asks the Attach recording pid to end, writes its answer to
// stderr and waits until the attach has let go: its socket goes last.
func Detach(ctx context.Context, pid int, stderr io.Writer) error {
	resp, sock, err := ask(ctx, pid, "detach")
	if err != nil {
		return fmt.Errorf("detach from pid %d: %w", pid, err)
	}
	io.WriteString(stderr, termsafe.Text(resp.Text))
	for {
		if _, serr := os.Stat(sock); serr != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("detach from pid %d: the attach has not ended yet: %w", pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ask sends request op about pid to the leakpath that records it (run or
// attach) and returns the answer and the socket it went to.
func ask(ctx context.Context, pid int, op string) (*control.Response, string, error) {
	ep, err := control.Find(pid)
	if err != nil {
		return nil, "", err
	}
	resp, err := control.Ask(ctx, ep, control.Request{Op: op, PID: pid})
	return resp, ep.Socket(), err
}
