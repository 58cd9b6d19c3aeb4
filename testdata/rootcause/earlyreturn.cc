// earlyreturn: a C++ handler whose early return skips the delete.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

struct Request {
	int id;
	std::string name;
};

static long handled;

__attribute__((noinline)) int handle(int i)
{
	Request *r = new Request{i, "req"};
	if (r->id % 10 == 3) // LEAK
		return -1;
	handled += r->id;
	delete r;
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		bad += handle(i) != 0;
		usleep(1000);
	}
	std::printf("%d bad, handled %ld\n", bad, handled);
	return 0;
}
