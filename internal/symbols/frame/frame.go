// Package frame is one shown frame of a symbolized stack: what the leak
// report (internal/render/report) resolves and the usage engine
// (internal/analysis/usage) attributes, below both so that the analysis
// needs no renderer for it.
package frame

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Frame is one shown frame of a stack.
type Frame struct {
	Address  uint64
	Module   string
	Offset   uint64 // module-relative address of the return address
	Function string
	File     string
	Line     int
	Inlined  bool
	// Allocator marks an allocator's own frame (operator new, malloc
	// internals), which a stack does not show at its top.
	Allocator bool
	// ModIndex is the module's index in its process (-1: none).
	ModIndex int32
}

// String is the frame as the text report shows it: "function (file:line)",
// "function in module" without lines, "0xaddr module+0xoffset" without
// symbols.
func (f Frame) String() string {
	var b strings.Builder
	if f.Function != "" {
		b.WriteString(f.Function)
		if f.File != "" {
			fmt.Fprintf(&b, " (%s:%d)", f.File, f.Line)
		}
		if f.Inlined {
			b.WriteString(" [inlined]")
		}
		if f.File == "" && f.Module != "" {
			fmt.Fprintf(&b, " in %s", filepath.Base(f.Module))
		}
		return b.String()
	}
	fmt.Fprintf(&b, "0x%x", f.Address)
	if f.Module != "" {
		fmt.Fprintf(&b, " %s+0x%x", f.Module, f.Offset)
	}
	return b.String()
}
