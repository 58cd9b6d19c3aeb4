/* cxxmap.cc - C++ containers at -O2 (libstdc++ without frame pointers):
 * N rounds (default 200,000; argv[1]) each make a string key, a node with
 * a string and a vector, insert them in a std::map and an unordered_map,
 * and every third round erase the map's first entry and a hash entry;
 * everything left is freed by the destructors at exit, in tree order.
 * ~1.8M allocations, most of them outliving the agent's window of pending
 * blocks. Prints a checksum so the work cannot be elided. */
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

struct Node {
	std::string name;
	std::vector<int> v;
};

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200000;
	std::map<std::string, std::unique_ptr<Node>> m;
	std::unordered_map<int, std::string> u;
	unsigned long sum = 0;
	for (int i = 0; i < n; i++) {
		std::string k = "key-" + std::to_string((long)i * 7919 % n) + "-suffix-long-enough";
		auto node = std::make_unique<Node>();
		node->name = k + k;
		node->v.resize(i % 17);
		m[k] = std::move(node);
		u[i] = k;
		if (i % 3 == 0) {
			m.erase(m.begin());
			u.erase(i / 2);
		}
	}
	for (auto &p : m)
		sum += p.second->name.size() + p.second->v.size();
	printf("%lu %zu\n", sum, u.size());
	return 0;
}
