package sequitur

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// words gives each distinct word a symbol, and back.
type words struct {
	syms  map[string]Symbol
	names []string
}

func (w *words) of(s string) []Symbol {
	if w.syms == nil {
		w.syms = map[string]Symbol{}
	}
	var out []Symbol
	for _, f := range strings.Fields(s) {
		x, ok := w.syms[f]
		if !ok {
			x = Symbol(len(w.names))
			w.syms[f] = x
			w.names = append(w.names, f)
		}
		out = append(out, x)
	}
	return out
}

func (w *words) name(s Symbol) string { return w.names[s] }

// TestPaper: the examples of Nevill-Manning & Witten's paper (fig. 1).
func TestPaper(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a b c d b c", "S1 → a N1 d N1\nN1 → b c\n"},
		{"a b c d b c a b c d b c", "S1 → N2 N2\nN1 → b c\nN2 → a N1 d N1\n"},
		{"a b c d b c a b c d b c a", "S1 → N2 N2 a\nN1 → b c\nN2 → a N1 d N1\n"},
		{"a a a", "S1 → a a a\n"},
		{"a a a a", "S1 → N1 N1\nN1 → a a\n"},
	} {
		var w words
		g := New()
		g.Add(w.of(c.in))
		if got := g.String(w.name); got != c.want {
			t.Errorf("%q:\n%s\nwant:\n%s", c.in, got, c.want)
		}
		checkGrammar(t, g, [][]Symbol{w.of(c.in)})
	}
}

// TestSeedFunctionPaths reproduces JP2009-217617's fig. 10 on its worked
// example (fig. 6), as testdata/rootcause/seed.c has it: funcB calls funcA,
// which allocates; funcB then calls parse, frees through sub1 on error
// condition 2, calls sub2, returns without freeing on error condition 1,
// else frees. The publication's figures are not in its text; these paths are
// the ones its text describes: the normal path alone (fig. 10(a)); the
// path of error condition 2 shares N1 with it (fig. 10(b)); the path of
// error condition 1 adds S3 and a second shared rule N2 (fig. 10(c)).
// Paths begin where malloc returned into funcA and end with F (freed) or
// E (the thread left funcB, the end point).
func TestSeedFunctionPaths(t *testing.T) {
	var w words
	g := New()
	normal := w.of("funcA-E parse-S parse-E sub2-S sub2-E F")
	err2 := w.of("funcA-E parse-S parse-E sub1-S F")
	err1 := w.of("funcA-E parse-S parse-E sub2-S sub2-E E")
	steps := []struct {
		path []Symbol
		want string
	}{
		{normal, "S1 → funcA-E parse-S parse-E sub2-S sub2-E F\n"},
		{err2, "S1 → N1 sub2-S sub2-E F\nS2 → N1 sub1-S F\nN1 → funcA-E parse-S parse-E\n"},
		{err1, "S1 → N2 F\nS2 → N1 sub1-S F\nS3 → N2 E\nN1 → funcA-E parse-S parse-E\nN2 → N1 sub2-S sub2-E\n"},
	}
	var added [][]Symbol
	for i, s := range steps {
		if idx, isNew := g.Add(s.path); idx != i || !isNew {
			t.Fatalf("path %d: Add = %d, %v", i+1, idx, isNew)
		}
		added = append(added, s.path)
		if got := g.String(w.name); got != s.want {
			t.Errorf("after S%d:\n%s\nwant:\n%s", i+1, got, s.want)
		}
		checkGrammar(t, g, added)
	}
	// The same path again is stored once (JP2009-217617, fig. 9, steps 906–908).
	before := g.String(w.name)
	if idx, isNew := g.Add(slices.Clone(normal)); idx != 0 || isNew || g.Count(0) != 2 {
		t.Errorf("normal path again: Add = %d, %v, count %d; want 0, false, 2", idx, isNew, g.Count(0))
	}
	if after := g.String(w.name); after != before {
		t.Errorf("a repeated path changed the grammar:\n%s", after)
	}
}

