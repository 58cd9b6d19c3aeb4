/* stepme: a thread to step while another runs. The worker thread calls
 * target() in a loop and counts its calls; the spinner thread counts
 * without end; the checker calls target() too and counts the results
 * that are wrong. Prints "tid TID target ADDR spin ADDR calls ADDR tid2
 * TID", then, at end of file on stdin, stops them, prints "wrong N" and
 * "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

volatile unsigned long calls, spins, sum, wrong;
static volatile int stop;
static volatile pid_t worker_tid, checker_tid;

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

static void *spinner(void *arg)
{
	(void)arg;
	while (!stop)
		spins++;
	return NULL;
}

int main(void)
{
	pthread_t w, s, c;
	pthread_create(&w, NULL, worker, NULL);
	pthread_create(&s, NULL, spinner, NULL);
	pthread_create(&c, NULL, checker, NULL);
	while (!worker_tid || !checker_tid)
		usleep(1000);
	printf("tid %d target %p spins %p calls %p tid2 %d\n", (int)worker_tid, (void *)target, (void *)&spins, (void *)&calls,
	       (int)checker_tid);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {
	}
	stop = 1;
	pthread_join(w, NULL);
	pthread_join(s, NULL);
	pthread_join(c, NULL);
	printf("wrong %lu\ndone\n", wrong);
	return 0;
}
