package collect

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/leakpath/leakpath/internal/report"
)

func TestSmokeDemo(t *testing.T) {
	root, _ := filepath.Abs("../..")
	agent := filepath.Join(root, "bin", "libleakpath.so")
	if _, err := os.Stat(agent); err != nil {
		t.Skip("agent not built: run make")
	}
	bin := filepath.Join(t.TempDir(), "demo")
	if out, err := exec.Command("cc", "-g", "-O0", "-o", bin, filepath.Join(root, "testdata/demo/demo.c")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	res, err := Run(context.Background(), Options{Argv: []string{bin}, Agent: agent, FollowFork: true})
	if err != nil {
		t.Fatal(err)
	}
	rep := report.New(res.Session, res.Main, report.Options{Elapsed: res.Elapsed, TicksPerSec: res.TicksPerSec, Warnings: res.Warnings})
	rep.Generate(os.Stderr, "text")
}
