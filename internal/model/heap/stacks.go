package heap

import (
	"strings"
	"unsafe"
)

// StackID names an interned call stack within one StackTable; 0 is "no
// stack".
type StackID uint32

// StackTable interns call stacks: identical frame sequences get one id.
// Frames are stored in one arena, so a table of a million stacks is a few
// large slices, not a million small ones.
type StackTable struct {
	frames []uint64 // all frames, back to back
	mods   []int32  // per frame: index into the process's modules, -1 if none
	start  []uint32 // start[id] is the first frame of id; start[id+1] ends it
	index  map[string]StackID
}

func newStackTable() *StackTable {
	return &StackTable{start: []uint32{0, 0}, index: map[string]StackID{}}
}

// Len is the number of stacks (ids 1..Len).
func (t *StackTable) Len() int { return len(t.start) - 2 }

// Frames returns the return addresses of id, innermost first. The slice
// must not be modified.
func (t *StackTable) Frames(id StackID) []uint64 {
	if id == 0 || int(id) >= len(t.start)-1 {
		return nil
	}
	return t.frames[t.start[id]:t.start[id+1]]
}

// Modules returns, per frame of id, the index of the module it lies in
// (-1: none), as known when the stack was first seen.
func (t *StackTable) Modules(id StackID) []int32 {
	if id == 0 || int(id) >= len(t.start)-1 {
		return nil
	}
	return t.mods[t.start[id]:t.start[id+1]]
}

func key(frames []uint64) string {
	if len(frames) == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(&frames[0])), len(frames)*8)
}

// intern returns the id of frames, adding it (with modOf to attribute each
// frame to a module) if new.
func (t *StackTable) intern(frames []uint64, modOf func(uint64) int32) StackID {
	if id, ok := t.index[key(frames)]; ok {
		return id
	}
	id := StackID(len(t.start) - 1)
	t.frames = append(t.frames, frames...)
	for _, f := range frames {
		t.mods = append(t.mods, modOf(f))
	}
	t.start = append(t.start, uint32(len(t.frames)))
	// The key must own its bytes, not alias the caller's slice.
	t.index[strings.Clone(key(frames))] = id
	return id
}

// clone copies the table (for a fork child, which shares its parent's code
// and so its stacks).
func (t *StackTable) clone() *StackTable {
	c := &StackTable{
		frames: append([]uint64(nil), t.frames...),
		mods:   append([]int32(nil), t.mods...),
		start:  append([]uint32(nil), t.start...),
		index:  make(map[string]StackID, len(t.index)),
	}
	for k, v := range t.index {
		c.index[k] = v
	}
	return c
}
