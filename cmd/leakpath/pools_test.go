package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// poolKinds maps each object of testdata/fixtures/pools.c, by its size, to
// the kind its comment gives it; the pools' memory (4096 B from calloc,
// 1024 B of pool A holding pool B) must not be listed at all.
var poolKinds = map[uint64]string{
	100: "reachable", 32: "definite", 48: "definite", 40: "indirect",
	56: "reachable", 64: "definite",
}

// poolLeaks returns the kinds by size of the pool objects listed (their
// stacks start in the fixture's arena_alloc), and whether a pool's
// memory from calloc (4096 B) is listed.
func poolLeaks(t *testing.T, k kindsImage) (got map[uint64]string, memory bool) {
	t.Helper()
	got = map[uint64]string{}
	for _, l := range k.Leaks {
		if len(l.Stack) == 0 {
			continue
		}
		if l.Stack[0].Function == "arena_alloc" {
			if l.Blocks != 1 {
				t.Errorf("%d blocks of %d B at one site, want 1", l.Blocks, l.Bytes)
			}
			got[l.Bytes] = l.Kind
		}
		if l.Bytes == 4096 && stackHas(l.Stack, "arena_new") {
			memory = true
		}
	}
	return got, memory
}

// TestPools: objects of a program's pools (LEAKPATH_POOL_*), nested, are
// blocks of their own with their stacks and kinds; the blocks that hold
// them are not listed; a pool destroyed with live objects reports each.
// The kinds of the objects memcheck can tell apart equal its kinds of the
// same source built with valgrind's mempool requests.
func TestPools(t *testing.T) {
	bin := fixture(t, "pools.c", includeFlag())
	plain := native(t, nil, bin)
	r, k := runKinds(t, []string{"--show-reachable"}, bin)
	sameBehaviour(t, r, plain)
	got, memory := poolLeaks(t, k)
	for size, kind := range poolKinds {
		if got[size] != kind {
			t.Errorf("%d B object: kind %q, want %q", size, got[size], kind)
		}
	}
	if kind, listed := got[1024]; listed || memory {
		t.Errorf("a pool's memory is listed (pool A's from calloc: %v; pool B's, in pool A: %q):\n%s", memory, kind, r.text)
	}
	for _, l := range k.Leaks {
		if l.Kind == "definite" && l.Bytes == 48 && (l.IndirectBytes != 40 || l.IndirectBlocks != 1) {
			t.Errorf("the 48 B object holds %d B in %d blocks indirectly, want 40 in 1", l.IndirectBytes, l.IndirectBlocks)
		}
	}
	img := r.image(t, "pools")
	destroyed := 0
	for _, e := range img.Errors {
		if e.Kind == "pool_destroyed_live" {
			destroyed++
			if !stackHas(e.Stack, "arena_destroy") || !stackHas(e.AllocStack, "destroy_live") {
				t.Errorf("pool_destroyed_live: stack %v, allocated at %v", e.Stack, e.AllocStack)
			}
		}
	}
	if destroyed != 2 {
		t.Errorf("%d objects reported live at their pool's end, want 2:\n%s", destroyed, r.text)
	}
	if img.Totals.LeakedBytes == 0 {
		t.Errorf("no leaked bytes in the totals:\n%s", r.text)
	}

	vg, err := exec.LookPath("valgrind")
	if err != nil {
		t.Log("valgrind is not installed: kinds not compared with memcheck")
		return
	}
	vbin := fixture(t, "pools.c", "-DVALGRIND")
	logf := filepath.Join(t.TempDir(), "vg.log")
	cmd := exec.Command(vg, "--leak-check=full", "--show-leak-kinds=all", "--log-file="+logf, vbin)
	cmd.Env = testEnv()
	cmd.Run()
	log, err := os.ReadFile(logf)
	if err != nil {
		t.Fatalf("valgrind log: %v", err)
	}
	names := map[string]string{"definitely lost": "definite", "indirectly lost": "indirect", "still reachable": "reachable", "possibly lost": "possible"}
	vgKinds := map[uint64]string{}
	rec := regexp.MustCompile(`([\d,]+) (?:\(([\d,]+) direct, [\d,]+ indirect\) )?bytes in 1 blocks are (definitely lost|indirectly lost|possibly lost|still reachable) in loss record[^\n]*\n((?:==\d+==\s+(?:at|by) [^\n]*\n)*)`)
	for _, m := range rec.FindAllSubmatch(log, -1) {
		if !bytes.Contains(m[4], []byte("arena_alloc")) {
			continue
		}
		size := atoi(string(m[1]))
		if len(m[2]) > 0 {
			size = atoi(string(m[2]))
		}
		vgKinds[size] = names[string(m[3])]
	}
	if len(vgKinds) == 0 {
		t.Fatalf("no loss records of pool objects in valgrind's log:\n%s", log)
	}
	// Pool A's objects and the 64 B of pool B: memcheck knows them as
	// leakpath does. It cannot tell the 56 B object of pool B from pool
	// A's 1024 B object that holds it, both at one address (a meta pool's
	// pieces are to hold MALLOCLIKE blocks): it lists the 1024 B as
	// reachable and the 56 B as lost.
	for _, size := range []uint64{100, 32, 48, 40, 64} {
		t.Logf("%d B: leakpath %s, memcheck %s", size, got[size], vgKinds[size])
		if got[size] != vgKinds[size] {
			t.Errorf("%d B object: leakpath %q, memcheck %q", size, got[size], vgKinds[size])
		}
	}
}
