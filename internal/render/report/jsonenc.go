package report

import (
	"encoding"
	"encoding/json"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// writeJSON writes v as json.Encoder with SetIndent("", "  ") would, but
// for a stack's frames, each on one line of its own ({"address": ...,
// "module": ..., ...}), and streams it: the encoder builds the whole
// document, then indents it into a second buffer, and a report whose
// program never frees (cc1plus: 6,700 sites, 220,000 frames) spent most
// of its JSON time there. A frame on nine lines made that report 70 MB
// instead of 45, and the kernel's copy of the bytes into the page cache
// is the larger part of writing it. The values that hold stacks are
// walked here, and their stacks written directly; everything else is
// encoding/json's.
func writeJSON(w io.Writer, v any) error {
	e := &jsonWriter{w: newChunks(w)}
	e.value(reflect.ValueOf(v), 0)
	e.w.WriteByte('\n')
	if e.err != nil {
		e.w.close(false)
		return e.err
	}
	return e.w.close(true)
}

type jsonWriter struct {
	w   *chunks
	err error
	buf []byte
}

// chunkSize is how much the encoder hands the writing goroutine at once.
const chunkSize = 256 << 10

// chunks is the encoder's output: each full chunk is written by a
// goroutine of its own, so that the kernel's copy of a large report
// (cc1plus: 45 MB, a third of its JSON time) overlaps the encoding of
// the next chunks on another core. A chunk is handed over, never copied.
type chunks struct {
	buf  []byte
	full chan []byte // to the writer; at most two waiting
	free chan []byte // written, for reuse
	done chan error  // the writer's first error, when it has ended
}

func newChunks(w io.Writer) *chunks {
	// Four chunks at most: one filling, two waiting, one being written;
	// free holds them all, so the writer never waits to give one back.
	c := &chunks{buf: make([]byte, 0, chunkSize), full: make(chan []byte, 2), free: make(chan []byte, 4), done: make(chan error, 1)}
	go func() {
		var err error
		for b := range c.full {
			if err == nil {
				_, err = w.Write(b)
			}
			c.free <- b[:0]
		}
		c.done <- err
	}()
	return c
}

// Write, WriteString and WriteByte hand the chunk over before it would
// outgrow its capacity (a larger piece makes a larger chunk).
func (c *chunks) Write(b []byte) {
	if len(c.buf)+len(b) > cap(c.buf) {
		c.flush()
	}
	c.buf = append(c.buf, b...)
}

func (c *chunks) WriteString(s string) {
	if len(c.buf)+len(s) > cap(c.buf) {
		c.flush()
	}
	c.buf = append(c.buf, s...)
}

// WriteByte never fails (the writer's error comes from close); its
// signature is io.ByteWriter's.
func (c *chunks) WriteByte(b byte) error {
	if len(c.buf) == cap(c.buf) {
		c.flush()
	}
	c.buf = append(c.buf, b)
	return nil
}

func (c *chunks) flush() {
	if len(c.buf) == 0 {
		return
	}
	c.full <- c.buf
	select {
	case c.buf = <-c.free:
	default:
		c.buf = make([]byte, 0, chunkSize)
	}
}

// close writes what is left when asked (flush), waits for the writer and
// returns its error.
func (c *chunks) close(flush bool) error {
	if flush {
		c.flush()
	}
	close(c.full)
	return <-c.done
}

var (
	leakType         = reflect.TypeFor[jsonLeak]()
	frameSliceType   = reflect.TypeFor[[]jsonFrame]()
	marshalerType    = reflect.TypeFor[json.Marshaler]()
	textMarshalerTyp = reflect.TypeFor[encoding.TextMarshaler]()
)

// walked caches which types hold a []jsonFrame (walked here) and the
// fields of those that are structs.
var walked sync.Map // reflect.Type -> *walkInfo

type walkInfo struct {
	custom bool // encodes itself: encoding/json's to write
	holds  bool
	fields []walkField
	// stack: the index in fields of a jsonLeak's stack, which its runs
	// may stand for (-1: none).
	stack int
}

type walkField struct {
	index     []int
	key       string // `"name": `, ready to write
	omitEmpty bool
}

func (e *jsonWriter) indent(depth int) {
	e.w.WriteByte('\n')
	for i := 0; i < depth; i++ {
		e.w.WriteString("  ")
	}
}

func (e *jsonWriter) value(v reflect.Value, depth int) {
	if e.err != nil {
		return
	}
	if !v.IsValid() {
		e.w.WriteString("null")
		return
	}
	t := v.Type()
	if t == frameSliceType {
		if v.IsNil() {
			e.w.WriteString("null")
			return
		}
		e.frames(v.Interface().([]jsonFrame), depth)
		return
	}
	info := walkOf(t)
	if !info.custom {
		switch t.Kind() {
		case reflect.String:
			e.string(v.String())
			return
		case reflect.Bool:
			e.w.WriteString(strconv.FormatBool(v.Bool()))
			return
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			e.buf = strconv.AppendInt(e.buf[:0], v.Int(), 10)
			e.w.Write(e.buf)
			return
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			e.buf = strconv.AppendUint(e.buf[:0], v.Uint(), 10)
			e.w.Write(e.buf)
			return
		}
		if info.holds {
			switch t.Kind() {
			case reflect.Pointer:
				if v.IsNil() {
					e.w.WriteString("null")
				} else {
					e.value(v.Elem(), depth)
				}
				return
			case reflect.Slice:
				if v.IsNil() {
					e.w.WriteString("null")
					return
				}
				if v.Len() == 0 {
					e.w.WriteString("[]")
					return
				}
				e.w.WriteByte('[')
				for i := 0; i < v.Len(); i++ {
					if i > 0 {
						e.w.WriteByte(',')
					}
					e.indent(depth + 1)
					e.value(v.Index(i), depth+1)
				}
				e.indent(depth)
				e.w.WriteByte(']')
				return
			case reflect.Struct:
				e.object(v, info, depth)
				return
			}
		}
	}
	b, err := json.MarshalIndent(v.Interface(), strings.Repeat("  ", depth), "  ")
	if err != nil {
		e.err = err
		return
	}
	e.w.Write(b)
}

func (e *jsonWriter) object(v reflect.Value, info *walkInfo, depth int) {
	var runs *jsonLeak // a leak whose stack is runs
	if info.stack >= 0 {
		if v.CanAddr() {
			runs = v.Addr().Interface().(*jsonLeak)
		} else {
			l := v.Interface().(jsonLeak)
			runs = &l
		}
		if !runs.lazy {
			runs = nil
		}
	}
	n := 0
	for i, f := range info.fields {
		fv, ok := field(v, f.index)
		lazy := runs != nil && i == info.stack
		if !ok || (f.omitEmpty && !lazy && emptyValue(fv)) {
			continue
		}
		if n == 0 {
			e.w.WriteByte('{')
		} else {
			e.w.WriteByte(',')
		}
		n++
		e.indent(depth + 1)
		e.w.WriteString(f.key)
		if lazy {
			e.runs(runs.runs, depth+1)
			continue
		}
		e.value(fv, depth+1)
	}
	if n == 0 {
		e.w.WriteString("{}")
		return
	}
	e.indent(depth)
	e.w.WriteByte('}')
}

// field follows index through embedded structs; false when it passes a
// nil embedded pointer (encoding/json then leaves the field out).
func field(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// emptyValue is encoding/json's omitempty test.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// custom: t encodes itself, so encoding/json must write it.
func custom(t reflect.Type) bool {
	return t.Implements(marshalerType) || t.Implements(textMarshalerTyp) ||
		reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textMarshalerTyp)
}

func walkOf(t reflect.Type) *walkInfo {
	if w, ok := walked.Load(t); ok {
		return w.(*walkInfo)
	}
	info := &walkInfo{custom: custom(t), holds: holdsFrames(t, map[reflect.Type]bool{}), stack: -1}
	if info.holds && t.Kind() == reflect.Struct {
		info.fields = structFields(t, nil)
		if t == leakType {
			for i, f := range info.fields {
				if f.key == `"stack": ` {
					info.stack = i
				}
			}
		}
	}
	walked.Store(t, info)
	return info
}

func holdsFrames(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == frameSliceType {
		return true
	}
	if seen[t] || custom(t) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice:
		return holdsFrames(t.Elem(), seen)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if holdsFrames(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// structFields lists t's JSON fields in encoding/json's order: embedded
// untagged structs contribute theirs in place. The report's types name
// no field twice, so its rules for conflicts are not needed.
func structFields(t reflect.Type, prefix []int) []walkField {
	var out []walkField
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		index := append(append([]int(nil), prefix...), i)
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, structFields(et, index)...)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		key, _ := json.Marshal(name)
		out = append(out, walkField{index: index, key: string(key) + ": ", omitEmpty: strings.Contains(","+opts+",", ",omitempty,")})
	}
	return out
}

// frames writes a stack: the bulk of a large report, where the same
// frames come back in stack after stack (cc1plus: 4,200 distinct of
// 220,000), so each is written once per depth and copied after.
func (e *jsonWriter) frames(fs []jsonFrame, depth int) {
	if len(fs) == 0 {
		e.w.WriteString("[]")
		return
	}
	e.w.WriteByte('[')
	for i := range fs {
		if i > 0 {
			e.w.WriteByte(',')
		}
		e.writeFrame(&fs[i], depth+1)
	}
	e.indent(depth)
	e.w.WriteByte(']')
}

// runs writes a stack given as runs of the report's frame cache, as
// frames writes the same frames.
func (e *jsonWriter) runs(rs []frameRun, depth int) {
	n := 0
	for _, r := range rs {
		js := r.e.json()
		for i := r.skip; i < len(js); i++ {
			if n == 0 {
				e.w.WriteByte('[')
			} else {
				e.w.WriteByte(',')
			}
			n++
			e.writeFrame(&js[i], depth+1)
		}
	}
	if n == 0 {
		e.w.WriteString("[]")
		return
	}
	e.indent(depth)
	e.w.WriteByte(']')
}

// writeFrame writes f at depth, preceded by its line break.
func (e *jsonWriter) writeFrame(f *jsonFrame, depth int) {
	if f.enc == nil {
		e.w.Write(e.frame(f, depth))
		return
	}
	b := f.enc.at(depth)
	if b == nil {
		b = e.frame(f, depth)
		f.enc.keep(depth, b)
	}
	e.w.Write(b)
}

// frameEnc is a frame as written at the depths it was: two at most (the
// main image's leaks are at the top and among the processes).
type frameEnc struct {
	depth [2]int
	b     [2][]byte
}

func (c *frameEnc) at(depth int) []byte {
	for i := range c.b {
		if c.b[i] != nil && c.depth[i] == depth {
			return c.b[i]
		}
	}
	return nil
}

func (c *frameEnc) keep(depth int, b []byte) {
	i := 0
	if c.b[0] != nil {
		i = 1
	}
	c.depth[i], c.b[i] = depth, b
}

// frame returns frame f at depth, preceded by its line break: on one
// line, its keys separated by ", " (see writeJSON).
func (e *jsonWriter) frame(f *jsonFrame, depth int) []byte {
	// Sized at once: the keys and punctuation take 120 bytes, and the
	// values (more when escaped).
	b := make([]byte, 0, 2*depth+128+len(f.Address)+len(f.Module)+len(f.Offset)+len(f.Function)+len(f.File))
	b = append(b, '\n')
	for i := 0; i < depth; i++ {
		b = append(b, "  "...)
	}
	b = append(b, `{"address": `...)
	b = appendString(b, f.Address)
	b = append(b, `, "module": `...)
	b = appendString(b, f.Module)
	b = append(b, `, "offset": `...)
	b = appendString(b, f.Offset)
	b = append(b, `, "function": `...)
	b = appendString(b, f.Function)
	b = append(b, `, "file": `...)
	b = appendString(b, f.File)
	b = append(b, `, "line": `...)
	b = strconv.AppendInt(b, int64(f.Line), 10)
	b = append(b, `, "inlined": `...)
	b = strconv.AppendBool(b, f.Inlined)
	return append(b, '}')
}

// string writes s quoted as encoding/json does.
func (e *jsonWriter) string(s string) {
	e.buf = appendString(e.buf[:0], s)
	e.w.Write(e.buf)
}

// appendString appends s quoted as encoding/json does (HTML characters
// escaped, invalid UTF-8 replaced): plain printable ASCII directly, the
// rest by encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
