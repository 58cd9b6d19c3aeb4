//go:build !amd64

package prefetch

import "unsafe"

// Line does nothing on this architecture: the read ahead is only a hint.
func Line(p unsafe.Pointer) {}
