/* nested: the leak is in a callee of the handler: process() owns the
 * buffer and returns early without freeing it on a bad request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long total;

__attribute__((noinline)) char *make(int i)
{
	char *p = malloc(48);
	snprintf(p, 48, "item %d", i);
	return p;
}

__attribute__((noinline)) void process(char *p, int i)
{
	if (i % 6 == 2) /* LEAK */
		return;
	total += strlen(p);
	free(p);
}

__attribute__((noinline)) void handle(int i)
{
	char *p = make(i);
	process(p, i);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0; i < n; i++) {
		handle(i);
		usleep(1000);
	}
	printf("total %ld\n", total);
	return 0;
}
