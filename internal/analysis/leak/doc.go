// Package leak classifies the live heap blocks of a stopped process the way
// Valgrind memcheck's leak check does (--leak-check=full, with
// --leak-check-heuristics=all by default): it looks for pointers to the
// blocks in the roots (writable segments, stacks, registers) and in the
// blocks found from them, and says of each block how it is reached.
//
// A pointer is an aligned 8-byte word, in a root range or in a block, or a
// register value; in a root marked StartOnly (the C library's data, where
// its allocator's state points at chunk headers inside blocks) only a
// start pointer is one. It points to a block if its value lies in [Addr,
// Addr+Size): at Addr it is a start pointer, past it an interior pointer.
// A zero-size block is reached only by a pointer equal to its address. A
// PastEnd block (new T[0]'s 8 bytes) is also reached by a pointer just past
// its end, as by a start pointer: LeakSanitizer's rule, where memcheck
// calls the block definitely lost.
// Words inside blocks are never roots, even if a root range covers them.
//
// The kinds:
//
//   - Reachable: a start pointer to the block lies in a root or in a
//     reachable block; or an interior pointer there that a heuristic
//     accepts (below).
//   - Possible: only interior pointers reach the block, or it is reached
//     only through possibly reachable blocks (a start pointer in a
//     possible block makes its target possible, not reachable).
//   - Definite: nothing reached from the roots points to the block, and it
//     leads its clique.
//   - Indirect: nothing reached from the roots points to the block, but a
//     definite block leads to it, by any pointers (start or interior).
//     Result.Owner names the leader, whose IndirectBytes and
//     IndirectBlocks count the indirect blocks it leads.
//
// Cliques follow memcheck: the blocks not reached from the roots are taken
// in address order; each one not yet in a clique leads a new clique and
// takes every block it leads to that is not in one yet. A leader that a
// later leader leads to becomes indirect in the later clique, with its
// whole clique. A cycle of leaked blocks with nothing else pointing into
// it is thus one clique led by its lowest block.
//
// Heuristics (Options.Heuristics; memcheck's definitions) let an interior
// pointer from a reachable place count as a start pointer:
//
//   - stdstring: it points 24 bytes in, the block holds length, capacity
//     and refcount words then capacity+1 bytes, and length <= capacity
//     (std::string of the old, reference-counted ABI);
//   - length64: it points 8 bytes in and the first word is the size of the
//     rest, not 0 (sqlite's allocations, for one);
//   - newarray: it points 8 bytes in and the first word, not 0, divides the
//     size of the rest (new[] of a type with a destructor, the first word
//     being the element count);
//   - multipleinheritance: it is aligned, and both the word it points to and
//     the block's first word point to vtables: readable file-backed memory
//     whose first words (up to 21) include two pointers into executable
//     file mappings before anything that is not one, nulls aside. This one
//     needs Options.Mappings.
//
// Runtime blocks (Block.Runtime) are the C runtime's own bookkeeping, such
// as glibc's DTV and dynamic TLS blocks: any pointer from the roots or from
// a reachable or possible block, interior ones included, makes one
// reachable, and its contents are scanned as a reachable block's. glibc's
// thread control block points to dtv+1, an interior pointer, so memcheck
// calls the DTV possibly lost; here it is reachable. A runtime block that
// nothing reached points to is classified like any other.
//
// Deliberate differences from memcheck: memcheck scans only the words its
// shadow memory says are defined; this package cannot know, so it scans
// every readable word (an uninitialised word that happens to hold an
// address counts). Memory that cannot be read is skipped a page at a time
// (in growing steps over long unreadable stretches) and counted in
// Stats.UnreadableBytes. Result.Owner is the clique's leader, where
// memcheck keeps the block through which each was found. Result.Heuristic
// names the heuristic only for a block that no start pointer from a
// reachable place reaches. Overlapping blocks are an error (memcheck
// tolerates a custom block inside a malloc'd one).
//
// The scan reads memory in large batches (ReadRanges with up to 1024
// ranges, 8 MiB at a time), finds blocks through per-cluster rank bitmaps
// or page tables instead of a map, with the lookups of many words at once
// so that their cache misses overlap, and uses explicit mark stacks
// (reachable blocks first, so that most blocks are read once). The blocks
// not reached are then read once, in address order, to build the graph of
// pointers among them, from which the cliques are gathered in memory.
// Marking does not depend on the order blocks are scanned in (states only
// rise, and a block whose state rises is scanned again), which is what
// lets the reads come in any batches.
package leak
