package session

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/leakpath/leakpath/internal/model/event"
	"github.com/leakpath/leakpath/internal/model/heap"
	"github.com/leakpath/leakpath/internal/target/wire"
)

// maxFamilyPrefix is the longest --alloc-family prefix the agent takes
// (its LP_FAM_PREFIX_MAX, less the NUL).
const maxFamilyPrefix = 31

// CheckAllocFamilies validates the prefixes of --alloc-family: the start
// of C names, short enough, all of them within the region's field.
func CheckAllocFamilies(prefixes []string) error {
	total := 0
	for _, p := range prefixes {
		if p == "" || len(p) > maxFamilyPrefix {
			return fmt.Errorf("--alloc-family %q: want a prefix of 1 to %d characters", p, maxFamilyPrefix)
		}
		for i, c := range p {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
				return fmt.Errorf("--alloc-family %q: want the start of C names (letters, digits, _)", p)
			}
		}
		total += len(p) + 1
	}
	if total > wire.FamiliesMax-1 {
		return fmt.Errorf("--alloc-family: %d bytes of prefixes, at most %d", total, wire.FamiliesMax-1)
	}
	return nil
}

// untracedFamilies returns a warning for each module of the images of s
// with allocator functions the agent found outside its hooks' reach and
// could not trace (see agent/families.c): allocations through them are
// not recorded, so --check cannot pass on their account.
func untracedFamilies(s *heap.Session) (warns []string) {
	seen := map[string]bool{}
	for _, p := range s.Procs {
		if p == nil {
			continue
		}
		byMod := map[string][]string{}
		var mods []string
		for _, f := range p.Families {
			if f.Outcome == event.FamilyTraced || f.Outcome == event.FamilyHooked {
				continue
			}
			mod := "?"
			if mi := p.ModuleOf(f.Addr); mi >= 0 && int(mi) < len(p.Modules) {
				mod = p.Modules[mi].Path
			}
			if _, ok := byMod[mod]; !ok {
				mods = append(mods, mod)
			}
			byMod[mod] = append(byMod[mod], f.Name)
		}
		for _, mod := range mods {
			w := fmt.Sprintf("%s: leakpath could not trace its allocator's %s: allocations through them are not recorded (see the allocator line of the report)",
				filepath.Base(mod), strings.Join(byMod[mod], ", "))
			if !seen[w] {
				seen[w] = true
				warns = append(warns, w)
			}
		}
	}
	return warns
}
