/* inflight_mt: the main thread starts requests, a completion thread
 * completes them: complete() unlinks every entry but frees only those
 * that did not time out (it forgets evict for the others). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct entry {
	struct entry *next;
	int id;
	int timed_out;
};

static struct entry *head, **tail = &head;
static int stop;
static long done, late;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static struct entry *entry_new(int id)
{
	static const int slow[6] = {0, 0, 1, 0, 0, 0};
	struct entry *e = malloc(sizeof *e);
	e->id = id;
	e->timed_out = slow[id % 6];
	e->next = NULL;
	return e;
}

__attribute__((noinline)) static void evict(struct entry *e)
{
	done++;
	free(e);
}

__attribute__((noinline)) static void complete(struct entry *e)
{
	if (e->timed_out) { /* LEAK: unlinked, never evicted */
		late++;
		return;
	}
	evict(e);
}

static void *completer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (!head && !stop)
			pthread_cond_wait(&cv, &mu);
		if (!head)
			break;
		struct entry *e = head;
		head = e->next;
		if (!head)
			tail = &head;
		pthread_mutex_unlock(&mu);
		complete(e);
		pthread_mutex_lock(&mu);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	pthread_t t;
	pthread_create(&t, NULL, completer, NULL);
	for (int i = 0; i < n; i++) {
		struct entry *e = entry_new(i);
		pthread_mutex_lock(&mu);
		*tail = e;
		tail = &e->next;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
		usleep(1000);
	}
	pthread_mutex_lock(&mu);
	stop = 1;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	pthread_join(t, NULL);
	printf("%ld done, %ld late\n", done, late);
	return 0;
}
