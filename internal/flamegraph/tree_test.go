package flamegraph

import (
	"bytes"
	"strings"
	"testing"
)

func TestTree(t *testing.T) {
	tr := NewTree("all")
	tr.Add([]string{"main", "a", "malloc"}, 10)
	tr.Add([]string{"main", "b"}, 30)
	tr.Add([]string{"main", "a"}, 5)
	tr.Add([]string{"other"}, 0) // nothing
	root := tr.Finish()
	if root.Value != 45 || len(root.Children) != 1 {
		t.Fatalf("root %d with %d callees, want 45 with 1", root.Value, len(root.Children))
	}
	m := root.Children[0]
	if m.Name != "main" || m.Value != 45 || len(m.Children) != 2 {
		t.Fatalf("main: %+v", m)
	}
	if m.Children[0].Name != "b" || m.Children[1].Name != "a" || m.Children[1].Value != 15 {
		t.Errorf("main's callees not biggest first: %s %d, %s %d", m.Children[0].Name, m.Children[0].Value, m.Children[1].Name, m.Children[1].Value)
	}
}

func TestWriteHTMLEscapes(t *testing.T) {
	tr := NewTree("all")
	tr.Add([]string{"</script><b>x", "operator<<(a&b)"}, 1)
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Page{Title: "t<i>", Value: "leaked-bytes", Unit: "bytes", Root: tr.Finish()}); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	if strings.Count(s, "</script>") != 2 {
		t.Errorf("a frame's name closed a script: %d </script>", strings.Count(s, "</script>"))
	}
	if strings.Contains(s, "<i>") || strings.Contains(s, "<b>") {
		t.Errorf("names or title unescaped")
	}
}
