/* seed: the worked example of JP2009-217617 (figs. 6-15) as a program that repeats
 * its work. funcA allocates the request's buffer; funcB handles it: on
 * error condition 1 it returns without freeing (the leak), on error
 * condition 2 it frees the buffer through sub1, else it works on it and
 * frees it at its end. main calls funcB ITER times (default 3000), 1 ms
 * apart, and prints how many requests failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long worked;

__attribute__((noinline)) char *funcA(int i)
{
	char *p = malloc(64);
	snprintf(p, 64, "request %d", i);
	return p;
}

__attribute__((noinline)) void sub1(char *p)
{
	free(p);
}

__attribute__((noinline)) void sub2(char *p)
{
	worked += strlen(p);
}

__attribute__((noinline)) int funcB(int i)
{
	char *p = funcA(i);
	if (i % 7 == 3) /* error condition 1: LEAK */
		return -1;
	if (i % 5 == 1) { /* error condition 2 */
		sub1(p);
		return -2;
	}
	sub2(p);
	free(p);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, failed = 0;
	for (int i = 0; i < n; i++) {
		if (funcB(i) != 0)
			failed++;
		usleep(1000);
	}
	printf("%d requests, %d failed\n", n, failed);
	return 0;
}
