package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// commands lists the commands the usage text names ("leakpath X ..."), so
// that a new command is checked without editing this test.
func commands(t *testing.T) []string {
	var cmds []string
	for _, m := range regexp.MustCompile(`(?m)^  leakpath ([a-z-]+) `).FindAllStringSubmatch(usage, -1) {
		if m[1] != "help" && m[1] != "version" {
			cmds = append(cmds, m[1])
		}
	}
	if len(cmds) < 8 {
		t.Fatalf("found only %d commands in the usage text: %v", len(cmds), cmds)
	}
	return cmds
}

// helpFlags returns the flag names `leakpath help CMD` lists.
func helpFlags(t *testing.T, cmd string) []string {
	var out bytes.Buffer
	if code := run([]string{"help", cmd}, &out, &out); code != 0 {
		t.Fatalf("leakpath help %s: exit code %d\n%s", cmd, code, out.String())
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		names = append(names, m[1])
	}
	return names
}

// readDocs returns the text of every docs/*.md file, by name.
func readDocs(t *testing.T) map[string]string {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md under %s: %v", root, err)
	}
	docs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[filepath.Base(f)] = string(b)
	}
	return docs
}

// TestEveryFlagDocumented: every flag of every command is named in docs/
// (as `--name`, or `-o` for the one-letter flag), and every flag of `run`
// has a row of its own in docs/run.md's flag table, so a flag added
// without documentation fails here.
func TestEveryFlagDocumented(t *testing.T) {
	docs := readDocs(t)
	var all strings.Builder
	for _, d := range docs {
		all.WriteString(d)
	}
	text := all.String()
	total := 0
	for _, cmd := range commands(t) {
		flags := helpFlags(t, cmd)
		if len(flags) == 0 {
			t.Errorf("leakpath help %s lists no flags: the parsing of its help is broken", cmd)
		}
		for _, f := range flags {
			total++
			named := regexp.MustCompile(fmt.Sprintf("(^|[^a-z0-9-])--?%s([^a-z0-9-]|$)", regexp.QuoteMeta(f)))
			if len(f) > 1 && !strings.Contains(text, "--"+f) || len(f) == 1 && !named.MatchString(text) {
				t.Errorf("leakpath %s: flag -%s is named nowhere in docs/", cmd, f)
			}
		}
	}
	for _, f := range helpFlags(t, "run") {
		row := regexp.MustCompile(fmt.Sprintf("(?m)^\\| `--?%s[ =`]", regexp.QuoteMeta(f)))
		if !row.MatchString(docs["run.md"]) {
			t.Errorf("leakpath run: flag -%s has no row in docs/run.md's flag table", f)
		}
	}
	t.Logf("%d flags of %d commands checked", total, len(commands(t)))
}

// mdLink matches a Markdown link's target; code spans and fenced blocks
// are removed before it is applied.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// stripCode removes fenced code blocks and inline code spans, where
// brackets are not links.
func stripCode(s string) string {
	var out strings.Builder
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		out.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(line, ""))
		out.WriteByte('\n')
	}
	return out.String()
}

// anchors returns the anchors GitHub makes of a Markdown file's headings:
// lower case, punctuation dropped, spaces turned into hyphens, a repeated
// one suffixed -1, -2...
func anchors(s string) map[string]bool {
	got := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				a.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		id := a.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id = fmt.Sprintf("%s-%d", id, n)
		} else {
			seen[id] = 1
		}
		got[id] = true
	}
	return got
}

// TestDocLinks: every relative link of the README and of docs/*.md names a
// file that exists, and every #anchor a heading of its target.
func TestDocLinks(t *testing.T) {
	files := []string{filepath.Join(root, "README.md")}
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, more...)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %s does not exist", rel, target, path)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not Markdown", rel, target)
				continue
			}
			db, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s: link %s: %v", rel, target, err)
				continue
			}
			if !anchors(string(db))[anchor] {
				t.Errorf("%s: link %s: no heading makes the anchor #%s", rel, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parsing is broken")
	}
	t.Logf("%d relative links checked in %d files", checked, len(files))
}

// TestAnchors: the anchor rule on headings like the docs' own.
func TestAnchors(t *testing.T) {
	a := anchors("# `leakpath run` and `leakpath report`\n## Heap use: `leakpath.usage/v1`\n## Exports: pprof, flame graphs, SARIF\n```\n# not a heading\n```\n## Limits\n## Limits\n")
	for _, want := range []string{"leakpath-run-and-leakpath-report", "heap-use-leakpathusagev1", "exports-pprof-flame-graphs-sarif", "limits", "limits-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block made an anchor")
	}
}

// TestDesignListsEveryPackage: docs/design.md's package table has a row
// for every package under internal/, and its layout block names each
// under its stage, so that a package added or moved shows in the map a
// newcomer reads first.
func TestDesignListsEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	design := string(b)
	_, layout, ok := strings.Cut(design, "## Package layout")
	if !ok {
		t.Fatal(`docs/design.md has no "## Package layout" section`)
	}
	block := regexp.MustCompile("(?s)```\n(.*?)```").FindStringSubmatch(layout)
	if block == nil {
		t.Fatal("docs/design.md: no code block under Package layout")
	}
	pkgs := map[string]bool{}
	err = filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 {
		t.Fatalf("found only %d packages under internal/: the walk is broken", len(pkgs))
	}
	for pkg := range pkgs {
		if !strings.Contains(design, "| `"+pkg+"` |") {
			t.Errorf("docs/design.md: no row for %s in the package table", pkg)
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(filepath.Base(pkg)) + `\b`).MatchString(block[1]) {
			t.Errorf("docs/design.md: the layout block does not name %s", pkg)
		}
	}
}
