/* noleak: every path frees; live blocks go up and down. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void *ring[16];
static long sum;

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0; i < n; i++) {
		free(ring[i % 16]);
		ring[i % 16] = malloc(32 + i % 5);
		if (i % 3 == 0) {
			free(ring[i % 16]);
			ring[i % 16] = NULL;
		}
		sum += i;
		usleep(1000);
	}
	for (int k = 0; k < 16; k++)
		free(ring[k]);
	printf("sum %ld\n", sum);
	return 0;
}
