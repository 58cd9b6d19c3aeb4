/* bigheap: builds a heap of MB megabytes in blocks of SIZE bytes, linked
 * in a list from a global (all reachable) but for every 100th block
 * (definite leaks), then exits: the exit scan's worst case.
 * Usage: bigheap MB [SIZE] */
#include <stdlib.h>
#include <string.h>

struct blk {
	struct blk *next;
};
struct blk *head;

int main(int argc, char **argv)
{
	long mb = argc > 1 ? atol(argv[1]) : 100, size = argc > 2 ? atol(argv[2]) : 100;
	long n = mb * 1000000 / size;
	for (long i = 0; i < n; i++) {
		struct blk *b = malloc(size);
		memset(b, 0, size);
		if (i % 100 == 0)
			continue;
		b->next = head;
		head = b;
	}
	return 0;
}
