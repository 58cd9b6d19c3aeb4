/* paths: known paths for steptrace. For each number read from stdin, main
 * calls begin(x), whose path depends on x; it prints "tid TID begin ADDR
 * a ADDR b ADDR c ADDR drop ADDR" first, and "sum N" at end of file. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile long sum;

__attribute__((noinline)) void a(void) { sum += 1; }
__attribute__((noinline)) void b(void) { sum += 2; }
__attribute__((noinline)) void c(int n)
{
	for (int i = 0; i < n; i++)
		sum += i;
}

/* drop ends in a tail call, jmp free@plt (optimized, unlike the rest). */
__attribute__((noinline, optimize("O2"))) void drop(void *p)
{
	sum += 0;
	free(p);
}

__attribute__((noinline)) void begin(int x)
{
	if (x > 5) /* the branch the test looks at */
		a();
	else
		b();
	c(3);
	free(malloc(8));
	drop(malloc(8));
}

int main(void)
{
	printf("tid %d begin %p a %p b %p c %p drop %p\n", (int)gettid(), (void *)begin, (void *)a, (void *)b, (void *)c,
	       (void *)drop);
	fflush(stdout);
	int x;
	while (scanf("%d", &x) == 1)
		begin(x);
	printf("sum %ld\n", sum);
	return 0;
}
