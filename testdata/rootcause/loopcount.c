/* loopcount: a batch of n items is built and freed; the free loop stops
 * one short when the batch is larger than two: the leak depends on the
 * loop count. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long sum;

__attribute__((noinline)) void batch(int n)
{
	int *items[8];
	for (int k = 0; k < n; k++) {
		items[k] = malloc(24);
		*items[k] = k;
		sum += k;
	}
	int last = n > 2 ? n - 1 : n;
	for (int k = 0; k < last; k++) /* LEAK: stops before the last item */
		free(items[k]);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0; i < rounds; i++) {
		batch(1 + i % 6);
		usleep(1000);
	}
	printf("sum %ld\n", sum);
	return 0;
}
