/* exiter: 4 threads spin and create short-lived threads; after MS
 * milliseconds one of them calls exit(CODE). With MS "-", that thread
 * instead waits for end of file on stdin and then calls exit(CODE): the
 * test decides when, however slow the machine. With a third argument
 * "main", the main thread returns CODE instead while the others still
 * run; with "leaderexit", the main thread calls pthread_exit at once (the
 * process lives on without its leader until the exit). Prints "ready"
 * first.
 * Usage: exiter MS|- CODE [main|leaderexit] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long ms;
static int code, from_main, leaderexit;
static volatile unsigned long counts[4];

static void *nothing(void *a) { return a; }

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
	long w = (long)arg;
	if (w == 1 && ms < 0) {
		char buf[64];
		while (read(0, buf, sizeof buf) > 0) {
		}
		exit(code);
	}
	double end = now() + ms / 1000.0;
	for (;;) {
		counts[w]++;
		if (counts[w] % 1000 == 0) {
			pthread_t t;
			pthread_create(&t, NULL, nothing, NULL);
			pthread_join(t, NULL);
		}
		if (w == 1 && !from_main && now() > end) exit(code);
	}
}

int main(int argc, char **argv) {
	if (argc < 3) return 2;
	ms = strcmp(argv[1], "-") == 0 ? -1 : atol(argv[1]);
	code = atoi(argv[2]);
	from_main = argc > 3 && strcmp(argv[3], "main") == 0;
	leaderexit = argc > 3 && strcmp(argv[3], "leaderexit") == 0;
	pthread_t t;
	for (long w = 0; w < 4; w++) pthread_create(&t, NULL, worker, (void *)w);
	printf("ready\n");
	fflush(stdout);
	if (leaderexit) pthread_exit(NULL);
	if (from_main) {
		usleep(ms * 1000);
		return code;
	}
	for (;;) pause();
}
