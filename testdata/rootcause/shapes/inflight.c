/* inflight: requests in flight are linked in a table; complete() evicts
 * (unlinks and frees) an entry, but forgets to for a timed-out one, which
 * stays linked: reachable, and growing. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct entry {
	struct entry *next, **prev;
	int id;
	int timed_out;
};

static struct entry *table;
static long done;

__attribute__((noinline)) static struct entry *entry_new(int id)
{
	struct entry *e = malloc(sizeof *e);
	e->id = id;
	e->timed_out = 0;
	e->next = table;
	e->prev = &table;
	if (table)
		table->prev = &e->next;
	table = e;
	return e;
}

__attribute__((noinline)) static void evict(struct entry *e)
{
	*e->prev = e->next;
	if (e->next)
		e->next->prev = e->prev;
	free(e);
}

__attribute__((noinline)) static void complete(struct entry *e)
{
	if (e->timed_out) /* LEAK: a timed-out entry is not evicted */
		return;
	done++;
	evict(e);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	static const int late[6] = {0, 1, 0, 0, 0, 0};
	for (int i = 0; i < n; i++) {
		struct entry *e = entry_new(i);
		e->timed_out = late[i % 6];
		complete(e);
		usleep(1000);
	}
	int left = 0;
	for (struct entry *e = table; e; e = e->next)
		left++;
	printf("%ld done, %d left in flight\n", done, left);
	return 0;
}
