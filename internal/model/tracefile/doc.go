// Package tracefile reads and writes leakpath traces (.lpt): the events
// of a recorded run (event.Event), in the order the heap model received
// them, so that `leakpath report` can replay them later.
//
// A Writer appends events as they come and writes each chunk with one
// write call, so a trace is readable up to its last whole chunk even if
// the recorder is killed; a Reader streams the events back one batch at a
// time, holding one chunk in memory, and reports a cut or damaged file as
// a *CorruptError after the events of the good chunks.
//
// # Round trip
//
// Every field of every event, and of its Module, Segments, ProcessInfo and
// ClockInfo, reads back exactly as written, for any value (unknown kinds
// included), with two normalisations: an empty slice (Frames,
// Module.BuildID, Module.Segments, ProcessInfo.Argv) reads back as nil,
// and with Options.TimeShift set, the low bits of Event.Time are dropped,
// and those of a late allocation's own time (an Alloc's Addr2 that is not
// after its Time), unless that would make it 0; scope markers keep their
// exact times.
// Events beyond the limits (MaxFrames, MaxString, MaxSegments, MaxArgs)
// are refused by Write.
//
// # On-disk format, version 11
//
// All integers in headers are little-endian; CRCs are CRC32-C
// (Castagnoli).
//
//	file    = header chunk* trailer
//	header  = "LEAKPATH" | u16 version | u16 flags | u32 n | Meta JSON (n bytes) | u32 crc
//	          flags bits 0-5: time shift (Options.TimeShift); others 0.
//	          crc covers everything before it; n ≤ 1 MiB.
//	chunk   = "LPCK" | u32 clen | u32 rlen | u32 count | u32 dcrc | u32 hcrc | data (clen bytes)
//	          the data decodes to rlen bytes (the payload) holding count
//	          events; dcrc is the CRC of the data, hcrc of the 20 header
//	          bytes before it. clen, rlen ≤ 64 MiB.
//	data    = section* (version 9; before, one zstd frame of the payload)
//	section = u8 method | uvarint n | uvarint c (methods 1-3) | bytes
//	          decodes to n bytes; the sections' back to back are the
//	          payload. Methods: 0 stored (n bytes), 1 a zstd frame, 2 a
//	          huff0 4X stream with its table (n < 256 KiB), 3 an s2 block
//	          (c bytes each), 4 one byte repeated n times (1 byte).
//	trailer = "LPND" | u32 0 | u64 total events (as two u32) | u32 0 | u32 hcrc
//	          written by Close; a file without it was cut short.
//
// A chunk is closed at Flush or when its payload reaches
// Options.ChunkSize (1 MiB by default). Every chunk is self-contained:
// all coding state starts afresh, so any prefix of whole chunks decodes.
//
// A payload is a flags byte (bit 0: times are coded as residuals from an
// average, else as plain deltas; the writer picks whichever compresses
// better, measured every 8 chunks), the uvarint lengths of streams 0-7,
// then streams 0-8 back to back. Splitting the values by kind lets the
// compressor see homogeneous data: the writer codes the head stored and
// each stream with the method a probe every 32 chunks found best for its
// cost (most streams are near their order-0 entropy: a Huffman code gets
// what zstd does at a fraction of its time, where it saves over 3 %, or
// over 20 % on a stream of more than a byte an event; zstd where it saves
// over 15 % of the best cheap method), or all with zstd at
// CompressDefault and CompressBetter:
//
//	0 ops     one op byte per event, plus pseudo-ops
//	1 time    uvarint zigzag time deltas (or residuals)
//	2 addr    addresses: zigzag deltas, back-references
//	3 size    the low byte of sizes
//	4 sizehi  uvarint size>>8
//	5 stack   stack ids: of a heap event a zigzag delta from the
//	          chunk's latest StackDef's (version 8; before, uvarint),
//	          of a StackDef a uvarint
//	6 fn      Fn bytes that were not predicted
//	7 frames  stacks: uvarint count, zigzag delta of frame 0 from the
//	          previous stack's frame 0, then of each frame from the one
//	          before it (shared callers give the same bytes)
//	8 misc    everything else
//
// An op byte is a 5-bit code and 3 flag bits (f0 0x20, f1 0x40, f2 0x80).
// Proc and Thread are state: pseudo-op 0x1d (misc: uvarint Proc) and
// 0x1e (flags k=1-7: the thread at position k of a most-recently-used
// list of 8; k=0: misc: zigzag delta from the current thread) change them
// only when they change. Time is a delta from the previous time in the
// chunk; "the previous address" is the last Addr of an event coded below.
// The decoder mirrors these models of the heap, all reset per chunk:
// the last 65,536 allocations (address, size class, Fn), the last 4,096
// freed addresses, per (size class, thread) a LIFO of 4 freed addresses
// (glibc's tcache hands them out again), and per stack id its last size
// and Fn and (version 10) the stacks of the Alloc and the Free that came
// after its latest Alloc and Free (a table of 16,384 entries by the id's
// low bits; a Free's stack takes an entry too). From version 11, each
// thread of the most-recently-used list has its own previous address,
// glibc chunk end, previous Alloc and Free stacks with their successors,
// last free's Fn and last back-referenced free (0x02's 2+2*zigzag code):
// what the words "previous" and "latest" below mean for those is the
// current thread's, starting afresh for a thread new to the list.
//
//	0x01 Alloc         time, stack; f0: size and Fn as last time for this
//	                   stack, else fn byte and size; address by f2f1:
//	                   00 zigzag delta from where the previous Alloc's
//	                   glibc chunk ends (its address + max(32, (size+23)
//	                   &^15); version 6, before: from the previous
//	                   address; the previous address if no Alloc came yet
//	                   in the chunk), 01 the latest free of its size class
//	                   in this thread, 10 absolute, 11 the address freed
//	                   k+1 frees ago (addr: k)
//	0x02 Free          time; f0: stack (else 0); f2: addr holds the
//	0x03 ReallocBegin  distance back to its allocation (0: address 0),
//	                   else a zigzag delta; f1: Fn as predicted (Free: the
//	                   matching free of its allocation's Fn, or the last
//	                   free's Fn; ReallocBegin: realloc), else a fn byte
//	0x04 Realloc       time; f0: stack; Addr as for Free; fn byte with
//	                   bits 5-6: Addr2 = Addr, 0, or Addr + zigzag delta
//	                   (addr); size
//	0x05 StackDef      f0: time (else 0); f1: Stack = previous StackDef's
//	                   + 1, else stack; frames, or with f2 (version 6)
//	                   only those below the callers it shares with an
//	                   earlier StackDef of the chunk: frames: uvarint how
//	                   many StackDefs back (1: the latest), uvarint k (its
//	                   k outermost frames are this one's), uvarint n, then
//	                   the n inner frames from the outermost in, each a
//	                   zigzag delta from the one above it; the first from
//	                   the earlier stack's frame at its depth, or if that
//	                   stack has none, from the shared frame above it
//	0x06 scope marker  (format version 5) a ScopeBegin with a name or a
//	                   ScopeEnd without, Aux its depth, nothing else:
//	                   time; with a time shift (version 6), misc: uvarint
//	                   the time's low bits (markers keep exact times);
//	                   misc: uvarint Aux; f0: an end; a begin with
//	                   f1: misc: uvarint k, the k-th name of the chunk's
//	                   table, else misc: the name (a string), added to
//	                   the table while it holds fewer than 1,024
//	0x08-0x17 Alloc    (version 10) code 0x08 + t + 2s + 4l, flags as for
//	                   0x01: time unless t (t: the previous event's time;
//	                   no delta coded, the average of the deltas kept);
//	                   stack unless s (s: the stack that followed the
//	                   previous Alloc's stack after its latest Alloc in
//	                   the chunk, or that stack itself if it had none;
//	                   the previous Alloc's stack is 0 at the chunk's
//	                   start); Fn that of the stack's latest Alloc (an
//	                   Alloc of another Fn, or whose stack only a Free
//	                   used, Fn 0, is coded 0x01 or 0x1c), or if the
//	                   stack has no entry in the chunk, fn byte and
//	                   size; f0: size as
//	                   the stack's latest Alloc's, else size; the address
//	                   as for 0x01; l: 0 not late, else Addr2 is Time
//	                   (1), one tick (1<<shift) before (2), or (3) time:
//	                   uvarint ticks before, as for 0x1c
//	0x18-0x1b Free     (version 10) code 0x18 + t + 2s: time as for
//	                   0x08; s: the stack that followed the previous
//	                   Free's after its latest Free (0 after a Free of
//	                   stack 0; f0 must be 0), else f0 as for 0x02; the
//	                   rest as 0x02
//	0x1c late Alloc    an Alloc with its own, earlier time in Addr2 (the
//	                   agent wrote it after newer events): as 0x01, then
//	                   time: uvarint (Time>>shift) - (Addr2>>shift)
//	0x1f generic       any event: ops: kind byte; misc: uvarint mask of the
//	                   fields that are not zero, then those fields
//	                   (time in the time stream, frames in frames, the rest
//	                   in misc; strings as uvarint length and bytes)
//
// Only events whose other fields are zero use codes 1-6 and the codes of
// version 10, which a writer of that version uses for every Alloc and
// Free (the codes 0x01, 0x02 and 0x1c stay valid).
//
// # Versions
//
// A reader reads every version up to its own. Version 2 added scans to
// the generic event, 3 their flags, 4 root causes, 5 the scope marker
// (op 0x06), 6 codes a late allocation's own time shifted like the others
// (op 0x1c: before, the difference was exact ticks) and lets a StackDef
// share its callers with an earlier one (f2) and codes an Alloc's address
// from where the previous allocation's chunk ends, the generic event's
// stale epoch (field gStale: the slot pool's accessed pages) and typed
// scans (scan flag 2: the scan's types, names and typing time after its
// texts, and per block its type, evidence, holder, via and retained
// bytes); an older file holding what its version did not have is corrupt.
// Version 7 added the compact aggregate (op 0x07). Version 8 codes the
// stack id of a heap event from the chunk's latest StackDef's (the agent
// defines a stack just before its first use). Version 9 codes a chunk's
// data as sections, each stream its own way, instead of one zstd frame
// (zstd's fastest level cost as much per event as coding the events).
// Version 10 codes an Alloc's or Free's time and stack in its op byte
// when they are the predicted ones (with coarse times, 99 % of them: the
// time and stack streams had been most of what the compressor worked
// on). Version 11 keeps each thread's predictions apart (the threads of
// the recently-used list each have their own previous address, stack
// chains, last free's Fn and last back-referenced free). Pending events (the
// threads' pending bytes for the peak, since wire version 9) travel as
// generic events of a kind older readers do not know and skip: no version
// of their own.
package tracefile
