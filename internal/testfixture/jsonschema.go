package testfixture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// JSONSchema is a JSON Schema (draft 2020-12) document restricted to the
// keywords of docs/schemas: type (a name or a list of names, for
// nullable), properties, required, additionalProperties, items, enum,
// anyOf and $ref to #/$defs. Any other keyword is an error when the schema
// loads, so a schema cannot say more than the tests check.
type JSONSchema struct {
	root map[string]any
}

// annotations are the keywords that do not constrain an instance.
var annotations = []string{"$schema", "$id", "$defs", "title", "description"}

var checked = []string{"type", "properties", "required", "additionalProperties", "items", "enum", "anyOf", "$ref"}

// LoadJSONSchema reads the schema at path and checks that it uses only the
// keywords Validate knows and that its $refs resolve.
func LoadJSONSchema(path string) (*JSONSchema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &JSONSchema{root: root}
	if err := s.lint(root, "#"); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func (s *JSONSchema) lint(node map[string]any, at string) error {
	for k, v := range node {
		switch {
		case k == "$defs" || k == "properties":
			// Both are objects of schemas by name.
			subs, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: %s is not an object", at, k)
			}
			for name, d := range subs {
				if err := s.lintSub(d, at+"/"+k+"/"+name); err != nil {
					return err
				}
			}
		case k == "$ref":
			if _, err := s.resolve(v); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		case k == "items":
			if err := s.lintSub(v, at+"/items"); err != nil {
				return err
			}
		case k == "additionalProperties":
			if _, ok := v.(bool); !ok {
				if err := s.lintSub(v, at+"/additionalProperties"); err != nil {
					return err
				}
			}
		case k == "anyOf":
			alts, ok := v.([]any)
			if !ok || len(alts) == 0 {
				return fmt.Errorf("%s: anyOf is not a list of schemas", at)
			}
			for i, a := range alts {
				if err := s.lintSub(a, fmt.Sprintf("%s/anyOf/%d", at, i)); err != nil {
					return err
				}
			}
		case k == "enum":
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("%s: enum is not a list", at)
			}
			for _, e := range list {
				if _, ok := e.(string); !ok {
					return fmt.Errorf("%s: enum holds %v, not a string", at, e)
				}
			}
		case slices.Contains(annotations, k) || slices.Contains(checked, k):
		default:
			return fmt.Errorf("%s: keyword %q is not supported by the tests' validator", at, k)
		}
	}
	return nil
}

func (s *JSONSchema) lintSub(v any, at string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: not a schema object", at)
	}
	return s.lint(m, at)
}

func (s *JSONSchema) resolve(ref any) (map[string]any, error) {
	r, _ := ref.(string)
	name, ok := strings.CutPrefix(r, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q is not to #/$defs", r)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	d, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", r)
	}
	return d, nil
}

// Validate checks doc against the schema and returns every violation,
// each with its JSON pointer, or nil.
func (s *JSONSchema) Validate(doc []byte) []string {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return []string{err.Error()}
	}
	var errs []string
	s.check(s.root, v, "", &errs)
	return errs
}

func (s *JSONSchema) check(sch map[string]any, v any, at string, errs *[]string) {
	fail := func(format string, args ...any) {
		p := at
		if p == "" {
			p = "/"
		}
		*errs = append(*errs, p+": "+fmt.Sprintf(format, args...))
	}
	if ref, ok := sch["$ref"]; ok {
		d, err := s.resolve(ref)
		if err != nil {
			fail("%v", err)
			return
		}
		s.check(d, v, at, errs)
	}
	if alts, ok := sch["anyOf"].([]any); ok {
		// None matching, the violations of the alternatives of v's type
		// say why: those of the others (null for an object) would bury
		// them.
		var why [][]string
		var named []string
		matched := false
		for i, a := range alts {
			var sub []string
			s.check(a.(map[string]any), v, at, &sub)
			if len(sub) == 0 {
				matched = true
				break
			}
			if s.typeMatches(a.(map[string]any), v) {
				why = append(why, sub)
				named = append(named, fmt.Sprintf("anyOf/%d", i))
			}
		}
		switch {
		case matched:
		case len(why) == 1:
			*errs = append(*errs, why[0]...)
		case len(why) == 0:
			fail("%s matches no alternative of anyOf", typeName(v))
		default:
			for i, sub := range why {
				for _, e := range sub {
					*errs = append(*errs, named[i]+": "+e)
				}
			}
		}
	}
	if t, ok := sch["type"]; ok {
		var names []string
		switch t := t.(type) {
		case string:
			names = []string{t}
		case []any:
			for _, n := range t {
				names = append(names, n.(string))
			}
		}
		if !slices.Contains(names, typeName(v)) && !(typeName(v) == "integer" && slices.Contains(names, "number")) {
			fail("%s, want %s", typeName(v), strings.Join(names, " or "))
			return
		}
	}
	if enum, ok := sch["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if e == v { // the lint allows strings only
				found = true
			}
		}
		if !found {
			fail("%v is none of %v", v, enum)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := sch["properties"].(map[string]any)
		if req, ok := sch["required"].([]any); ok {
			for _, r := range req {
				if _, ok := v[r.(string)]; !ok {
					fail("required field %q is missing", r)
				}
			}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k].(map[string]any); ok {
				s.check(p, v[k], at+"/"+k, errs)
				continue
			}
			switch ap := sch["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("field %q is not in the schema", k)
				}
			case map[string]any:
				s.check(ap, v[k], at+"/"+k, errs)
			}
		}
	case []any:
		if items, ok := sch["items"].(map[string]any); ok {
			for i, e := range v {
				s.check(items, e, fmt.Sprintf("%s/%d", at, i), errs)
			}
		}
	}
}

// typeMatches: sch, or the definition it refers to, allows v's type.
func (s *JSONSchema) typeMatches(sch map[string]any, v any) bool {
	if ref, ok := sch["$ref"]; ok {
		if d, err := s.resolve(ref); err == nil {
			return s.typeMatches(d, v)
		}
	}
	switch t := sch["type"].(type) {
	case string:
		return t == typeName(v)
	case []any:
		return slices.Contains(t, any(typeName(v)))
	}
	return true
}

// typeName is the JSON Schema type of a value decoded with UseNumber.
func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "integer"
		}
		if _, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// CheckJSONSchema fails t with every violation of doc (named name in the
// messages) against the schema file at path.
func CheckJSONSchema(t testing.TB, path, name string, doc []byte) {
	t.Helper()
	s, err := LoadJSONSchema(path)
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.Validate(doc); len(errs) > 0 {
		if len(errs) > 20 {
			errs = append(errs[:20], fmt.Sprintf("... and %d more", len(errs)-20))
		}
		t.Errorf("%s does not follow %s:\n%s", name, path, strings.Join(errs, "\n"))
	}
}
