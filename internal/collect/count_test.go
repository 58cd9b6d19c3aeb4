package collect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/heap"
	"github.com/leakpath/leakpath/internal/region"
)

// TestCountsManual prints leakpath's counts for LPCMD (manual comparison).
func TestCountsManual(t *testing.T) {
	cmd := os.Getenv("LPCMD")
	if cmd == "" {
		t.Skip("LPCMD not set")
	}
	root, _ := filepath.Abs("../..")
	agent := filepath.Join(root, "bin", "libleakpath.so")
	ropts := region.Options{}
	if os.Getenv("LPRING") != "" {
		ropts.RingSize = 256 << 20
		ropts.Slots = 4
	}
	res, err := Run(context.Background(), Options{Argv: strings.Fields(cmd), Agent: agent, FollowFork: true, Stdout: os.Stderr, Region: ropts})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "elapsed %v events %d child user %v sys %v\n", res.Elapsed, res.Events, res.ChildUser, res.ChildSys)
	for _, p := range res.Session.Procs {
		fmt.Fprintf(os.Stderr, "pid %d %v: allocs %d frees %d bytes %d live %d/%d errors %d anomalies %d\n", p.Info.PID, p.Info.Argv, p.Totals.Allocations, p.Totals.Frees, p.Totals.AllocatedBytes, p.Totals.LiveBlocks, p.Totals.LiveBytes, len(p.Errors), p.Anomalies)
	}
}

// TestSizesManual prints every allocation size histogram entry (manual).
func TestSizesManual(t *testing.T) {
	cmd := os.Getenv("LPCMD")
	if cmd == "" {
		t.Skip("LPCMD not set")
	}
	root, _ := filepath.Abs("../..")
	res, err := Run(context.Background(), Options{Argv: strings.Fields(cmd), Agent: filepath.Join(root, "bin", "libleakpath.so"), FollowFork: true, Stdout: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Session.Procs[0]
	for id := 1; id <= p.Stacks.Len(); id++ {
		s := p.Site(heap.StackID(id))
		if s == nil || s.Allocs == 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "site %d allocs %d bytes %d frees %d live %d fn %v frames %x\n", id, s.Allocs, s.AllocBytes, s.Frees, s.LiveBlocks, s.Fn, p.Stacks.Frames(heap.StackID(id))[:min(3, len(p.Stacks.Frames(heap.StackID(id))))])
	}
}

// TestLiveManual prints the sizes of live blocks at exit (manual).
func TestLiveManual(t *testing.T) {
	cmd := os.Getenv("LPCMD")
	if cmd == "" {
		t.Skip("LPCMD not set")
	}
	root, _ := filepath.Abs("../..")
	res, err := Run(context.Background(), Options{Argv: strings.Fields(cmd), Agent: filepath.Join(root, "bin", "libleakpath.so"), FollowFork: true, Stdout: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	res.Session.Procs[0].Live(func(a uint64, b heap.Block) { fmt.Fprintf(os.Stderr, "live %d\n", b.Size) })
}
