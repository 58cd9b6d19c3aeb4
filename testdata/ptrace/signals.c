/* signals: counts handler runs of signals the program gets from itself.
 * A tracer that swallowed or duplicated a signal changes the counts.
 *
 * Each round arms a one-shot 1 ms ITIMER_REAL and waits for its SIGALRM
 * (the next alarm comes only after the previous one was handled), sends
 * itself SIGUSR1 with kill and waits for the handler, every 10 rounds
 * queues SIGRTMIN with a value, every 50 rounds forks a child that exits
 * (SIGCHLD). A signal not handled within 60 s is counted as lost (a hang
 * guard, not a latency: a loaded machine may run the handler late). A second
 * thread spins meanwhile, so process-directed signals may land in either.
 * Prints "ready" first, then one line of counts at the end.
 * Usage: signals [ROUNDS] */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_long alarms, usr1, rt, rtsum, chld;
static atomic_int done;

static void on_alrm(int s) { (void)s; atomic_fetch_add(&alarms, 1); }
static void on_usr1(int s) { (void)s; atomic_fetch_add(&usr1, 1); }
static void on_chld(int s) { (void)s; atomic_fetch_add(&chld, 1); }
static void on_rt(int s, siginfo_t *si, void *u) {
	(void)s; (void)u;
	atomic_fetch_add(&rt, 1);
	atomic_fetch_add(&rtsum, si->si_value.sival_int);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* wait_for waits until *c reaches want; returns 0 if it did not in 60 s. */
static int wait_for(atomic_long *c, long want) {
	double end = now() + 60;
	while (atomic_load(c) < want) {
		if (now() > end) return 0;
		struct timespec ts = {0, 50000};
		nanosleep(&ts, NULL);
	}
	return 1;
}

static void *spin(void *arg) {
	(void)arg;
	volatile unsigned long x = 0;
	while (!atomic_load(&done)) x++;
	return NULL;
}

static void handle(int sig, void (*h)(int)) {
	struct sigaction sa = {0};
	sa.sa_handler = h;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
	long rounds = argc > 1 ? atol(argv[1]) : 1000;
	long lost = 0, forks = 0, rtsent = 0, rtvals = 0;
	handle(SIGALRM, on_alrm);
	handle(SIGUSR1, on_usr1);
	handle(SIGCHLD, on_chld);
	struct sigaction sa = {0};
	sa.sa_sigaction = on_rt;
	sa.sa_flags = SA_RESTART | SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGRTMIN, &sa, NULL);
	pthread_t th;
	pthread_create(&th, NULL, spin, NULL);
	printf("ready\n");
	fflush(stdout);
	for (long i = 0; i < rounds; i++) {
		struct itimerval it = {{0, 0}, {0, 1000}};
		setitimer(ITIMER_REAL, &it, NULL);
		if (!wait_for(&alarms, i + 1)) lost++;
		kill(getpid(), SIGUSR1);
		if (!wait_for(&usr1, i + 1)) lost++;
		if (i % 10 == 0) {
			union sigval v = {.sival_int = (int)i};
			sigqueue(getpid(), SIGRTMIN, v);
			rtsent++;
			rtvals += i;
			if (!wait_for(&rt, rtsent)) lost++;
		}
		if (i % 50 == 0) {
			pid_t p = fork();
			if (p == 0) _exit(0);
			forks++;
			if (!wait_for(&chld, forks)) lost++;
			waitpid(p, NULL, 0);
		}
	}
	atomic_store(&done, 1);
	pthread_join(th, NULL);
	printf("alarms=%ld usr1=%ld rt=%ld/%ld rtsum=%ld/%ld chld=%ld/%ld lost=%ld\n",
	       atomic_load(&alarms), atomic_load(&usr1), atomic_load(&rt), rtsent,
	       atomic_load(&rtsum), rtvals, atomic_load(&chld), forks, lost);
	return 0;
}
