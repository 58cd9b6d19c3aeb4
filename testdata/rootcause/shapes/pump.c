/* pump: a message pump in main, its helpers inlined; a flag makes
 * msg_destroy free the message shallowly, leaking its body. main ends by
 * exit(): it never returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHALLOW 1

struct msg {
	int kind;
	int flags;
	char *body;
};

static long bytes;

static inline struct msg *msg_new(int i)
{
	static const int kinds[8] = {0, 0, 0, 0, 0, SHALLOW, 0, 0};
	struct msg *m = malloc(sizeof *m);
	m->kind = i % 4;
	m->flags = kinds[i % 8];
	m->body = malloc(40);
	memset(m->body, 'x', 40);
	return m;
}

static inline void msg_destroy(struct msg *m)
{
	if (!(m->flags & SHALLOW)) /* LEAK: a shallow destroy keeps the body */
		free(m->body);
	free(m);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000;
	for (int i = 0;; i++) {
		struct msg *m = msg_new(i);
		bytes += m->body[i % 40] + m->kind;
		msg_destroy(m);
		usleep(1000);
		if (i + 1 == n) {
			printf("%d messages, %ld\n", n, bytes);
			exit(0);
		}
	}
}
