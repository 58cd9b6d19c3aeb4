/* threads: 8 worker threads spin updating counters and create and join
 * short-lived threads all the time. Phase 1 is a fixed amount of work that
 * makes the checksum printed at the end; phase 2 keeps every thread busy
 * the same way until stdin reaches end of file, without changing it.
 *
 * First line of output: "magic ADDR counters ADDR workers N", where ADDR
 * of magic holds 0x6c65616b70617468 for the whole run.
 * Usage: threads [PHASE1_ITERATIONS] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORKERS 8

volatile uint64_t magic = 0x6c65616b70617468ull; /* "leakpath" */
struct slot { volatile uint64_t count; char pad[56]; };
struct slot counters[WORKERS];
static volatile int stop;
static long iterations = 200000;

static void *shortlived(void *arg) {
	uint64_t x = (uint64_t)(uintptr_t)arg, h = 1469598103934665603ull;
	for (int i = 0; i < 200; i++) { h ^= x + i; h *= 1099511628211ull; }
	return (void *)(uintptr_t)h;
}

static uint64_t step(int w, long i, uint64_t h) {
	/* Register-heavy arithmetic: a tracer that disturbed registers would
	 * change the result. */
	uint64_t a = h, b = (uint64_t)i * 0x9e3779b97f4a7c15ull, c = w + 1;
	for (int k = 0; k < 64; k++) {
		a = (a ^ b) * 0xff51afd7ed558ccdull + c;
		b = (b << 7 | b >> 57) + a;
		c += a >> 11;
	}
	return a ^ b ^ c;
}

static void *worker(void *arg) {
	int w = (int)(intptr_t)arg;
	uint64_t h = (uint64_t)w;
	long i;
	for (i = 0; i < iterations || !stop; i++) {
		uint64_t v = step(w, i, h);
		counters[w].count++;
		if (i % 50 == 0) {
			pthread_t t;
			void *r;
			if (pthread_create(&t, NULL, shortlived, (void *)(uintptr_t)v) != 0) abort();
			if (pthread_join(t, &r) != 0) abort();
			v ^= (uint64_t)(uintptr_t)r;
		}
		if (i < iterations) h = v; /* phase 1 only */
	}
	return (void *)(uintptr_t)h;
}

int main(int argc, char **argv) {
	if (argc > 1) iterations = atol(argv[1]);
	pthread_t t[WORKERS];
	for (int w = 0; w < WORKERS; w++)
		if (pthread_create(&t[w], NULL, worker, (void *)(intptr_t)w) != 0) abort();
	/* After the workers exist: a tracer that seizes now finds them all. */
	printf("magic %p counters %p workers %d\n", (void *)&magic, (void *)counters, WORKERS);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {}
	stop = 1;
	uint64_t sum = 0;
	for (int w = 0; w < WORKERS; w++) {
		void *r;
		pthread_join(t[w], &r);
		sum = sum * 31 + (uint64_t)(uintptr_t)r;
	}
	printf("checksum %016llx magic %llx\n", (unsigned long long)sum, (unsigned long long)magic);
	return 0;
}
