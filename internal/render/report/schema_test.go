package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// schemaFiles are docs/schemas' files by the schema names they describe.
var schemaFiles = map[string]string{
	Schema:             "../../../docs/schemas/report.v1.json",
	"leakpath.diff/v1": "../../../docs/schemas/diff.v1.json",
}

// checkSchema validates doc, a JSON document this package wrote, against
// the schema file its "schema" field names: a field written but not in
// the schema, or required by it but not written, fails the test.
func checkSchema(t testing.TB, name string, doc []byte) string {
	t.Helper()
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(doc, &head); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	path, ok := schemaFiles[head.Schema]
	if !ok {
		t.Fatalf("%s: no schema file for %q", name, head.Schema)
	}
	testfixture.CheckJSONSchema(t, path, name, doc)
	return head.Schema
}

// TestJSONSchema validates every golden JSON document against
// docs/schemas (checkGolden validates what the tests write as well).
func TestJSONSchema(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seen[checkSchema(t, f, doc)] = true
	}
	for name := range schemaFiles {
		if !seen[name] {
			t.Errorf("no golden file of %s checks its schema", name)
		}
	}
}
