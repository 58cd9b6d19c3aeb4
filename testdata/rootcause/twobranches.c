/* twobranches: one allocation site, two early returns that leak. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long sum;

__attribute__((noinline)) int serve(int i)
{
	int *v = malloc(40);
	v[0] = i;
	if (i % 9 == 4) /* LEAK */
		return -1;
	sum += v[0];
	if (i % 8 == 3) /* LEAK */
		return -2;
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		bad += serve(i) != 0;
		usleep(1000);
	}
	printf("%d bad of %d, sum %ld\n", bad, n, sum);
	return 0;
}
