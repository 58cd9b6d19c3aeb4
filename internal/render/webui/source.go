package webui

import "github.com/leakpath/leakpath/internal/render/report"

// MaxSourceBytes bounds a source file the UI shows lines of.
const MaxSourceBytes = report.MaxSourceBytes

// readSource reads a source file a frame names, under report.ReadSource's
// rules (a regular file, not a symbolic link, of at most MaxSourceBytes;
// as root, one the invoking user could read too).
func readSource(path string) ([]byte, error) { return report.ReadSource(path) }
