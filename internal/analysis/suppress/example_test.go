package suppress_test

import (
	"fmt"

	"github.com/leakpath/leakpath/internal/analysis/suppress"
)

// Example combines a suppression file with a program's
// __lsan_default_suppressions and LSan's standard suppressions, in LSan's
// order, then suppresses a leak group.
func Example() {
	set, err := suppress.Parse([]byte("# third-party\nleak:libfontconfig\r\nleak:^parse_request$\n"), "app.supp")
	if err != nil {
		fmt.Println(err)
		return
	}
	def, err := suppress.Parse([]byte("leak:*init_tables*"), "__lsan_default_suppressions")
	if err != nil {
		fmt.Println(err)
		return
	}
	std, err := suppress.Parse([]byte(suppress.Standard), suppress.StandardSource)
	if err != nil {
		fmt.Println(err)
		return
	}
	set.Add(def)
	set.Add(std)

	stack := []suppress.Frame{
		{Function: "parse_request", File: "/src/demo.c", Module: "/src/bin/demo"},
		{Function: "main", File: "/src/demo.c", Module: "/src/bin/demo"},
	}
	if sup, ok := set.Match(stack); ok {
		set.Hit(sup, 1792, 28) // 28 blocks, 1,792 bytes
		fmt.Printf("suppressed by %s (%s:%d)\n", sup, sup.Source, sup.Line)
	}
	for _, u := range set.Used() {
		fmt.Printf("%7d %10d %s\n", u.Count, u.Bytes, u.Pattern)
	}

	_, err = suppress.Parse([]byte("leak:a\ninterceptor_via_fun:b\n"), "shared.supp")
	fmt.Println(err)
	// Output:
	// suppressed by leak:^parse_request$ (app.supp:3)
	//      28       1792 ^parse_request$
	// shared.supp:2: unknown suppression type in "interceptor_via_fun:b": LeakSanitizer accepts only "leak:PATTERN"
}
