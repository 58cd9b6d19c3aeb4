/* libleak_lib: a shared library whose parser leaks its buffer on a
 * malformed input (built with -shared -fPIC for libleak_app.c). */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) int lib_parse(int i)
{
	char *buf = malloc(56);
	memset(buf, 'x', 56);
	if (i % 7 == 6) /* LEAK */
		return -1;
	int n = buf[0];
	free(buf);
	return n;
}
