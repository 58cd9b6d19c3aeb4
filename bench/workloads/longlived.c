/* longlived.c - the allocation loop whose blocks outlive the agent's
 * fold window: N allocations (default 2,000,000; argv[1]) of mixed sizes
 * made 12 to 15 frames deep, each stored in a random slot of a ring of
 * 1,024 whose block it frees (so a block lives ~1,000 allocations, freed
 * in random order); 1 in 100 replaced blocks is left unfreed (a leak).
 * On T threads (argv[2]) each does N/T of it with a ring of its own.
 * Prints a checksum so the work cannot be elided. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 1024

static long total = 2000000;
static int threads = 1;

struct ctx {
	unsigned long seed;
	unsigned long sum;
	void *live[RING];
	long n;
};

static unsigned long next(struct ctx *c)
{
	c->seed = c->seed * 6364136223846793005ul + 1442695040888963407ul;
	return c->seed >> 17;
}

static __attribute__((noinline)) void step(struct ctx *c)
{
	unsigned long r = next(c);
	size_t size = 16 + r % 496;
	if ((r >> 12) % 16 == 0)
		size *= 16; /* now and then a bigger one */
	unsigned slot = (unsigned)((r >> 20) % RING);
	void *p = malloc(size);
	memset(p, (int)c->n, 8);
	c->sum += ((unsigned char *)p)[3];
	if ((r >> 30) % 100 != 0)
		free(c->live[slot]); /* else the block leaks */
	c->live[slot] = p;
	c->n++;
}

#define LEVEL(name, next) \
	static __attribute__((noinline)) void name(struct ctx *c, int k) \
	{ for (int i = 0; i < k; i++) next(c, 1); __asm__ volatile("" ::: "memory"); }

static __attribute__((noinline)) void l0(struct ctx *c, int k) { for (int i = 0; i < k; i++) step(c); __asm__ volatile("" ::: "memory"); }
LEVEL(l1, l0) LEVEL(l2, l1) LEVEL(l3, l2) LEVEL(l4, l3) LEVEL(l5, l4)
LEVEL(l6, l5) LEVEL(l7, l6) LEVEL(l8, l7) LEVEL(l9, l8) LEVEL(l10, l9)
LEVEL(l11, l10) LEVEL(l12, l11) LEVEL(l13, l12)

static void *run(void *arg)
{
	struct ctx *c = arg;
	long per = total / threads;
	/* four depths of the chain, so there are a few distinct stacks */
	while (c->n < per) {
		switch (c->n / 1000 % 4) {
		case 0: l10(c, 1); break;
		case 1: l11(c, 1); break;
		case 2: l12(c, 1); break;
		default: l13(c, 1); break;
		}
	}
	for (int i = 0; i < RING; i++)
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
	static struct ctx c[64];
	pthread_t th[64];
	for (int t = 0; t < threads; t++) {
		c[t].seed = 42 + (unsigned long)t;
		pthread_create(&th[t], NULL, run, &c[t]);
	}
	unsigned long sum = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(th[t], NULL);
		sum += c[t].sum;
	}
	printf("%lu\n", sum);
	return 0;
}
