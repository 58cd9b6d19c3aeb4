package dwarftypes

import "testing"

func TestCanonName(t *testing.T) {
	for _, c := range [][2]string{
		{"std::pair<int const, long int>", "std::pair<int const, long>"},
		{"std::map<long unsigned int, short int>", "std::map<unsigned long, short>"},
		{"x<long long int, long long unsigned int, short unsigned int>", "x<long long, unsigned long long, unsigned short>"},
		{"std::vector<int, std::allocator<int> >", "std::vector<int, std::allocator<int>>"},
	} {
		if a, b := canonName(c[0]), canonName(c[1]); a != b {
			t.Errorf("canonName(%q) = %q, canonName(%q) = %q", c[0], a, c[1], b)
		}
	}
	if canonName("x<long>") == canonName("x<int>") {
		t.Errorf("different types, one name")
	}
}
