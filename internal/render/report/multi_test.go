package report

import "testing"

func TestRankList(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1, 2, 3}, "0-3"},
		{[]int{3, 0, 2, 1}, "0-3"},
		{[]int{0, 2, 5, 6, 7, 9}, "0, 2, 5-7, 9"},
		{[]int{1, 1, 2}, "1-2"},
		{[]int{4, 5}, "4-5"},
	} {
		if got := rankList(c.in); got != c.want {
			t.Errorf("rankList(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWhere(t *testing.T) {
	r := func(n int) *int { return &n }
	named := &part{name: "x.lpt"}
	for _, c := range []struct {
		parts []*part
		want  string
	}{
		{[]*part{{rank: r(2)}}, "in rank 2"},
		{[]*part{{rank: r(0)}, {rank: r(1)}, {rank: r(2)}, {rank: r(3)}}, "in 4 ranks (0-3)"},
		{[]*part{{rank: r(0)}, named, {rank: r(2)}}, "in 3 traces (ranks 0, 2)"},
		{[]*part{{rank: r(5)}, named}, "in 2 traces (rank 5)"},
		{[]*part{named}, "in 1 trace"},
		{[]*part{named, named}, "in 2 traces"},
	} {
		if got := where(c.parts); got != c.want {
			t.Errorf("where = %q, want %q", got, c.want)
		}
	}
}
