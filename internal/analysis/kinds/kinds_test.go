package kinds_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// TestLeakKinds checks the kind of each classic case in the kinds fixture.
func TestLeakKinds(t *testing.T) {
	bin := e2e.Fixture(t, "kinds.c")
	lib := e2e.Fixture(t, "kindslib.c", "-shared", "-fPIC")
	for _, mode := range []string{"", "thread", "dtls", "vfork"} {
		t.Run("mode="+mode, func(t *testing.T) {
			argv := []string{bin}
			if mode != "" {
				argv = append(argv, mode)
			}
			if mode == "dtls" {
				argv = append(argv, lib)
			}
			plain := e2e.Native(t, nil, argv...)
			r, k := e2e.RunKinds(t, nil, argv...)
			e2e.SameBehaviour(t, r, plain)
			want := map[uint64]string{
				101: "reachable", 102: "reachable", 104: "reachable", 105: "reachable", 111: "reachable",
				112: "reachable", // only in a register of the thread held at exit
				108: "possible", 32: "definite", 40: "indirect", 48: "indirect",
				109: "definite", 110: "definite",
			}
			switch mode {
			case "thread":
				want[103] = "reachable" // only in a register of a live thread
			case "dtls":
				want[106] = "reachable" // only in dynamic TLS (a dlopen'ed library's __thread)
			}
			got := map[uint64]string{}
			for _, l := range k.Leaks {
				// The fixture's own blocks (not the C runtime's, which
				// may be of the same sizes).
				if l.Blocks == 1 && len(l.Stack) > 0 && strings.HasSuffix(l.Stack[0].File, "kinds.c") {
					got[l.Bytes] = l.Kind
				}
				if l.Kind == "definite" && l.Bytes == 32 && (l.IndirectBytes != 88 || l.IndirectBlocks != 2) {
					t.Errorf("the tree's root holds %d bytes in %d blocks indirectly, want 88 in 2", l.IndirectBytes, l.IndirectBlocks)
				}
				if l.Kind == "indirect" && (l.Bytes == 40 || l.Bytes == 48) && !e2e.StackHas(l.Owner, "leak_tree") {
					t.Errorf("indirect %d B: owner stack %v, want leak_tree's", l.Bytes, l.Owner)
				}
			}
			for size, kind := range want {
				if got[size] != kind {
					t.Errorf("%d B block: kind %q, want %q", size, got[size], kind)
				}
			}
			// The cycle: the lower address is the clique's leader.
			if a, b := got[56], got[64]; !(a == "definite" && b == "indirect" || a == "indirect" && b == "definite") {
				t.Errorf("cycle: 56 B %q, 64 B %q; want one definite, one indirect", a, b)
			}
			if !strings.Contains(r.Text, "by kind: definite 307 B in 4 blocks") {
				t.Errorf("text report lacks the sums by kind:\n%s", r.Text)
			}
			e2e.CompareLeakSummary(t, k, argv...)
		})
	}
}

// TestCheckKindsAndSuppressions checks --check against kinds and LSan
// suppressions: leaks all suppressed pass, --check-kinds reachable fails.
func TestCheckKindsAndSuppressions(t *testing.T) {
	bin := e2e.Fixture(t, "kinds.c")
	if r := e2e.Leakpath(t, []string{"--check"}, nil, bin); r.Code != e2e.ExitLeaks {
		t.Errorf("--check with definite leaks exited %d, want %d", r.Code, e2e.ExitLeaks)
	}
	supp := filepath.Join(t.TempDir(), "supp.txt")
	os.WriteFile(supp, []byte("# every leak of the fixture\nleak:leak_plain\nleak:leak_tree\nleak:leak_cycle\nleak:^main$\n"), 0o644)
	r, k := e2e.RunKinds(t, []string{"--check", "--suppressions", supp}, bin)
	if r.Code != 0 {
		t.Errorf("--check with every leak suppressed exited %d, want 0\n%s", r.Code, r.Text)
	}
	if k.Totals.Suppressed == nil || k.Totals.Suppressed.Blocks != 8 {
		t.Errorf("suppressed: %+v, want the 8 blocks of definite, indirect and possible leaks", k.Totals.Suppressed)
	}
	if !strings.Contains(r.Text, "suppressions used:") || !strings.Contains(r.Text, "leak:leak_tree") {
		t.Errorf("the text report does not list the suppressions used:\n%s", r.Text)
	}
	if r := e2e.Leakpath(t, []string{"--check", "--suppressions", supp, "--check-kinds", "reachable"}, nil, bin); r.Code != e2e.ExitLeaks {
		t.Errorf("--check-kinds reachable exited %d, want %d", r.Code, e2e.ExitLeaks)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(bad, []byte("leak:ok\nrace:foo\n"), 0o644)
	if r := e2e.RunCapture(t, e2e.TestEnv(), nil, e2e.Bin, "run", "--suppressions", bad, "--", bin); r.Code == 0 || !strings.Contains(string(r.Stderr), "bad.txt:2") {
		t.Errorf("a bad suppressions file: exit %d, stderr %q; want an error naming bad.txt:2", r.Code, r.Stderr)
	}
}

// TestReallocGrowLikeMemcheck: a block realloc grows (in place, or moved
// into a free chunk) takes over bytes of a block the program freed, with
// its pointers; the program never wrote them, memcheck ignores them, and
// so must the scan: the blocks only they point to are definite.
func TestReallocGrowLikeMemcheck(t *testing.T) {
	bin := e2e.Fixture(t, "reallocgrow.c")
	argv := []string{bin, "100"}
	plain := e2e.Native(t, nil, argv...)
	r, k := e2e.RunKinds(t, nil, argv...)
	e2e.SameBehaviour(t, r, plain)
	if got := k.Totals.ByKind["definite"]; got.Blocks != 200 {
		t.Errorf("definite: %d blocks, want 200 (100 guards and the 100 blocks only stale bytes point to)\n%s", got.Blocks, r.Text)
	}
	if testing.Short() {
		t.Log("-short: memcheck is not compared (make test compares it)")
		return
	}
	e2e.CompareLeakSummary(t, k, argv...)
}

// TestRecycledChunksLikeMemcheck: blocks that glibc carves from chunks it
// merged keep the free-list links of the chunks merged into them, deep
// inside, which the program never wrote. memcheck ignores such undefined
// words; leakpath must too, or the blocks they point to are called
// possible or reachable (filler.c leaks 1,000 blocks it never writes).
func TestRecycledChunksLikeMemcheck(t *testing.T) {
	bin := e2e.Fixture(t, "filler.c")
	argv := []string{bin, "20000", "0"}
	plain := e2e.Native(t, nil, argv...)
	r, k := e2e.RunKinds(t, nil, argv...)
	e2e.SameBehaviour(t, r, plain)
	if got := k.Totals.ByKind["definite"]; got.Blocks != 1000 {
		t.Errorf("definite: %d blocks, want the 1,000 filler.c leaks\n%s", got.Blocks, r.Text)
	}
	for _, kind := range []string{"indirect", "possible"} {
		if got := k.Totals.ByKind[kind]; got.Blocks != 0 {
			t.Errorf("%s: %d blocks, want 0\n%s", kind, got.Blocks, r.Text)
		}
	}
	if testing.Short() {
		t.Log("-short: memcheck is not compared (make test compares it)")
		return
	}
	e2e.CompareLeakSummary(t, k, argv...)
}
