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

func TestPrune(t *testing.T) {
	tr := NewTree("all")
	tr.Add([]string{"main", "big"}, 1000)
	for i := 0; i < 50; i++ {
		tr.Add([]string{"main", "small", string(rune('a' + i%26)), string(rune('A' + i))}, 1)
	}
	root := tr.Finish()
	if n := Prune(root, 1000); n != 0 {
		t.Errorf("a tree within the limit lost %d nodes", n)
	}
	dropped := Prune(root, 5)
	if root.Value != 1050 || root.Children[0].Value != 1050 {
		t.Errorf("values changed: root %d, main %d", root.Value, root.Children[0].Value)
	}
	var count func(n *Node) int
	count = func(n *Node) int {
		c := 1
		for _, x := range n.Children {
			c += count(x)
		}
		return c
	}
	if c := count(root); c > 5 || c+dropped != 3+1+26+50 {
		t.Errorf("%d nodes left, %d dropped, of %d", c, dropped, 3+1+26+50)
	}
	if root.Children[0].Children[0].Name != "big" {
		t.Errorf("the big callee was dropped")
	}
}
