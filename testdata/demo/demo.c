/* demo.c - a small program that leaks, for `make demo`.
 *
 * A request loop parses "requests"; when a header is too long it returns
 * early and forgets the buffer it allocated. One cache entry is allocated
 * at start-up and never freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct config {
	char name[32];
	int workers;
};

static struct config *load_config(void)
{
	struct config *c = malloc(sizeof *c);
	strcpy(c->name, "demo");
	c->workers = 4;
	return c;
}

static int parse_request(const char *req, size_t hdr_len)
{
	char *buf = malloc(64);
	if (hdr_len > 48)
		return -1; /* the leak: buf is not freed on this path */
	memcpy(buf, req, hdr_len);
	buf[hdr_len] = 0;
	int n = (int)strlen(buf);
	free(buf);
	return n;
}

static int handle(int i)
{
	return parse_request("GET /index.html HTTP/1.1 Host: example.org", (size_t)(i % 7) * 10);
}

int main(void)
{
	struct config *c = load_config();
	int ok = 0, bad = 0;
	for (int i = 0; i < 100; i++) {
		if (handle(i) < 0)
			bad++;
		else
			ok++;
	}
	printf("%s: %d requests ok, %d rejected\n", c->name, ok, bad);
	return 0;
}
