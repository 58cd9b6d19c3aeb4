/* lib.c: shared-library fixture for internal/symbols/symbolize. */
#include <stdlib.h>
#include <string.h>

static inline __attribute__((always_inline)) char *lib_copy(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

static __attribute__((noinline)) size_t lib_len(const char *s)
{
	return strlen(s);
}

__attribute__((visibility("default"))) char *lib_strdup(const char *s)
{
	return lib_copy(s, lib_len(s));
}

__attribute__((visibility("default"))) void *lib_alloc_table(int n)
{
	void **t = calloc((size_t)n, sizeof *t);
	for (int i = 0; i < n; i++)
		t[i] = lib_strdup("entry");
	return t;
}

__attribute__((visibility("default"))) void lib_free_table(void *p, int n)
{
	void **t = p;
	for (int i = 0; i < n; i++)
		free(t[i]);
	free(t);
}
