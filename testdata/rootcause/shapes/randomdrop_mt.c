/* randomdrop_mt: a worker thread hands each block the main thread gives
 * it to handle(), which drops one in eight at random: the drop is decided
 * on the thread that frees, in a function that takes the block, but on
 * nothing the block holds, so no root cause may be claimed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct node {
	struct node *next;
	int v;
};

static struct node *head, **tail = &head;
static int stop;
static long freed, dropped;
static unsigned seed = 12345;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void handle(struct node *nd)
{
	if (rand_r(&seed) % 8 == 0) {
		dropped++;
		return;
	}
	freed++;
	free(nd);
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!head && !stop)
			pthread_cond_wait(&cv, &mu);
		if (!head)
			break;
		struct node *nd = head;
		head = nd->next;
		if (!head)
			tail = &head;
		pthread_mutex_unlock(&mu);
		handle(nd);
		pthread_mutex_lock(&mu);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

__attribute__((noinline)) static void submit(int i)
{
	struct node *nd = malloc(sizeof *nd);
	nd->v = i;
	nd->next = NULL;
	pthread_mutex_lock(&mu);
	*tail = nd;
	tail = &nd->next;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	for (int i = 0; i < n; i++) {
		submit(i);
		usleep(1000);
	}
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(t, NULL);
	printf("%ld freed, %ld dropped\n", freed, dropped);
	return 0;
}
