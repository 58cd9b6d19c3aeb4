package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReplaceBlock: the printed tables replace the block and nothing else;
// a document without the marks is an error, not a silently unchanged file.
func TestReplaceBlock(t *testing.T) {
	doc := []byte("# Benchmarks\n\nprose\n\n" + blockBegin + "\nold table\n" + blockEnd + "\n\n## After\n")
	out, err := replaceBlock(doc, []byte("workload  native\nloop  0.059 s\ncommit abc, 2026-11-27\n\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if strings.Contains(s, "old table") {
		t.Errorf("the old table is still there:\n%s", s)
	}
	for _, want := range []string{"# Benchmarks\n\nprose\n\n" + blockBegin, "```text\nworkload  native\nloop  0.059 s\ncommit abc, 2026-11-27\n```\n" + blockEnd, blockEnd + "\n\n## After\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in:\n%s", want, s)
		}
	}
	again, err := replaceBlock(out, []byte("new\n"))
	if err != nil || bytes.Contains(again, []byte("loop  0.059")) || !bytes.Contains(again, []byte("```text\nnew\n```")) {
		t.Errorf("a second write does not replace the first: %v\n%s", err, again)
	}
	if _, err := replaceBlock([]byte("no marks"), []byte("x")); err == nil {
		t.Error("a document without the marks was accepted")
	}
}

// TestTeeStdout: what is printed to os.Stdout while teeing comes back whole,
// and os.Stdout is restored after.
func TestTeeStdout(t *testing.T) {
	before := os.Stdout
	done, err := teeStdout()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("table line 1")
	fmt.Fprintf(os.Stdout, "table line %d\n", 2)
	got, err := done()
	if err != nil {
		t.Fatal(err)
	}
	if os.Stdout != before {
		t.Error("os.Stdout was not restored")
	}
	if string(got) != "table line 1\ntable line 2\n" {
		t.Errorf("captured %q", got)
	}
}
