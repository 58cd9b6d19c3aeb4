package usagetable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// schemaFile describes leakpath.usage/v1.
const schemaFile = "../../../docs/schemas/usage.v1.json"

// TestJSONSchema validates every golden leakpath.usage/v1 document
// against docs/schemas/usage.v1.json: a field written but not in the
// schema, or required by it but not written, fails it. TestGolden and
// the JSON tests validate what they write as well.
func TestJSONSchema(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no golden JSON files")
	}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		testfixture.CheckJSONSchema(t, schemaFile, f, doc)
	}
}
