/* allocloop.c - the allocation-heavy loop of the speed benchmarks:
 * N allocations (default 2,000,000; argv[1]) of mixed sizes made at the
 * bottom of a call chain ~14 frames deep, each freed a little later (a
 * window of 64 live blocks), optionally on T threads (argv[2]) that free
 * each other's blocks. Prints a checksum so the work cannot be elided. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static long total = 2000000;
static int threads = 1;
static void *volatile handoff[WINDOW]; /* blocks passed between threads */

struct ctx {
	unsigned long seed;
	unsigned long sum;
	void *live[WINDOW];
	long n;
	int id;
};

static __attribute__((noinline)) void step(struct ctx *c)
{
	c->seed = c->seed * 6364136223846793005ul + 1442695040888963407ul;
	size_t size = 16 + (c->seed >> 33) % 496;
	if ((c->seed >> 20) % 16 == 0)
		size *= 16; /* now and then a bigger one */
	unsigned slot = (unsigned)(c->n % WINDOW);
	void *p = malloc(size);
	memset(p, (int)c->n, 8);
	c->sum += ((unsigned char *)p)[3];
	if (threads > 1 && (c->n & 7) == 0) {
		/* cross-thread: free what another thread left, leave ours */
		void *q = __atomic_exchange_n(&handoff[slot], c->live[slot], __ATOMIC_ACQ_REL);
		free(q);
	} else {
		free(c->live[slot]);
	}
	c->live[slot] = p;
	c->n++;
}

#define LEVEL(name, next) \
	static __attribute__((noinline)) void name(struct ctx *c, int k) \
	{ for (int i = 0; i < k; i++) next(c, 1); __asm__ volatile("" ::: "memory"); }

static __attribute__((noinline)) void l0(struct ctx *c, int k) { for (int i = 0; i < k; i++) step(c); __asm__ volatile("" ::: "memory"); }
LEVEL(l1, l0) LEVEL(l2, l1) LEVEL(l3, l2) LEVEL(l4, l3) LEVEL(l5, l4)
LEVEL(l6, l5) LEVEL(l7, l6) LEVEL(l8, l7) LEVEL(l9, l8) LEVEL(l10, l9) LEVEL(l11, l10)

static void *run(void *arg)
{
	struct ctx *c = arg;
	long per = total / threads;
	/* four callers of the chain, so there are a few distinct stacks */
	while (c->n < per) {
		switch (c->n / 1000 % 4) {
		case 0: l11(c, 1); break;
		case 1: l10(c, 1); break;
		case 2: l9(c, 1); break;
		default: l11(c, 1); break;
		}
	}
	for (int i = 0; i < WINDOW; i++)
		free(c->live[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		total = atol(argv[1]);
	if (argc > 2)
		threads = atoi(argv[2]);
	if (threads < 1 || threads > 64)
		return 2;
	struct ctx c[64];
	pthread_t th[64];
	memset(c, 0, sizeof c);
	for (int t = 0; t < threads; t++) {
		c[t].seed = 42 + (unsigned long)t;
		c[t].id = t;
		pthread_create(&th[t], NULL, run, &c[t]);
	}
	unsigned long sum = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		sum += c[t].sum;
	}
	for (int i = 0; i < WINDOW; i++)
		free(handoff[i]);
	printf("%lu\n", sum);
	return 0;
}
