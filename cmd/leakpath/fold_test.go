package main

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestFoldingKeepsEveryCount: folding short-lived pairs in the agent
// changes what travels to the collector, never what the report counts.
// Each fixture is recorded with and without --fold and everything but the
// peak (folded blocks are never live in the collector) must be equal.
func TestFoldingKeepsEveryCount(t *testing.T) {
	loop := filepath.Join(t.TempDir(), "allocloop")
	compileTo(t, "cc", loop, "-O2", "-g", filepath.Join(root, "bench", "workloads", "allocloop.c"), "-pthread")
	for _, argv := range [][]string{
		{fixture(t, "allfuncs.c")},
		{fixture(t, "cxx.cc")},
		{fixture(t, "threads.c")},
		{fixture(t, "handoff.c"), "20000"},
		{fixture(t, "lifecycle.c")},
		{fixture(t, "fork.c")},
		{loop, "300000"},
		{loop, "300000", "2"},
	} {
		t.Run(filepath.Base(argv[0])+map[bool]string{true: "-threads", false: ""}[len(argv) > 2], func(t *testing.T) {
			on := leakpath(t, []string{"--fold=true"}, nil, argv...)
			off := leakpath(t, []string{"--fold=false"}, nil, argv...)
			a, b := on.report.jsonImage, off.report.jsonImage
			a.Totals.PeakBytes, b.Totals.PeakBytes = 0, 0
			if !reflect.DeepEqual(a.Totals, b.Totals) {
				t.Errorf("totals with folding:\n%+v\nwithout:\n%+v", a.Totals, b.Totals)
			}
			if len(a.Leaks) != len(b.Leaks) {
				t.Fatalf("%d leak groups with folding, %d without", len(a.Leaks), len(b.Leaks))
			}
			for i := range a.Leaks {
				if a.Leaks[i].Bytes != b.Leaks[i].Bytes || a.Leaks[i].Blocks != b.Leaks[i].Blocks ||
					funcs(a.Leaks[i].Stack) != funcs(b.Leaks[i].Stack) {
					t.Errorf("leak %d differs: %+v vs %+v", i, a.Leaks[i], b.Leaks[i])
				}
			}
			if len(a.Errors) != len(b.Errors) {
				t.Errorf("%d improper uses with folding, %d without", len(a.Errors), len(b.Errors))
			}
			// The report says how many pairs its peak leaves out.
			folded := func(r result) uint64 {
				var v struct {
					Totals struct {
						Folded uint64 `json:"folded_pairs"`
					} `json:"totals"`
				}
				if err := json.Unmarshal(r.reportJSON, &v); err != nil {
					t.Fatal(err)
				}
				return v.Totals.Folded
			}
			fon, foff := folded(on), folded(off)
			if foff != 0 || strings.Contains(off.text, "folded") {
				t.Errorf("--fold=false: %d folded pairs reported", foff)
			}
			if argv[0] == loop && (fon < a.Totals.Allocations/2 || fon > a.Totals.Allocations) {
				t.Errorf("the loop folded %d of its %d allocations, want most", fon, a.Totals.Allocations)
			}
			if want := fon > 0; strings.Contains(on.text, "short-lived block") != want {
				t.Errorf("%d folded pairs; the summary mentions them: %v, want %v:\n%s", fon, !want, want, on.text)
			}
		})
	}
}
