package report

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/google/pprof/profile"

	"github.com/leakpath/leakpath/internal/model/heap"
)

// The sample types of the pprof export, in this order: what each stack
// allocated over the run, and what it still held at the end (the leaks).
var pprofSampleTypes = []*profile.ValueType{
	{Type: "alloc_objects", Unit: "count"},
	{Type: "alloc_space", Unit: "bytes"},
	{Type: "inuse_objects", Unit: "count"},
	{Type: "inuse_space", Unit: "bytes"},
}

// pprofBuilder gathers the locations, functions and mappings of a profile,
// each once.
type pprofBuilder struct {
	prof  *profile.Profile
	locs  map[pprofLocKey]*profile.Location
	funcs map[pprofFuncKey]*profile.Function
	maps  map[pprofMapKey]*profile.Mapping
}

type pprofLocKey struct {
	pid   int32
	addr  uint64
	lines string // the frames of the address, as symbolized
}

type pprofFuncKey struct{ name, file string }

type pprofMapKey struct {
	pid  int32
	path string
}

// Profile builds the report as a pprof profile: one sample per allocation
// site and leak kind, with alloc_objects/alloc_space (allocated over the
// run) and inuse_objects/inuse_space (not freed at the end, suppressed
// leaks included, as totals.leaked_* count them). Samples carry the labels
// "kind" (the leak kind; absent when nothing leaked) and "pid". An image
// that exec'd another program has no inuse values: its heap was discarded.
func (r *Report) Profile() *profile.Profile {
	b := &pprofBuilder{
		prof: &profile.Profile{
			SampleType:        pprofSampleTypes,
			DefaultSampleType: "inuse_space",
			PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
			Period:            1,
		},
		locs:  map[pprofLocKey]*profile.Location{},
		funcs: map[pprofFuncKey]*profile.Function{},
		maps:  map[pprofMapKey]*profile.Mapping{},
	}
	if r.opts.Snapshot {
		b.prof.Comments = append(b.prof.Comments, "snapshot of a running program: inuse is what was live then")
	}
	for _, p := range r.Images() {
		leaks := map[heap.StackID][]leak{}
		for _, l := range r.allLeaks(p) {
			leaks[l.Stack] = append(leaks[l.Stack], l)
		}
		seen := map[heap.StackID]bool{}
		for id := 0; id < p.NumSites(); id++ {
			s := p.Site(heap.StackID(id))
			ls := leaks[heap.StackID(id)]
			if s.Allocs == 0 && len(ls) == 0 {
				continue
			}
			seen[heap.StackID(id)] = true
			locs := b.stack(r, p, heap.StackID(id))
			if len(ls) == 0 {
				b.add(p, locs, "", []int64{int64(s.Allocs), int64(s.AllocBytes), 0, 0})
				continue
			}
			for i, l := range ls {
				v := []int64{0, 0, int64(l.Blocks), int64(l.Bytes)}
				if i == 0 {
					v[0], v[1] = int64(s.Allocs), int64(s.AllocBytes)
				}
				b.add(p, locs, l.Kind.String(), v)
			}
		}
		// Leaks of stacks that are no site (none, in a consistent model).
		for id, ls := range leaks {
			if seen[id] {
				continue
			}
			locs := b.stack(r, p, id)
			for _, l := range ls {
				b.add(p, locs, l.Kind.String(), []int64{0, 0, int64(l.Blocks), int64(l.Bytes)})
			}
		}
	}
	for i, m := range b.prof.Mapping {
		m.ID = uint64(i + 1)
	}
	return b.prof
}

func (b *pprofBuilder) add(p *heap.Process, locs []*profile.Location, kind string, v []int64) {
	s := &profile.Sample{Location: locs, Value: v, NumLabel: map[string][]int64{"pid": {int64(p.Info.PID)}}}
	if kind != "" {
		s.Label = map[string][]string{"kind": {kind}}
	}
	b.prof.Sample = append(b.prof.Sample, s)
}

// stack converts the frames of stack id into locations, innermost first:
// one location per return address, its inlined frames as lines.
func (b *pprofBuilder) stack(r *Report, p *heap.Process, id heap.StackID) []*profile.Location {
	frames := r.Stack(p, id)
	var out []*profile.Location
	for i := 0; i < len(frames); {
		j := i
		for j < len(frames)-1 && frames[j].Inlined && frames[j+1].Address == frames[i].Address {
			j++
		}
		out = append(out, b.location(p, frames[i:j+1]))
		i = j + 1
	}
	return out
}

// location returns the location of the frames of one address, innermost
// first.
func (b *pprofBuilder) location(p *heap.Process, fs []Frame) *profile.Location {
	k := pprofLocKey{pid: p.Info.PID, addr: fs[0].Address}
	for _, f := range fs {
		k.lines += fmt.Sprintf("%s\x00%s\x00%d\x00", f.Function, f.File, f.Line)
	}
	if l, ok := b.locs[k]; ok {
		return l
	}
	// The address inside the call instruction, as pprof's own
	// symbolizer would look it up.
	addr := fs[0].Address
	if addr > 0 {
		addr--
	}
	l := &profile.Location{ID: uint64(len(b.prof.Location) + 1), Address: addr, Mapping: b.mapping(p, fs[0].Module)}
	for _, f := range fs {
		// Named as in the collapsed export: a frame without a symbol
		// is "module+0xoffset".
		l.Line = append(l.Line, profile.Line{Function: b.function(FoldedFrame(f), f.File), Line: int64(f.Line)})
	}
	b.locs[k] = l
	b.prof.Location = append(b.prof.Location, l)
	return l
}

func (b *pprofBuilder) function(name, file string) *profile.Function {
	k := pprofFuncKey{name, file}
	if f, ok := b.funcs[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.prof.Function) + 1), Name: name, SystemName: name, Filename: file}
	b.funcs[k] = f
	b.prof.Function = append(b.prof.Function, f)
	return f
}

// mapping returns the mapping of p's module at path (nil for an address
// in no known module). Its symbols come with the profile, so pprof does
// not look for the files.
func (b *pprofBuilder) mapping(p *heap.Process, path string) *profile.Mapping {
	if path == "" {
		return nil
	}
	k := pprofMapKey{p.Info.PID, path}
	if m, ok := b.maps[k]; ok {
		return m
	}
	m := &profile.Mapping{File: path, HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}
	// The latest module loaded from path: the one the frames name.
	for i := len(p.Modules) - 1; i >= 0; i-- {
		mod := p.Modules[i]
		if mod.Path != path {
			continue
		}
		lo, hi, off := ^uint64(0), uint64(0), uint64(0)
		for _, s := range mod.Segments {
			if mod.Bias+s.Vaddr < lo {
				lo, off = mod.Bias+s.Vaddr, s.Offset
			}
			if mod.Bias+s.Vaddr+s.Memsz > hi {
				hi = mod.Bias + s.Vaddr + s.Memsz
			}
		}
		if hi > lo {
			m.Start, m.Limit, m.Offset = lo, hi, off
		}
		m.BuildID = hex.EncodeToString(mod.BuildID)
		break
	}
	b.maps[k] = m
	b.prof.Mapping = append(b.prof.Mapping, m)
	return m
}

// pprof writes the profile gzipped, as go tool pprof reads it.
func (r *Report) pprof(w io.Writer) error {
	p := r.Profile()
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("pprof profile: %w", err)
	}
	return p.Write(w)
}
