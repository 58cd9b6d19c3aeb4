/* registry: a batch loop keeps its items in a registry that retire()
 * frees much later, from main; when the registry is full, urgent items
 * are handled and freed at once, the others dropped without a free. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CAP 32

struct item {
	int v;
	int urgent;
};

static struct item *reg[CAP];
static int nreg;
static long sum;

__attribute__((noinline)) static void retire(void)
{
	for (int k = 0; k < nreg; k++) {
		sum += reg[k]->v;
		free(reg[k]);
	}
	nreg = 0;
}

__attribute__((noinline)) static void batch(int i)
{
	for (int j = 0; j < 4; j++) {
		struct item *it = malloc(sizeof *it);
		it->v = i * 4 + j;
		it->urgent = (it->v % 3) != 1;
		if (nreg < CAP) {
			reg[nreg++] = it;
		} else if (it->urgent) { /* LEAK: not urgent, dropped */
			sum += it->v;
			free(it);
		}
	}
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0; i < n; i++) {
		batch(i);
		if (i % 50 == 49)
			retire();
		usleep(1000);
	}
	retire();
	printf("sum %ld\n", sum);
	return 0;
}
