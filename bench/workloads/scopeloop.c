/* scopeloop.c - the cost of scoped monitors (agent/include/leakpath.h):
 * times N iterations (default 2,000,000; argv[1]) of
 *
 *   empty     an empty loop (the baseline, subtracted from the others)
 *   pair      leakpath_scope_begin("request") + leakpath_scope_end()
 *   malloc    malloc(64) + free
 *   inscope   the scope pair around malloc(64) + free
 *
 * and prints, per kind, the nanoseconds one iteration costs above the
 * empty loop, of the thread's CPU time (what the program pays, not what
 * other processes of a busy machine take) and of wall time: "kind cpu
 * wall". Built with -O2; the calls go through the
 * header's weak references, so without leakpath "pair" is what a program
 * pays for scopes it never uses.
 *
 * With a second argument ("warm"), each timed loop comes after the same
 * loop run 8N times untimed and a pause of 200 ms: under leakpath, the
 * ring's pages are touched and the collector has caught up, so the time
 * is what the thread itself pays while the collector keeps up (the ring
 * must hold N iterations' records). Without it, back-to-back scopes run
 * at the collector's pace. */
#include <leakpath.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* stamp is a time of the thread's CPU clock and of the wall clock. */
struct stamp {
	double cpu, wall;
};

static double clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static struct stamp now(void)
{
	return (struct stamp){clock_ns(CLOCK_THREAD_CPUTIME_ID), clock_ns(CLOCK_MONOTONIC)};
}

static struct stamp since(struct stamp t)
{
	struct stamp n = now();
	return (struct stamp){n.cpu - t.cpu, n.wall - t.wall};
}

static volatile int sink;

__attribute__((noinline)) static struct stamp empty(long n)
{
	struct stamp t = now();
	for (long i = 0; i < n; i++)
		__asm__ volatile("" ::: "memory");
	return since(t);
}

__attribute__((noinline)) static struct stamp pair(long n)
{
	struct stamp t = now();
	for (long i = 0; i < n; i++) {
		leakpath_scope_begin("request");
		__asm__ volatile("" ::: "memory");
		leakpath_scope_end();
	}
	return since(t);
}

__attribute__((noinline)) static struct stamp alloc(long n, int scoped)
{
	struct stamp t = now();
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
	return since(t);
}

static int warm;

static void settle(struct stamp (*f)(long, int), long n, int arg)
{
	if (warm) {
		f(8 * n, arg);
		usleep(200000);
	}
}

static struct stamp pair2(long n, int unused)
{
	(void)unused;
	return pair(n);
}

static void report(const char *kind, struct stamp t, struct stamp base, long n)
{
	printf("%s %.2f %.2f\n", kind, (t.cpu - base.cpu) / n, (t.wall - base.wall) / n);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	if (n <= 0)
		return 2;
	warm = argc > 2;
	free(malloc(1)); /* the agent's first-use work, before timing */
	struct stamp base = empty(n);
	settle(pair2, n, 0);
	report("pair", pair(n), base, n);
	settle(alloc, n, 0);
	report("malloc", alloc(n, 0), base, n);
	settle(alloc, n, 1);
	report("inscope", alloc(n, 1), base, n);
	return 0;
}
