/* validate: a request handler allocates the request, checks it two calls
 * below (check -> validate) and returns early when validation fails,
 * without freeing it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct req {
	int id;
	int len;
	char body[48];
};

static long served;

__attribute__((noinline)) static int validate(const struct req *r)
{
	if (r->id % 9 == 4) /* LEAK: validation fails */
		return -1;
	return 0;
}

__attribute__((noinline)) static int check(const struct req *r)
{
	if (r->len > (int)sizeof r->body)
		return -2;
	return validate(r);
}

__attribute__((noinline)) static int handle(int i)
{
	struct req *r = malloc(sizeof *r);
	r->id = i;
	r->len = i % 40;
	if (check(r) != 0) /* LEAK: the early return */
		return -1;
	served += r->len;
	free(r);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		bad += handle(i) != 0;
		usleep(1000);
	}
	printf("%d bad of %d, served %ld\n", bad, n, served);
	return 0;
}
