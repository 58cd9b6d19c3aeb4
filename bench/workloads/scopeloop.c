/* scopeloop.c - the cost of scoped monitors (agent/include/leakpath.h):
 * times N iterations (default 2,000,000; argv[1]) of
 *
 *   empty     an empty loop (the baseline, subtracted from the others)
 *   pair      leakpath_scope_begin("request") + leakpath_scope_end()
 *   malloc    malloc(64) + free
 *   inscope   the scope pair around malloc(64) + free
 *
 * and prints, per kind, the nanoseconds one iteration costs above the
 * empty loop, as "kind ns". Built with -O2; the calls go through the
 * header's weak references, so without leakpath "pair" is what a program
 * pays for scopes it never uses. */
#include <leakpath.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static volatile int sink;

__attribute__((noinline)) static double empty(long n)
{
	double t = now();
	for (long i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
	return now() - t;
}

__attribute__((noinline)) static double pair(long n)
{
	double t = now();
	for (long i = 0; i < n; i++) {
		leakpath_scope_begin("request");
		__asm__ volatile("" ::: "memory");
		leakpath_scope_end();
	}
	return now() - t;
}

__attribute__((noinline)) static double alloc(long n, int scoped)
{
	double t = now();
	for (long i = 0; i < n; i++) {
		if (scoped)
			leakpath_scope_begin("request");
		char *p = malloc(64);
		__asm__ volatile("" : : "r"(p) : "memory");
		p[0] = (char)i;
		sink += p[0];
		free(p);
		if (scoped)
			leakpath_scope_end();
	}
	return now() - t;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	if (n <= 0)
		return 2;
	free(malloc(1)); /* the agent's first-use work, before timing */
	double base = empty(n);
	printf("pair %.2f\n", (pair(n) - base) / n);
	double m = alloc(n, 0);
	printf("malloc %.2f\n", (m - base) / n);
	printf("inscope %.2f\n", (alloc(n, 1) - base) / n);
	return 0;
}
