package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rootCauseShape is a program of testdata/rootcause/shapes whose leak has
// a known culprit: the lines marked LEAK in its source. The shapes are
// the ones real programs have (issue 31), built with optimization.
type rootCauseShape struct {
	name  string // the source, in testdata/rootcause/shapes
	alloc string // a function on the leaking blocks' allocation stack
	// noClaim: no branch decides the leak (or there is none); a
	// root cause found is a false claim.
	noClaim bool
	// notYet: why leakpath does not find this culprit yet; its
	// subtest then says so and skips instead of failing, unless a wrong
	// culprit was claimed.
	notYet string
}

var rootCauseShapes = []rootCauseShape{
	{name: "validate.c", alloc: "handle"},
	{name: "parser.c", alloc: "parse"},
	{name: "registry.c", alloc: "batch"},
	{name: "inflight.c", alloc: "entry_new"},
	{name: "inflight_mt.c", alloc: "entry_new"},
	{name: "throws.cc", alloc: "handle"},
	{name: "pump.c", alloc: "main"},
	{name: "cleanup.c", alloc: "load"},
	{name: "refcount.c", alloc: "obj_new"},
	{name: "randomdrop.c", alloc: "submit", noClaim: true},
	{name: "randomdrop_mt.c", alloc: "submit", noClaim: true},
}

// shapeDoc is the part of the JSON report the shapes are judged on.
type shapeDoc struct {
	Leaks []struct {
		Kind      string      `json:"kind"`
		Stack     []jsonFrame `json:"stack"`
		RootCause *struct {
			Status     string      `json:"status"`
			Traced     int         `json:"traced_runs"`
			Freed      int         `json:"freed_runs"`
			Leaked     int         `json:"leaked_runs"`
			Functions  []jsonFrame `json:"functions"`
			Branches   []jsonFrame `json:"branches"`
			Note       string      `json:"note"`
			FoundAfter float64     `json:"found_after_seconds"`
		} `json:"root_cause"`
	} `json:"leaks"`
}

// TestRootCauseShapes runs each shape at -O1 and -O2 with --root-cause
// and checks that a line marked LEAK is among the first three branches
// reported, or, for a program where nothing decides the leak, that no
// root cause is claimed. Each subtest logs what was found, after how
// long, and the run's time beside the program's own.
func TestRootCauseShapes(t *testing.T) {
	exhaustive(t, "20 programs for seconds each; TestRootCause covers each kind of culprit")
	for _, sh := range rootCauseShapes {
		for _, opt := range []string{"-O1", "-O2"} {
			t.Run(sh.name+opt, func(t *testing.T) {
				t.Parallel()
				checkShape(t, sh, opt, testEnv())
			})
		}
	}
}

// TestRootCauseShapesSoft runs the shapes at -O2 as on a machine whose
// debug registers do not fire (LEAKPATH_HW_BREAKPOINTS=off): their paths
// are recorded on software breakpoints, written into the code the
// programs' other threads run too. The same culprits, the same absence
// of claims, and each program's output, exit code and signals unchanged.
func TestRootCauseShapesSoft(t *testing.T) {
	exhaustive(t, "10 programs for seconds each; TestRootCauseSoft runs one on software breakpoints")
	env := append(testEnv(), "LEAKPATH_HW_BREAKPOINTS=off")
	for _, sh := range rootCauseShapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			checkShape(t, sh, "-O2", env)
		})
	}
}

// TestRootCauseSoft is TestRootCauseShapesSoft for two shapes, in every
// test run: a culprit found, and no claim for a program whose other
// thread runs the code the int3s are written into.
func TestRootCauseSoft(t *testing.T) {
	env := append(testEnv(), "LEAKPATH_HW_BREAKPOINTS=off")
	for _, sh := range rootCauseShapes {
		if sh.name != "validate.c" && sh.name != "randomdrop.c" {
			continue
		}
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			checkShape(t, sh, "-O2", env)
		})
	}
}

// checkShape builds shape sh at optimization opt, runs it natively and
// with --root-cause in environment env, and judges the report.
func checkShape(t *testing.T, sh rootCauseShape, opt string, env []string) {
	src := filepath.Join(root, "testdata", "rootcause", "shapes", sh.name)
	bin := fixtureCache.Build(t, src, "-g", opt, "-pthread")
	start := time.Now()
	want := native(t, nil, bin)
	nat := time.Since(start)
	start = time.Now()
	r := leakpathEnv(t, env, []string{"--root-cause", "--root-cause-slowdown", testSlowdown}, nil, bin)
	under := time.Since(start)
	sameBehaviour(t, r, want)
	var d shapeDoc
	if err := json.Unmarshal(r.reportJSON, &d); err != nil {
		t.Fatal(err)
	}
	verdict := judgeShape(t, sh, src, d)
	t.Logf("%s%s: %s; run %.1f s, natively %.1f s (%.2fx)", sh.name, opt, verdict.what,
		under.Seconds(), nat.Seconds(), under.Seconds()/nat.Seconds())
	switch {
	case verdict.ok:
	case verdict.falseClaim:
		t.Errorf("false claim: %s\n%s", verdict.what, r.text)
	case sh.notYet != "":
		t.Skip("not yet found: " + sh.notYet + " (" + verdict.what + ")")
	default:
		t.Errorf("culprit not found: %s\n%s", verdict.what, r.text)
	}
}

type shapeVerdict struct {
	ok, falseClaim bool
	what           string
}

// judgeShape looks for the shape's culprit among the root causes of the
// leaks allocated at its site.
func judgeShape(t *testing.T, sh rootCauseShape, src string, d shapeDoc) shapeVerdict {
	var marked []int
	if !sh.noClaim {
		marked = markedLines(t, src)
	}
	base := filepath.Base(src)
	var said []string
	for _, l := range d.Leaks {
		if !stackHasFunc(l.Stack, sh.alloc) || l.RootCause == nil {
			continue
		}
		rc := l.RootCause
		if rc.Status != "found" {
			said = append(said, fmt.Sprintf("%s leak: %s (%s), %d freed, %d leaked", l.Kind, rc.Status, rc.Note, rc.Freed, rc.Leaked))
			continue
		}
		var lines []string
		hit := false
		for i, b := range rc.Branches {
			lines = append(lines, filepath.Base(b.File)+":"+strconv.Itoa(b.Line))
			if i < 3 && filepath.Base(b.File) == base && slices.Contains(marked, b.Line) {
				hit = true
			}
		}
		var fns []string
		for _, f := range rc.Functions {
			fns = append(fns, f.Function)
		}
		what := fmt.Sprintf("%s leak: found in %v, branches %v, after %.1f s, %d freed, %d leaked",
			l.Kind, fns, lines, rc.FoundAfter, rc.Freed, rc.Leaked)
		switch {
		case sh.noClaim:
			return shapeVerdict{falseClaim: true, what: what}
		case hit:
			return shapeVerdict{ok: true, what: what}
		default:
			return shapeVerdict{falseClaim: true, what: what + fmt.Sprintf("; the culprit lines are %s:%v", base, marked)}
		}
	}
	if len(said) == 0 {
		said = append(said, "no root cause under any leak from "+sh.alloc)
	}
	return shapeVerdict{ok: sh.noClaim, what: strings.Join(said, "; ")}
}
