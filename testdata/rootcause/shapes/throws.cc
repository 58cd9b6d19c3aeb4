// throws: a callee throws on bad input; the exception skips the delete in
// the handler, and main catches it.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>

struct Item {
	int id;
	long payload[4];
};

static long handled;

__attribute__((noinline)) static void check(const Item *it)
{
	if (it->id % 9 == 4) // LEAK: throws past the delete
		throw std::runtime_error("bad item");
}

__attribute__((noinline)) static int handle(int i)
{
	Item *it = new Item{i, {}};
	check(it);
	handled += it->id;
	delete it;
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? std::atoi(argv[1]) : 3000, bad = 0;
	for (int i = 0; i < n; i++) {
		try {
			handle(i);
		} catch (const std::exception &) {
			bad++;
		}
		usleep(1000);
	}
	std::printf("%d bad, handled %ld\n", bad, handled);
	return 0;
}
