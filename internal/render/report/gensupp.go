package report

import (
	"io"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
	"github.com/leakpath/leakpath/internal/model/event"
)

// GenSuppressions writes a suppression file in format suppress.FormatLSan
// or suppress.FormatValgrind that hides the leak groups Failing counts:
// those of kinds that no suppression hides yet, in every image. header is
// written first as comments. It returns the number of leak groups, of
// suppressions written, and of groups the format could not hide (see
// suppress.Write).
func (r *Report) GenSuppressions(w io.Writer, format string, kinds []event.LeakKind, header string) (groups, written, unhidden int, err error) {
	want := wantKinds(kinds)
	var leaks []suppress.GenLeak
	for _, p := range r.Images() {
		for _, l := range r.leaks(p) {
			if l.supp != nil || !want[l.Kind] {
				continue
			}
			leaks = append(leaks, suppress.GenLeak{
				Leak:  r.suppressLeak(p, l.LeakGroup, format == suppress.FormatValgrind),
				Bytes: l.Bytes, Blocks: l.Blocks,
			})
		}
	}
	written, unhidden, err = suppress.Write(w, format, leaks, header)
	return len(leaks), written, unhidden, err
}

// wantKinds is the set of kinds --check counts: kinds, and unclassified
// blocks with definite ones (the kinds could not be told: assume the worst).
func wantKinds(kinds []event.LeakKind) map[event.LeakKind]bool {
	want := map[event.LeakKind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	if want[event.Definite] {
		want[event.Unclassified] = true
	}
	return want
}
