/* libleak_app: calls libleak_lib.c's parser in a loop. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int lib_parse(int i);

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		bad += lib_parse(i) < 0;
		usleep(1000);
	}
	printf("%d bad of %d\n", bad, n);
	return 0;
}
