/* crossthread: a producer hands blocks to a consumer thread, which frees
 * them; now and then the producer drops one instead of handing it over. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define QN 64
static void *q[QN];
static int qh, qt, done;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t room = PTHREAD_COND_INITIALIZER;
static long consumed;

static void *consumer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (qh == qt && !done)
			pthread_cond_wait(&cv, &mu);
		if (qh == qt && done)
			break;
		void *p = q[qt++ % QN];
		pthread_cond_signal(&room);
		pthread_mutex_unlock(&mu);
		free(p);
		consumed++;
		pthread_mutex_lock(&mu);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

__attribute__((noinline)) void produce(int i)
{
	long *p = malloc(32);
	*p = i;
	if (i % 8 == 5) /* LEAK */
		return;
	pthread_mutex_lock(&mu);
	while (qh - qt == QN) /* full: a slot not yet taken must not be overwritten */
		pthread_cond_wait(&room, &mu);
	q[qh++ % QN] = p;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	pthread_t t;
	pthread_create(&t, NULL, consumer, NULL);
	for (int i = 0; i < n; i++) {
		produce(i);
		usleep(1000);
	}
	pthread_mutex_lock(&mu);
	done = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(t, NULL);
	printf("consumed %ld of %d\n", consumed, n);
	return 0;
}
