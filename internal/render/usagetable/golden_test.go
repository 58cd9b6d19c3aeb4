package usagetable

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/leakpath/leakpath/internal/analysis/usage"
	"github.com/leakpath/leakpath/internal/testfixture"
)

// update rewrites the golden files from what the code writes now (go test
// ./internal/render/usagetable -update); review the change with git diff.
var update = flag.Bool("update", false, "rewrite testdata/golden from the current output")

// TestGolden compares the tables and the JSON of every kind of unit,
// attribution, intervals and per-call rows with testdata/golden.
func TestGolden(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		name     string
		opts     usage.Options
		typed    bool
		maxUnits int
	}{
		{name: "library-caller", opts: usage.Options{By: usage.ByLibrary}},
		{name: "library-entry", opts: usage.Options{By: usage.ByLibrary, Attribution: usage.Entry}},
		{name: "library-inclusive-intervals", opts: usage.Options{By: usage.ByLibrary, Attribution: usage.Inclusive, Interval: 3 * us}, maxUnits: 2},
		{name: "library-per-call-intervals", opts: usage.Options{By: usage.ByLibrary, PerCall: true, Interval: 2 * us}},
		{name: "function-entry", opts: usage.Options{By: usage.ByFunction, Attribution: usage.Entry}},
		{name: "function-per-call", opts: usage.Options{By: usage.ByFunction, PerCall: true}},
		{name: "thread-intervals", opts: usage.Options{By: usage.ByThread, Interval: 4 * us}},
		{name: "site", opts: usage.Options{By: usage.BySite}},
		{name: "scope", opts: usage.Options{By: usage.ByScope}, typed: true},
		{name: "type", opts: usage.Options{By: usage.ByType}, typed: true},
		{name: "module", opts: usage.Options{By: usage.ByTypeModule}, typed: true},
		{name: "file", opts: usage.Options{By: usage.ByTypeFile}, typed: true},
		{name: "namespace", opts: usage.Options{By: usage.ByNamespace}, typed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			evs := program()
			if c.typed {
				evs = typedProgram()
			}
			r, _ := run(t, c.opts, evs)
			r.MaxUnits = c.maxUnits
			for format, ext := range map[string]string{"text": ".txt", "json": ".json"} {
				var b bytes.Buffer
				if err := r.Generate(&b, format); err != nil {
					t.Fatal(err)
				}
				testfixture.Golden(t, filepath.Join("testdata", "golden", c.name+ext), b.Bytes(), *update)
				if format == "json" {
					testfixture.CheckJSONSchema(t, schemaFile, c.name+ext, b.Bytes())
				}
			}
		})
	}
}
