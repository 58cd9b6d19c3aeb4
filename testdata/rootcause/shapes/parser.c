/* parser: parse allocates the result's buffer; one error path frees it,
 * another returns without freeing; the caller frees only what parsed
 * (if (parse(&r) == 0) {...}). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct result {
	char *buf;
	int len;
};

static long total;

__attribute__((noinline)) static int parse(struct result *r, int i)
{
	r->buf = malloc(64);
	if (i % 11 == 2) { /* a read error: cleaned up */
		free(r->buf);
		r->buf = NULL;
		return -1;
	}
	if (i % 7 == 3) /* LEAK: a bad header returns without freeing */
		return -2;
	r->len = snprintf(r->buf, 64, "item %d", i);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		struct result r;
		if (parse(&r, i) == 0) {
			total += r.len;
			free(r.buf);
		} else {
			bad++;
		}
		usleep(1000);
	}
	printf("%d bad of %d, total %ld\n", bad, n, total);
	return 0;
}
