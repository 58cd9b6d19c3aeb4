// shop.cpp: C++ fixture for internal/symbols/symbolize: namespaces, member functions,
// a template, a lambda, operator new, and inlined small functions.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shop {

struct Item {
	std::string name;
	int price;
};

class Cart {
public:
	__attribute__((noinline)) void add(int price);
	__attribute__((noinline)) int total() const;
	int count() const { return static_cast<int>(items_.size()); }

private:
	std::vector<Item *> items_;
};

void Cart::add(int price)
{
	Item *it = new Item{"item" + std::to_string(price), price};
	items_.push_back(it);
}

int Cart::total() const
{
	int t = 0;
	for (const Item *it : items_)
		t += it->price;
	return t;
}

template <typename T>
__attribute__((noinline)) T *make_array(std::size_t n, T init)
{
	T *a = new T[n];
	for (std::size_t i = 0; i < n; i++)
		a[i] = init;
	return a;
}

namespace {
__attribute__((noinline)) std::map<int, std::string> *index_names(int n)
{
	auto *m = new std::map<int, std::string>;
	for (int i = 0; i < n; i++)
		(*m)[i] = std::to_string(i);
	return m;
}
} // namespace

} // namespace shop

int main(int argc, char **argv)
{
	(void)argv;
	shop::Cart cart;
	for (int i = 0; i < argc + 3; i++)
		cart.add(i * 10);
	int *ints = shop::make_array<int>(8, argc);
	double *dbls = shop::make_array<double>(4, 1.5);
	auto square = [&](int x) __attribute__((noinline)) {
		auto *p = new std::unique_ptr<int>(new int(x * x));
		return p;
	};
	std::vector<std::function<int(int)>> fns;
	fns.push_back([](int x) { return x + 1; });
	auto *sq = square(argc);
	auto *names = shop::index_names(argc + 2);
	std::printf("%d %d %d %g %d %zu\n", cart.total(), cart.count(), ints[0], dbls[0], **sq,
	    names->size());
	std::sort(ints, ints + 8, [](int a, int b) { return a > b; });
	return fns[0](0);
}
