/* signals: twobranches's leak while a timer signal interrupts the work
 * every 200 us; its handler allocates and frees. The output does not
 * depend on how many signals came. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;
static long sum;

static void on_alarm(int sig)
{
	(void)sig;
	free(malloc(16));
	ticks++;
}

__attribute__((noinline)) int serve(int i)
{
	int *v = malloc(40);
	v[0] = i;
	for (int k = 0; k < 50; k++)
		sum += k ^ i;
	if (i % 9 == 4) /* LEAK */
		return -1;
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	/* glibc sets up a thread's cache on its first malloc, under the
	 * arena's lock: the allocating handler must not come then. */
	free(malloc(16));
	struct itimerval it = {{0, 200}, {0, 200}};
	setitimer(ITIMER_REAL, &it, NULL);
	for (int i = 0; i < n; i++) {
		bad += serve(i) != 0;
		struct timespec ts = {0, 1000000};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	printf("%d bad of %d, sum %ld\n", bad, n, sum);
	return 0;
}
