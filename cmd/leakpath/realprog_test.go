package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// realPrograms are programs no one here wrote, with a workload each.
var realPrograms = []struct {
	name  string
	argv  []string
	stdin string
}{
	{"sqlite3", []string{"sqlite3", ":memory:"}, `
create table t(id integer primary key, name text, score real);
with recursive c(x) as (select 1 union all select x+1 from c where x < 2000)
insert into t select x, 'name' || x, x * 1.5 from c;
create index t_name on t(name);
select count(*), sum(score) from t where name like 'name1%';
update t set score = score * 2 where id % 3 = 0;
delete from t where id % 7 = 0;
select count(*), max(score) from t;
`},
	{"python3", []string{"/usr/bin/python3", "-c", `
import json, collections
d = collections.Counter(w for w in ("alpha beta gamma delta " * 500).split())
s = json.dumps({k: [v] * 10 for k, v in d.items()}, sort_keys=True)
print(len(s), sorted(d.items())[:2])
`}, ""},
	{"gzip", []string{"gzip", "-9", "-c"}, "leakpath compresses nothing itself; gzip does. " + string(make([]byte, 100000))},
	{"git", []string{"git", "--no-pager", "log", "--oneline", "-3", "--format=%s"}, ""},
}

// TestRealProgramsMatchValgrind: on programs no one here wrote, the counts
// equal valgrind's "total heap usage" and "in use at exit" for the same
// run, and the program's output and exit code are byte-identical with and
// without leakpath.
func TestRealProgramsMatchValgrind(t *testing.T) {
	exhaustive(t, "each program runs under valgrind too; the fixtures' counts are checked without it")
	for _, p := range realPrograms {
		t.Run(p.name, func(t *testing.T) {
			if _, err := exec.LookPath(p.argv[0]); err != nil {
				t.Skipf("%s is not installed", p.argv[0])
			}
			argv := p.argv
			if p.name == "git" {
				// Run in this repository, which has commits.
				argv = append([]string{"git", "-C", root}, argv[1:]...)
			}
			var stdin []byte
			if p.stdin != "" {
				stdin = []byte(p.stdin)
			}
			env := testEnv(valgrindEnv(t)...)
			r := leakpathEnv(t, env, nil, stdin, argv...)
			sameBehaviour(t, r, nativeEnv(t, env, stdin, argv...))
			im := r.image(t, filepath.Base(argv[0]))
			a, f, b, lb, lk := valgrindCounts(t, stdin, argv...)
			tot := im.Totals
			t.Logf("%s: leakpath %d allocs, %d frees, %d bytes, %d bytes in %d blocks at exit; valgrind %d, %d, %d, %d in %d",
				p.name, tot.Allocations, tot.Frees, tot.AllocatedBytes, tot.LeakedBytes, tot.LeakedBlocks, a, f, b, lb, lk)
			if tot.Allocations != a || tot.Frees != f {
				t.Errorf("leakpath counts %d allocs, %d frees; valgrind %d, %d", tot.Allocations, tot.Frees, a, f)
			}
			if tot.AllocatedBytes != b || tot.LeakedBytes != lb || tot.LeakedBlocks != lk {
				t.Errorf("leakpath: %d bytes allocated, %d in %d blocks at exit; valgrind %d, %d in %d",
					tot.AllocatedBytes, tot.LeakedBytes, tot.LeakedBlocks, b, lb, lk)
			}
		})
	}
}
