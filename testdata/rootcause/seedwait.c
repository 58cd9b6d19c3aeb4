/* seedwait: seed.c's requests, made until stdin ends, then "done" on
 * stdout: for tests that act while it runs, whatever its pace. seed.c is
 * included whole, so its functions and lines are the ones reported. */
#include <poll.h>

#define main seed_main
#include "seed.c"
#undef main

/* stdin_ended reports whether stdin is at its end (or gone). */
static int stdin_ended(void)
{
	struct pollfd p = {.fd = 0, .events = POLLIN};
	char c;
	if (poll(&p, 1, 0) == 0)
		return 0;
	return read(0, &c, 1) <= 0;
}

int main(void)
{
	for (int i = 0; !stdin_ended(); i++) {
		funcB(i);
		usleep(1000);
	}
	printf("done\n");
	return 0;
}
