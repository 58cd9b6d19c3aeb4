// Package usage accounts heap use per unit of a program: per library,
// function, thread or allocation site, over the whole run and per time
// interval (leakpath report --by, leakpath run --by). It counts;
// internal/render/usagetable writes the counts as tables or as
// leakpath.usage/v1 JSON (docs/json.md).
//
// An Engine is a heap.Observer: set it as the model's Session.Observer and
// it follows every allocation, free and folded pair as the model applies
// them, live or from a trace. It attributes each allocation site (stack
// id) to its units once, on the site's first event, and caches that; the
// work per event is then proportional to the number of units of its site.
// After the last event, Engine.Units has what each unit of an image did.
//
// # Units
//
//   - library: the module (ELF file) of a frame, named by its path. The
//     executable and the C runtime (libc.so.6, the dynamic loader
//     ld-linux-*.so.2, libpthread of old glibc) are units like the others;
//     their Kind says "executable" and "runtime". A frame in no known
//     module is the unit "(unknown)".
//   - function: the symbolized function of a frame, and its module (two
//     static functions of the same name in two modules are two units);
//     a function inlined into another is a frame, and a unit, of its own.
//     A frame without a function name is the unit "module+0xoffset" (per
//     address).
//   - thread: the thread that allocated the block (its tid; its name and
//     its creation and exit times come from the model's threads).
//   - site: the allocation stack; the row is named by its first frame, the
//     JSON row has the whole stack (both resolved by the tables, at the
//     end).
//
// A stack without frames (not recorded) is the unit "(no stack)".
//
// # Attribution (library and function units)
//
// A block's units come from its allocation stack as the report shows it:
// innermost first, the allocator's own frames at the top dropped (the agent,
// operator new, malloc internals: report.Report.Stack with
// symbolize.IsAllocatorFrame), so frame 0 is the one that called malloc,
// new...
//
// The stack's startup frames are its outermost frames that belong to the
// C runtime (or are _start or __libc_csu_init): __libc_start_main,
// start_thread, clone3, _dl_init... Below them lies the root: main for the
// main thread, a thread's start routine, a constructor or an atexit
// handler. When every frame is a startup frame (the runtime allocating for
// itself), none is skipped and the root is the outermost frame.
//
//   - caller: the unit of frame 0, the frame that called the allocator.
//   - entry, library: walking from the root inward, the first frame not in
//     the executable; the executable when every frame from the root in is
//     in it. For `main → liba_f → libb_g → malloc` that is liba; for a
//     thread whose start routine lies in liba, liba.
//   - entry, function: the function the root called on the way to the
//     allocator (the frame just inside the root), or the root itself when
//     it called the allocator; for `main → parse → read_line → malloc`
//     that is parse.
//   - inclusive: every distinct unit among the frames from the root to
//     frame 0, each charged once with the whole block. Rows then overlap
//     and do not sum to the totals.
//
// Stacks are cut at --max-depth frames (64 by default): a deeper stack
// has no startup frames and its outermost recorded frame is its root.
//
// # What a unit counts
//
// Every allocation, free and realloc is charged to the units of the block
// it concerns, so a unit's net size only counts its own blocks:
//
//   - an allocating call (malloc, calloc, new, aligned_alloc...): to the
//     units of its own stack (the block's site) and thread;
//   - a free or delete, and a realloc of a block: to the units of the block
//     it releases or resizes (where that block was allocated, whichever
//     stack and thread freed it); the new block of a realloc belongs to the
//     realloc's own stack and thread;
//   - a call that allocated or released no known block (a failed call, a
//     free of an address never allocated): to the units of its own stack
//     and thread.
//
// Per unit: current bytes and blocks (allocated and not freed; for a fork
// child, what it inherited included), the minimum and maximum of its net
// size as it ran and when they were first reached (seconds since the
// image started; the running size starts at 0, or at what a fork child
// inherited, at the image's start), bytes and blocks allocated and freed,
// and calls per allocator function.
//
// Short-lived blocks the agent folded (a thread's free of one of its
// latest 256 allocations; see docs/design.md, "Folding") arrive as pairs: they add
// to allocated and freed bytes and to both functions' call counts, and are
// net zero: the minimum and maximum never see them (the report's peak
// does, through the threads' pending bytes, which belong to no unit until
// their pairs arrive). An allocation the agent kept pending enters the running size
// when its record arrives, timestamped with its allocation time. A
// pending block that another thread frees reaches the model from that
// thread; its late record names the thread that allocated it.
//
// # Per call
//
// With Options.PerCall (units by library or function, entry attribution),
// each invocation of an entry unit is a row of its own, numbered per unit
// ("libfoo.so call 3"): see percall.go for how invocations are told
// apart (JP2014-149606's per-call aggregation, refined by the call site).
//
// # Intervals
//
// With Options.Interval, the same counts per time slice [k·I, (k+1)·I) of
// the image's life: allocated bytes and blocks, freed, calls, the change
// of the net size (net_bytes), the net size at the slice's end
// (current_bytes) and its minimum and maximum within the slice. Slices in
// which a unit did nothing do not list it, slices in which nothing
// happened are not listed. A unit's slices sum to its totals: allocated,
// freed and calls exactly, net changes to its current size minus what it
// inherited. Folded pairs count in the slice of their aggregate's record:
// the agent writes a thread's aggregates every ~10 ms while it allocates,
// the collector reads what is left when the process ends.
package usage
