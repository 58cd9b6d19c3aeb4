/* cleanup: a loader's error paths jump to cleanup labels; one jumps past
 * the label that frees the second buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long loaded;

__attribute__((noinline)) static int load(int i)
{
	int rc = 0;
	char *a = calloc(1, 32);
	if (!a)
		return -1;
	char *b = malloc(48);
	if (!b) {
		rc = -1;
		goto out_a;
	}
	memset(b, i, 48);
	if (i % 6 == 1) { /* LEAK: jumps past out_b */
		rc = -2;
		goto out_a;
	}
	if (i % 5 == 2) {
		rc = -3;
		goto out_b;
	}
	loaded += b[0] + a[0];
out_b:
	free(b);
out_a:
	free(a);
	return rc;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		bad += load(i) != 0;
		usleep(1000);
	}
	printf("%d bad of %d, %ld\n", bad, n, loaded);
	return 0;
}
