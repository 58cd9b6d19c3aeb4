package report

import "github.com/leakpath/leakpath/internal/model/heap"

// What other reports over the same model (internal/render/usagetable) share with this
// one, so that they read alike: number formats, frames, names, times.

// Bytes formats a byte count as the report does: exact below 10 kB, else
// with a decimal unit ("12.3 MB").
func Bytes(n uint64) string { return bytes(n) }

// Count formats n with thousands separators.
func Count(n uint64) string { return count(n) }

// JSONFrame is a stack frame as the JSON reports spell it (the entries of
// leakpath.report/v1's "stack").
type JSONFrame = jsonFrame

// JSONFrames converts frames for the JSON reports; never nil.
func JSONFrames(fs []Frame) []JSONFrame { return jsonFrames(fs) }

// CommandName names the program of image p: its argv[0], else its
// executable, else its pid.
func CommandName(p *heap.Process) string { return commandName(p) }

// Seconds converts ticks of p's clock into seconds since p started (0 for
// ticks before).
func (r *Report) Seconds(p *heap.Process, ticks uint64) float64 { return r.seconds(p, ticks) }

// Outcome says in words how image p ended ("exited with code 0").
func (r *Report) Outcome(p *heap.Process) string { return r.outcome(p) }

// LinesNote is the note naming the modules of the frames resolved so far
// that had no source lines ("" if none).
func (r *Report) LinesNote() string { return r.linesNote() }
