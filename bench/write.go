package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// The results block of docs/bench.md: everything between these marks is
// replaced by the tables a full run prints, so the file's prose stays
// hand-written while its figures are always those of the last run.
const (
	blockBegin = "<!-- bench:begin -->"
	blockEnd   = "<!-- bench:end -->"
)

// teeStdout sends what the bench prints to stdout to both the terminal
// and a buffer (the tables are written by fmt and tabwriter straight to
// os.Stdout). The returned function restores os.Stdout and returns what
// was printed.
func teeStdout() (func() ([]byte, error), error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("capturing the tables: %w", err)
	}
	real := os.Stdout
	os.Stdout = w
	var buf bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.MultiWriter(real, &buf), r)
		done <- err
	}()
	return func() ([]byte, error) {
		os.Stdout = real
		w.Close()
		err := <-done
		r.Close()
		return buf.Bytes(), err
	}, nil
}

// replaceBlock returns doc with the text between blockBegin and blockEnd
// replaced by the printed tables, fenced as text.
func replaceBlock(doc, printed []byte) ([]byte, error) {
	b := bytes.Index(doc, []byte(blockBegin))
	e := bytes.Index(doc, []byte(blockEnd))
	if b < 0 || e < 0 || e < b {
		return nil, fmt.Errorf("no %s ... %s block", blockBegin, blockEnd)
	}
	var out bytes.Buffer
	out.Write(doc[:b+len(blockBegin)])
	out.WriteString("\nThe tables `make bench` printed, with the commit and the date of the run:\n\n```text\n")
	out.Write(bytes.TrimRight(printed, "\n"))
	out.WriteString("\n```\n")
	out.Write(doc[e:])
	return out.Bytes(), nil
}

// writeResults puts the printed tables into path's results block.
func writeResults(path string, printed []byte) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	out, err := replaceBlock(doc, printed)
	if err != nil {
		return fmt.Errorf("-write %s: %w", path, err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, out, 0o644); err != nil {
		return fmt.Errorf("-write: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("-write: %w", err)
	}
	return nil
}
