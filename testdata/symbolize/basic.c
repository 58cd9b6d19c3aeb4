/* basic.c: fixture for internal/symbols/symbolize. Plain C with out-of-line
 * functions, a static always_inline helper chain and a static function. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node {
	struct node *next;
	int value;
};

static inline __attribute__((always_inline)) struct node *alloc_node(int v)
{
	struct node *n = malloc(sizeof *n);
	if (n == NULL)
		abort();
	n->value = v;
	n->next = NULL;
	return n;
}

static inline __attribute__((always_inline)) struct node *push(struct node *head, int v)
{
	struct node *n = alloc_node(v);
	n->next = head;
	return n;
}

__attribute__((noinline)) struct node *build_list(int count)
{
	struct node *head = NULL;
	for (int i = 0; i < count; i++)
		head = push(head, i * 3);
	return head;
}

static __attribute__((noinline)) int sum_list(const struct node *n)
{
	int s = 0;
	for (; n != NULL; n = n->next)
		s += n->value;
	return s;
}

__attribute__((noinline)) char *dup_name(const char *name)
{
	size_t len = strlen(name);
	char *p = malloc(len + 1);
	memcpy(p, name, len + 1);
	return p;
}

__attribute__((noinline)) void free_list(struct node *n)
{
	while (n != NULL) {
		struct node *next = n->next;
		free(n);
		n = next;
	}
}

int main(int argc, char **argv)
{
	struct node *list = build_list(argc * 10);
	char *name = dup_name(argv[0]);
	printf("%s %d\n", name, sum_list(list));
	free_list(list);
	free(name);
	return 0;
}
