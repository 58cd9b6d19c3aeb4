/* mem: memory with holes. "guard" is 3 pages filled with 'A', 'B', 'C'
 * whose middle page is then made PROT_NONE; "hole" is 3 pages of 'X'
 * whose middle page is unmapped; "target" is a global the test writes;
 * "ro" is read-only data. Prints their addresses, then at end of file on
 * stdin prints "target HEX ro STRING". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

volatile uint64_t target = 1;
const char ro[] = "read-only data";

int main(void) {
	long pg = sysconf(_SC_PAGESIZE);
	char *g = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *h = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g == MAP_FAILED || h == MAP_FAILED) return 1;
	memset(g, 'A', pg);
	memset(g + pg, 'B', pg);
	memset(g + 2 * pg, 'C', pg);
	mprotect(g + pg, pg, PROT_NONE);
	memset(h, 'X', 3 * pg);
	munmap(h + pg, pg);
	printf("guard %p hole %p target %p ro %p page %ld\n", (void *)g, (void *)h, (void *)&target, (void *)ro, pg);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {}
	printf("target %llx ro %s\n", (unsigned long long)target, ro);
	return 0;
}
