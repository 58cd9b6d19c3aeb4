/* execer: generation 1 starts 4 spinning threads and prints
 * "magic ADDR gen 1"; when a line arrives on stdin, thread 2 calls execve
 * on this program (so the exec comes from a thread that is not the
 * leader). Generation 2 prints "magic ADDR gen 2" (its magic holds another
 * value), starts 2 threads, and at end of file on stdin prints
 * "done gen 2" and exits. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

volatile uint64_t magic;
static volatile int go;

static void *spin(void *arg) {
	long w = (long)arg;
	volatile unsigned long x = 0;
	for (;;) {
		x++;
		if (w == 2 && go) {
			char *argv[] = {"execer", "gen2", NULL};
			execv("/proc/self/exe", argv);
			perror("execv");
			_exit(3);
		}
	}
}

int main(int argc, char **argv) {
	int gen = argc > 1 && strcmp(argv[1], "gen2") == 0 ? 2 : 1;
	magic = gen == 1 ? 0x1111111111111111ull : 0x2222222222222222ull;
	pthread_t t;
	for (long w = 0; w < (gen == 1 ? 4 : 2); w++) pthread_create(&t, NULL, spin, (void *)(w + 1));
	printf("magic %p gen %d\n", (void *)&magic, gen);
	fflush(stdout);
	char buf[64];
	if (gen == 1) {
		if (read(0, buf, sizeof buf) > 0) go = 1;
		for (;;) pause();
	}
	while (read(0, buf, sizeof buf) > 0) {}
	printf("done gen 2 magic %llx\n", (unsigned long long)magic);
	return 0;
}
