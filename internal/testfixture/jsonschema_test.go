package testfixture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONSchemaValidate: every keyword the validator knows rejects what
// it should, and a keyword it does not know fails the load.
func TestJSONSchemaValidate(t *testing.T) {
	const schema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$ref": "#/$defs/doc",
  "$defs": {
    "doc": {"type": "object", "additionalProperties": false, "required": ["kind", "n"],
      "properties": {
        "kind": {"type": "string", "enum": ["a", "b"]},
        "n": {"type": "integer"},
        "x": {"type": ["number", "null"]},
        "calls": {"type": "object", "additionalProperties": {"type": "integer"}},
        "list": {"type": "array", "items": {"$ref": "#/$defs/item"}},
        "either": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/item"}]}}},
    "item": {"type": "object", "additionalProperties": false, "required": ["s"], "properties": {"s": {"type": "string"}}}
  }
}`
	s := loadSchema(t, schema)
	for _, c := range []struct{ doc, want string }{
		{`{"kind": "a", "n": 1, "x": null, "calls": {"m": 2}, "list": [{"s": ""}], "either": {"s": "t"}}`, ""},
		{`{"kind": "a", "n": 1, "x": 1.5, "either": null}`, ""},
		{`{"kind": "c", "n": 1}`, `/kind: c is none of`},
		{`{"kind": "a"}`, `/: required field "n" is missing`},
		{`{"kind": "a", "n": 1, "new": 0}`, `/: field "new" is not in the schema`},
		{`{"kind": "a", "n": 1.5}`, `/n: number, want integer`},
		{`{"kind": "a", "n": 1, "x": "1"}`, `/x: string, want number or null`},
		{`{"kind": "a", "n": 1, "calls": {"m": "2"}}`, `/calls/m: string, want integer`},
		{`{"kind": "a", "n": 1, "list": [{"s": ""}, {}]}`, `/list/1: required field "s" is missing`},
		{`{"kind": "a", "n": 1, "either": {"s": 1}}`, `/either/s: integer, want string`},
		{`{"kind": "a", "n": 1, "either": 3}`, `/either: integer matches no alternative of anyOf`},
		{`[]`, `/: array, want object`},
	} {
		errs := strings.Join(s.Validate([]byte(c.doc)), "\n")
		switch {
		case c.want == "" && errs != "":
			t.Errorf("%s: want no violation, got:\n%s", c.doc, errs)
		case c.want != "" && !strings.Contains(errs, c.want):
			t.Errorf("%s: want %q, got:\n%s", c.doc, c.want, errs)
		}
	}
	for _, bad := range []string{
		`{"type": "object", "minProperties": 1}`,
		`{"$ref": "#/$defs/none", "$defs": {}}`,
		`{"enum": [1]}`,
	} {
		if _, err := LoadJSONSchema(writeSchema(t, bad)); err == nil {
			t.Errorf("%s: loaded without an error", bad)
		}
	}
}

func writeSchema(t *testing.T, schema string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(path, []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func loadSchema(t *testing.T, schema string) *JSONSchema {
	t.Helper()
	s, err := LoadJSONSchema(writeSchema(t, schema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