// TestSeedBranchPaths reproduces JP2009-217617's fig. 15: funcB's branch traces per
// invocation, error condition 1 first (S1, E), then error condition 2
// (S2, F), then the normal path (S3, F). Symbols are branch locations.
func TestSeedBranchPaths(t *testing.T) {
	var w words
	g := New()
	paths := [][]Symbol{w.of("location1 location2 E"), w.of("location1 F"), w.of("location1 location2 F")}
	for _, p := range paths {
		g.Add(p)
	}
	want := "S1 → N1 E\nS2 → location1 F\nS3 → N1 F\nN1 → location1 location2\n"
	if got := g.String(w.name); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	checkGrammar(t, g, paths)
}

// TestRandom checks the grammar's invariants on random paths over small
// alphabets, where repeats abound.
func TestRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 2000; round++ {
		g := New()
		alphabet := 1 + rng.IntN(5)
		var paths [][]Symbol
		for p := 0; p < 1+rng.IntN(6); p++ {
			path := make([]Symbol, rng.IntN(60))
			for i := range path {
				path[i] = Symbol(rng.IntN(alphabet))
			}
			if rng.IntN(4) == 0 && len(paths) > 0 {
				path = slices.Clone(paths[rng.IntN(len(paths))])
			}
			idx, isNew := g.Add(path)
			if isNew {
				paths = append(paths, path)
			} else if !slices.Equal(paths[idx], path) {
				t.Fatalf("round %d: Add returned path %d for a different path", round, idx)
			}
		}
		if !checkGrammar(t, g, paths) {
			t.Fatalf("round %d failed", round)
		}
	}
}

// checkGrammar checks that the grammar expands to the paths, that no
// digram occurs twice without overlapping, and that every shared rule is
// used at least twice.
func checkGrammar(t *testing.T, g *Grammar, paths [][]Symbol) bool {
	t.Helper()
	ok := true
	if g.Len() != len(paths) {
		t.Errorf("%d paths, want %d", g.Len(), len(paths))
		return false
	}
	for i, p := range paths {
		if got := g.Path(i); !slices.Equal(got, p) && !(len(got) == 0 && len(p) == 0) {
			t.Errorf("S%d expands to %v, want %v", i+1, got, p)
			ok = false
		}
	}
	uses := map[*rule]int{}
	type at struct {
		r *rule
		n int
	}
	where := map[digram]at{}
	for _, r := range g.rules() {
		i := 0
		for n := r.first(); n.guard == nil; n, i = n.next, i+1 {
			if n.rule != nil {
				uses[n.rule]++
			}
			if n.next.guard != nil {
				continue
			}
			k := keyOf(n)
			if prev, seen := where[k]; seen && !(prev.r == r && prev.n == i-1) {
				t.Errorf("digram %v occurs twice:\n%s", k, g.String(func(s Symbol) string { return fmt.Sprint(s) }))
				ok = false
			} else if !seen {
				where[k] = at{r, i}
			}
		}
	}
	for r, n := range uses {
		if r.path > 0 {
			t.Errorf("path rule S%d used as a symbol", r.path)
			ok = false
		}
		if n < 2 || n != r.uses {
			t.Errorf("rule N(id %d) used %d times (counted %d)", r.id, n, r.uses)
			ok = false
		}
	}
	return ok
}

// BenchmarkAdd: the cost per symbol of paths that share much.
func BenchmarkAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := make([]Symbol, 1000)
	for i := range base {
		base[i] = Symbol(rng.IntN(50))
	}
	b.ReportAllocs()
	for b.Loop() {
		g := New()
		for p := 0; p < 20; p++ {
			path := slices.Clone(base)
			path[rng.IntN(len(path))] = Symbol(50 + p)
			g.Add(path)
		}
	}
	b.SetBytes(20 * 1000)
}
