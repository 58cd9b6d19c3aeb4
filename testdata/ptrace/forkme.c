/* forkme: a thread to step while another forks. The worker thread calls
 * target() in a loop; the forker thread forks children that call
 * target() and exit 0 if it gave the right result, and counts the
 * children that did not exit 0 (killed by a SIGTRAP, say). Prints "tid
 * TID target ADDR forks ADDR tid2 TID", then, at end of file on stdin,
 * stops both and prints "bad N" and "done". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

volatile unsigned long calls, forks, bad, sum;
static volatile int stop;
static volatile pid_t worker_tid, forker_tid;

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

static void *forker(void *arg)
{
	(void)arg;
	forker_tid = gettid();
	while (!stop) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(target(3) == 9 && target(4) == 11 ? 0 : 1);
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
		forks++;
		usleep(1000);
	}
	return NULL;
}

int main(void)
{
	pthread_t w, f;
	pthread_create(&w, NULL, worker, NULL);
	pthread_create(&f, NULL, forker, NULL);
	while (!worker_tid || !forker_tid)
		usleep(1000);
	printf("tid %d target %p forks %p tid2 %d\n", (int)worker_tid, (void *)target, (void *)&forks, (int)forker_tid);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {
	}
	stop = 1;
	pthread_join(w, NULL);
	pthread_join(f, NULL);
	printf("bad %lu\ndone\n", bad);
	return 0;
}
