/* Stand-in for compiler-rt's test helper: prints n pointers after str. */
#include <stdarg.h>
#include <stdio.h>
static inline void print_address(const char *str, int n, ...) {
  va_list ap;
  va_start(ap, n);
  fprintf(stderr, "%s", str);
  while (n--)
    fprintf(stderr, "%p ", va_arg(ap, void *));
  fprintf(stderr, "\n");
  va_end(ap);
}
