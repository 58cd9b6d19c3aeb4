/* refcount: objects are counted; use() takes a reference and, on one
 * path, returns without dropping it: the count never reaches zero. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct obj {
	int refs;
	int v;
};

static long sum;

__attribute__((noinline)) static struct obj *obj_new(int v)
{
	struct obj *o = malloc(sizeof *o);
	o->refs = 1;
	o->v = v;
	return o;
}

__attribute__((noinline)) static void put(struct obj *o)
{
	if (--o->refs == 0)
		free(o);
}

__attribute__((noinline)) static void use(struct obj *o)
{
	o->refs++;
	if (o->v % 7 == 2) /* LEAK: returns without put */
		return;
	sum += o->v;
	put(o);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0; i < n; i++) {
		struct obj *o = obj_new(i);
		use(o);
		put(o);
		usleep(1000);
	}
	printf("sum %ld\n", sum);
	return 0;
}
