/* heap: mallocs MB mebibytes, writes word i = i ^ 0x6c65616b70617468 into
 * it, prints "heap ADDR size BYTES", then sleeps until end of file on
 * stdin. Usage: heap [MB] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
	size_t mb = argc > 1 ? (size_t)atol(argv[1]) : 500;
	size_t size = mb << 20, n = size / 8;
	uint64_t *p = malloc(size);
	if (!p) return 1;
	for (size_t i = 0; i < n; i++) p[i] = i ^ 0x6c65616b70617468ull;
	printf("heap %p size %zu\n", (void *)p, size);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {}
	return 0;
}
