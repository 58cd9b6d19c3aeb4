/* stepme: a thread to step while another runs. The worker thread calls
 * target() in a loop and counts its calls; the spinner thread counts
 * without end; the checker calls target() too and counts the results
 * that are wrong. With the argument "fork", a forker thread forks
 * children that call target() and exit 0 if it gave the right result,
 * and counts the children that did not (killed by a SIGTRAP, say); with
 * "vfork", the same with vfork (the child runs in the parent's memory).
 * Prints "tid TID target ADDR spin ADDR calls ADDR tid2 TID tid3 TID"
 * (tid3: the forker, or 0), then, at end of file on stdin, stops them,
 * prints "wrong N", "bad N" and "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile unsigned long calls, spins, sum, wrong, bad;
static volatile int stop;
static volatile pid_t worker_tid, checker_tid, forker_tid;
static int use_vfork;

__attribute__((noinline)) int target(int x)
{
	if (x & 1)
		return x * 3;
	return x + 7;
}

static void *worker(void *arg)
{
	(void)arg;
	worker_tid = gettid();
	for (int i = 0; !stop; i++) {
		sum += target(i);
		calls++;
	}
	return NULL;
}

static void *checker(void *arg)
{
	(void)arg;
	checker_tid = gettid();
	for (int i = 0; !stop; i++)
		wrong += target(i) != (i & 1 ? i * 3 : i + 7);
	return NULL;
}

static void *forker(void *arg)
{
	(void)arg;
	forker_tid = gettid();
	while (!stop) {
		pid_t pid = use_vfork ? vfork() : fork();
		if (pid == 0)
			_exit(target(3) == 9 && target(4) == 11 ? 0 : 1);
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
		usleep(1000);
	}
	return NULL;
}

static void *spinner(void *arg)
{
	(void)arg;
	while (!stop)
		spins++;
	return NULL;
}

int main(int argc, char **argv)
{
	use_vfork = argc > 1 && strcmp(argv[1], "vfork") == 0;
	int forking = use_vfork || (argc > 1 && strcmp(argv[1], "fork") == 0);
	pthread_t w, s, c, f;
	pthread_create(&w, NULL, worker, NULL);
	pthread_create(&s, NULL, spinner, NULL);
	pthread_create(&c, NULL, checker, NULL);
	if (forking)
		pthread_create(&f, NULL, forker, NULL);
	while (!worker_tid || !checker_tid || (forking && !forker_tid))
		usleep(1000);
	printf("tid %d target %p spins %p calls %p tid2 %d tid3 %d\n", (int)worker_tid, (void *)target, (void *)&spins,
	       (void *)&calls, (int)checker_tid, (int)forker_tid);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {
	}
	stop = 1;
	pthread_join(w, NULL);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	if (forking)
		pthread_join(f, NULL);
	printf("wrong %lu\nbad %lu\ndone\n", wrong, bad);
	return 0;
}
