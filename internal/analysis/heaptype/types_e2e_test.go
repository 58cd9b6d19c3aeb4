package heaptype_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/symbols/dwarftypes"
	"github.com/leakpath/leakpath/internal/testfixture"
	"github.com/leakpath/leakpath/internal/testfixture/e2e"
)

// sizes parses the fixture's "NAME SIZE" lines (its sizeof's).
func sizes(t *testing.T, stdout []byte) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(string(stdout)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("fixture printed %q", line)
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		out[f[0]] = n
	}
	return out
}

// checkTypeRows compares the type table's rows named in want (type →
// blocks and bytes, and the one evidence that typed them all).
func checkTypeRows(t *testing.T, ty *e2e.Types, want map[string][3]any) {
	t.Helper()
	for name, w := range want {
		found := false
		for _, row := range ty.Types {
			if row.Name != name {
				continue
			}
			found = true
			if row.Blocks != w[0].(uint64) || row.Bytes != w[1].(uint64) {
				t.Errorf("%s: %d blocks, %d bytes; want %d, %d", name, row.Blocks, row.Bytes, w[0], w[1])
			}
			if ev := w[2].(string); ev != "" && row.ByEvidence[ev] != row.Blocks {
				t.Errorf("%s: typed by %v, want all by %s", name, row.ByEvidence, ev)
			}
		}
		if !found {
			t.Errorf("no row for type %s in the type table", name)
		}
	}
}

// TestTypesCxx: the C++ fixture's objects (polymorphic ones in a vector,
// plain ones in a list and a tree, all from one global; more on the
// stack) are typed, counted and sized exactly; the blocks nothing types
// are reported as unknown with their site; paths to root name the
// global and the fields; a tree root retains its whole tree.
func TestTypesCxx(t *testing.T) {
	exe := e2e.Fixture(t, "types.cc", e2e.IncludeFlag())
	nat := e2e.Native(t, nil, exe)
	sz := sizes(t, nat.Stdout)
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.lpt")
	r := e2e.Leakpath(t, []string{"--types", "--path-to-root", "shop::Tree", "-o", trace, "--snapshot-dir", dir}, nil, exe)
	if string(r.Stdout) != string(nat.Stdout) || string(r.Stderr) != string(nat.Stderr) || r.Code != nat.Code {
		t.Errorf("the program's output or exit code changed under leakpath:\n%s\n%s (%d) vs %s\n%s (%d)", r.Stdout, r.Stderr, r.Code, nat.Stdout, nat.Stderr, nat.Code)
	}
	ty := e2e.TypesOf(t, r.ReportJSON)
	checkTypeRows(t, ty, map[string][3]any{
		// 10 in the vector, 5 parts of gadgets, 3 on the stack.
		"shop::Widget": {uint64(18), 18 * sz["Widget"], "vtable"},
		"shop::Gadget": {uint64(5), 5 * sz["Gadget"], "vtable"},
		"shop::Node":   {uint64(25), 25 * sz["Node"], "field"},
		"shop::Point":  {uint64(25), 25 * sz["Point"], "field"},
		"shop::Tree":   {uint64(15), 15 * sz["Tree"], "field"},
		// Only void* point at them: typed by the constructor called on them.
		"shop::Opaque": {uint64(3), 3 * sz["Opaque"], "constructor"},
		// The vector's buffer: reserve(15) pointers.
		"shop::Item*": {uint64(1), uint64(15 * 8), "field"},
	})
	// The blobs only a void* array points at: unknown, with their site.
	blobs := false
	for _, row := range ty.Types {
		if strings.HasPrefix(row.Name, "unknown (100 bytes from main (types.cc:") {
			blobs = row.Unknown && row.Blocks == 4 && row.Bytes == 400
		}
		if row.Name == "shop::Widget" && !strings.HasSuffix(row.File, "types.cc") {
			t.Errorf("shop::Widget defined at %s:%d", row.File, row.Line)
		}
	}
	if !blobs {
		t.Errorf("the 4 blobs of 100 bytes are not reported as unknown from main:\n%s", r.Text)
	}
	p := ty.PathToRoot
	if p == nil || len(p.Steps) != 2 || p.Steps[0].Via != "g_shop" || p.Steps[0].Type != "shop::Shop" ||
		p.Steps[1].Via != "index" || p.Steps[1].Type != "shop::Tree" {
		t.Fatalf("path to root of shop::Tree: %+v\n%s", p, r.Text)
	}
	if p.Steps[1].Retained != 15*sz["Tree"] {
		t.Errorf("the tree's root retains %d bytes, want its 15 nodes' %d", p.Steps[1].Retained, 15*sz["Tree"])
	}
	if !strings.Contains(r.Text, "PATH TO ROOT of shop::Tree") || !strings.Contains(r.Text, "TYPES of the live blocks") {
		t.Errorf("the text report has no type table or path:\n%s", r.Text)
	}
	// The web UI on the trace: the same type table and the same path.
	ui := e2e.StartUI(t, trace)
	var uiRep struct {
		Types *e2e.Types `json:"types"`
	}
	ui.Get(t, "/api/report", &uiRep)
	if uiRep.Types == nil || uiRep.Types.TypedBytes != ty.TypedBytes || len(uiRep.Types.Types) != len(ty.Types) {
		t.Errorf("the UI's type table differs from the run's: %+v", uiRep.Types)
	}
	var up struct {
		Type  string
		Steps []struct {
			Via, Type string
			Retained  uint64 `json:"retained_bytes"`
		}
	}
	ui.Get(t, "/api/path?type=Tree", &up)
	if up.Type != "shop::Tree" || len(up.Steps) != len(p.Steps) {
		t.Fatalf("UI path to root of Tree: %+v, the run's %+v", up, p)
	}
	for i, st := range up.Steps {
		if st.Via != p.Steps[i].Via || st.Type != p.Steps[i].Type || st.Retained != p.Steps[i].Retained {
			t.Errorf("UI path step %d: %+v, the run's %+v", i, st, p.Steps[i])
		}
	}
	if code := ui.GetCode(t, "/api/path?type=no::Such", nil); code != http.StatusNotFound {
		t.Errorf("UI path of an unknown type: status %d, want 404", code)
	}
	t.Logf("typed %d of %d live bytes (%.1f%%) by %v in %.3f s", ty.TypedBytes, ty.TotalBytes,
		100*float64(ty.TypedBytes)/float64(ty.TotalBytes), ty.ByEvidence, ty.Seconds)

	// usage/v1 by type and by namespace, from the trace.
	units := typeUsage(t, trace, "type")
	if units["shop::Widget"] != 18*sz["Widget"] || units["shop::Tree"] != 15*sz["Tree"] {
		t.Errorf("report --by type: %v", units)
	}
	shop := 18*sz["Widget"] + 5*sz["Gadget"] + 25*sz["Node"] + 25*sz["Point"] + 15*sz["Tree"] + 3*sz["Opaque"] + 15*8 + 3*8 // and the Shop
	if ns := typeUsage(t, trace, "namespace"); ns["shop"] < shop || ns["shop"] > shop+64 {
		t.Errorf("report --by namespace: shop has %d bytes, want %d and the Shop: %v", ns["shop"], shop, ns)
	}

	// The two snapshots the program asked for, typed too: the diff by
	// type says the list grew by 5 nodes held by nodes or g_shop's Shop.
	snaps, _ := filepath.Glob(filepath.Join(dir, "leakpath.snapshot.*.json"))
	sort.Strings(snaps)
	if len(snaps) != 2 {
		t.Fatalf("snapshots %v", snaps)
	}
	out, err := exec.Command(e2e.Bin, "diff", "--format", "json", snaps[0], snaps[1]).Output()
	if err != nil {
		t.Fatalf("leakpath diff: %v", err)
	}
	var diff struct {
		Types []struct {
			Name  string `json:"name"`
			Delta struct {
				Bytes  int64 `json:"bytes"`
				Blocks int64 `json:"blocks"`
			} `json:"delta"`
			HeldBy []struct {
				Holder string `json:"holder"`
			} `json:"held_by"`
		} `json:"types"`
	}
	if err := json.Unmarshal(out, &diff); err != nil {
		t.Fatal(err)
	}
	grew := map[string]int64{}
	for _, ty := range diff.Types {
		grew[ty.Name] = ty.Delta.Blocks
		if ty.Name == "shop::Node" && ty.Delta.Bytes != int64(5*sz["Node"]) {
			t.Errorf("shop::Node grew by %d bytes, want %d", ty.Delta.Bytes, 5*sz["Node"])
		}
	}
	if grew["shop::Node"] != 5 || grew["shop::Point"] != 5 || grew["shop::Widget"] != 0 {
		t.Errorf("diff by type: %s", out)
	}

	// A point: through the list, by its fields' names.
	r = e2e.Leakpath(t, []string{"--types", "--path-to-root", "Point", "--snapshot-dir", t.TempDir()}, nil, exe)
	p = e2e.TypesOf(t, r.ReportJSON).PathToRoot
	if p == nil || len(p.Steps) < 3 {
		t.Fatalf("path to root of shop::Point: %+v", p)
	}
	var vias []string
	for _, s := range p.Steps {
		vias = append(vias, s.Via)
	}
	last := p.Steps[len(p.Steps)-1]
	if vias[0] != "g_shop" || vias[1] != "head" || vias[len(vias)-1] != "pos" || last.Type != "shop::Point" {
		t.Errorf("path to root of a point: %v", vias)
	}
	for _, v := range vias[2 : len(vias)-1] {
		if v != "next" {
			t.Errorf("path to root of a point runs through %q, want next: %v", v, vias)
		}
	}
}

// typeUsage returns the current bytes per unit of `report --by by` of
// a trace, as leakpath.usage/v1.
func typeUsage(t *testing.T, trace, by string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command(e2e.Bin, "report", "--by", by, "--format", "json", trace).Output()
	if err != nil {
		t.Fatalf("leakpath report --by %s: %v", by, err)
	}
	var u struct {
		Schema string `json:"schema"`
		Units  []struct {
			Name  string `json:"name"`
			Bytes uint64 `json:"current_bytes"`
		} `json:"units"`
	}
	if err := json.Unmarshal(out, &u); err != nil || u.Schema != "leakpath.usage/v1" {
		t.Fatalf("report --by %s: %v %s", by, err, out)
	}
	m := map[string]uint64{}
	for _, x := range u.Units {
		m[x.Name] = x.Bytes
	}
	return m
}

// TestTypesC: a C program's structs, linked from typed globals, are
// typed from DWARF alone, every block of its own.
func TestTypesC(t *testing.T) {
	t.Run("gcc", func(t *testing.T) { testTypesC(t, e2e.Fixture(t, "types.c")) })
	t.Run("clang", func(t *testing.T) {
		// DWARF 5 with DW_OP_addrx for the globals.
		if _, err := exec.LookPath("clang-19"); err != nil {
			t.Skip("clang-19 is not installed (apt-get install clang-19)")
		}
		exe := filepath.Join(t.TempDir(), "types-clang")
		e2e.CompileTo(t, "clang-19", exe, "-g", "-O0", filepath.Join(e2e.Root, "testdata", "fixtures", "types.c"))
		testTypesC(t, exe)
	})
}

func testTypesC(t *testing.T, exe string) {
	nat := e2e.Native(t, nil, exe)
	sz := sizes(t, nat.Stdout)
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.lpt")
	r := e2e.Leakpath(t, []string{"--types", "-o", trace}, nil, exe)
	ty := e2e.TypesOf(t, r.ReportJSON)
	want := map[string][3]any{
		"node":  {uint64(13), 13 * sz["node"], "field"},
		"point": {uint64(10), 10 * sz["point"], "field"},
	}
	checkTypeRows(t, ty, want)
	// The labels: char, as the field says (libc's own buffers may be
	// char too: the ones make allocated are counted).
	labels := uint64(0)
	for _, row := range ty.Types {
		for _, s := range row.Sites {
			if row.Name == "char" && e2e.StackHas(s.Stack, "make") {
				labels += s.Blocks
			}
		}
	}
	if labels != 10 {
		t.Errorf("%d labels typed char, want 10", labels)
	}
	for _, row := range ty.Types {
		for _, s := range row.Sites {
			if row.Unknown && len(s.Stack) > 0 && strings.HasSuffix(s.Stack[0].File, "types.c") {
				t.Errorf("a block of the program is not typed: %s", row.Name)
			}
		}
	}
	t.Logf("typed %d of %d live bytes (%.1f%%) by %v in %.3f s", ty.TypedBytes, ty.TotalBytes,
		100*float64(ty.TypedBytes)/float64(ty.TotalBytes), ty.ByEvidence, ty.Seconds)

	// The trace keeps it all: the report of it has the same table, and
	// the path to root of a node.
	out, err := exec.Command(e2e.Bin, "report", "--format", "json", "--path-to-root", "node", trace).Output()
	if err != nil {
		t.Fatalf("leakpath report: %v", err)
	}
	ty2 := e2e.TypesOf(t, out)
	checkTypeRows(t, ty2, want)
	p := ty2.PathToRoot
	if p == nil || len(p.Steps) == 0 || !strings.HasPrefix(p.Steps[0].Via, "g_") || p.Steps[len(p.Steps)-1].Type != "node" {
		t.Errorf("path to root of a node from the trace: %+v", p)
	}
	if fmt.Sprint(ty.ByEvidence) != fmt.Sprint(ty2.ByEvidence) {
		t.Errorf("typed by %v at the run, %v in the trace's report", ty.ByEvidence, ty2.ByEvidence)
	}
}

// TestTypesContainers: the nodes of the standard containers (libstdc++,
// and libc++ where clang-19 and libc++ are installed) are typed as the
// container's own node type, naming the user's type, never as their base
// class, at -O0, -O1 and -O2 (a leaked list's nodes by their allocation
// site's inlined frames); the pointers in a node's value are followed
// (the tags only the map's values hold are typed), a hash table's
// buckets are typed, a vector of maps retains its maps' nodes exactly,
// and the path to root of a tag runs through the map.
func TestTypesContainers(t *testing.T) {
	for _, opt := range []string{"-O0", "-O1", "-O2"} {
		t.Run("libstdc++"+opt, func(t *testing.T) {
			t.Parallel()
			if opt != "-O2" {
				e2e.Exhaustive(t, "libstdc++ at -O2 stands for the other levels")
			}
			testTypesContainers(t, e2e.Fixture(t, "containers.cc", opt), opt, libstdcxxNames)
		})
	}
	t.Run("libc++-O2", func(t *testing.T) {
		t.Parallel()
		e2e.Exhaustive(t, "libstdc++ stands for libc++")
		if _, err := exec.LookPath("clang++-19"); err != nil {
			t.Skip("clang++-19 is not installed (apt-get install clang-19 libc++-19-dev libc++abi-19-dev)")
		}
		exe := filepath.Join(t.TempDir(), "containers-libc++")
		src := filepath.Join(e2e.Root, "testdata", "fixtures", "containers.cc")
		if err := testfixture.Compile("clang++-19", exe, "-stdlib=libc++", "-g", "-O2", src); err != nil {
			t.Skipf("clang++-19 -stdlib=libc++ cannot build the fixture (libc++-19-dev not installed?): %v", err)
		}
		testTypesContainers(t, exe, "-O2", libcxxNames)
	})
}

// containerNames are the names (prefixes) of a library's node types in
// its DWARF: map, hash, list, box (a list of app::Box), fwd, set (of
// strings), word (an unordered set of strings), shard (a map<int, long>
// node), shared (make_shared's block), vecmap (the vector of maps'
// element).
type containerNames map[string]string

var libstdcxxNames = containerNames{
	"map":    "std::_Rb_tree_node<std::pair<int const, app::Keeper>",
	"hash":   "std::__detail::_Hash_node<std::pair<int const, app::Keeper>, false>",
	"list":   "std::_List_node<app::Keeper>",
	"box":    "std::_List_node<app::Box>",
	"fwd":    "std::_Fwd_list_node<app::Tag>",
	"set":    "std::_Rb_tree_node<std::__cxx11::basic_string<char",
	"word":   "std::__detail::_Hash_node<std::__cxx11::basic_string<char",
	"shard":  "std::_Rb_tree_node<std::pair<int const, long",
	"shared": "std::_Sp_counted_ptr_inplace<app::Keeper,",
	"vecmap": "std::map<int, long",
	"adder":  "app::Adder", // libc++ keeps the functor in the object
}

var libcxxNames = containerNames{
	"map":    "std::__1::__tree_node<std::__1::__value_type<int, app::Keeper>",
	"hash":   "std::__1::__hash_node<std::__1::__hash_value_type<int, app::Keeper>",
	"list":   "std::__1::__list_node<app::Keeper,",
	"box":    "std::__1::__list_node<app::Box,",
	"fwd":    "std::__1::__forward_list_node<app::Tag,",
	"set":    "std::__1::__tree_node<std::__1::basic_string<char",
	"word":   "std::__1::__hash_node<std::__1::basic_string<char",
	"shard":  "std::__1::__tree_node<std::__1::__value_type<int, long>",
	"shared": "std::__1::__shared_ptr_emplace<app::Keeper,",
	"vecmap": "std::__1::map<int, long",
}

func testTypesContainers(t *testing.T, exe, opt string, names containerNames) {
	nat := e2e.Native(t, nil, exe)
	sz := sizes(t, nat.Stdout)
	r := e2e.Leakpath(t, []string{"--types", "--path-to-root", "app::Tag"}, nil, exe)
	if string(r.Stdout) != string(nat.Stdout) || r.Code != nat.Code {
		t.Errorf("the program's output or exit code changed under leakpath: %s (%d)", r.Stdout, r.Code)
	}
	ty := e2e.TypesOf(t, r.ReportJSON)
	type want struct {
		prefix        string
		blocks, bytes uint64
	}
	wants := []want{
		{names["map"], 20, 20 * sz["map_node"]},
		{names["hash"], 30, 30 * sz["hash_node"]},
		{names["list"], 40, 40 * sz["list_node"]},
		{names["box"], 7, 7 * sz["box_node"]},
		{names["fwd"], 9, 9 * sz["fwd_node"]},
		{names["set"], 25, 25 * sz["set_node"]},
		{names["word"], 11, 11 * sz["word_node"]},
		{names["shard"], 12, 12 * sz["shard_node"]},
		{"app::Box", sz["deque_buffers"], sz["deque_buffers"] * sz["deque_buffer"]},
		{"app::Tag", 20, 20 * sz["tag"]},
		{names["shared"], 6, 6 * sz["shared_block"]},
	}
	if names["adder"] != "" {
		wants = append(wants, want{names["adder"], 1, sz["adder"]})
	}
	rows := map[string]int{}
	for i, row := range ty.Types {
		if dwarftypes.IsNodeBase(row.Name) {
			t.Errorf("%d blocks typed as the base class %s", row.Blocks, row.Name)
		}
		// libstdc++'s emergency exception pool: from the library, not
		// from its nearest symbol or an offset.
		if row.Unknown && (strings.Contains(row.Name, "libstdc++.so") || strings.Contains(row.Name, "__throw_")) {
			t.Errorf("an unknown site named by a library's symbol or offset: %s", row.Name)
		}
		for _, w := range wants {
			if row.Name == w.prefix || (strings.HasPrefix(row.Name, w.prefix) && !strings.HasSuffix(row.Name, "*")) {
				if _, dup := rows[w.prefix]; dup {
					t.Errorf("two rows for %s", w.prefix)
				}
				rows[w.prefix] = i
			}
		}
	}
	for _, w := range wants {
		i, ok := rows[w.prefix]
		if !ok {
			t.Errorf("no row for %s…", w.prefix)
			continue
		}
		if row := ty.Types[i]; row.Blocks != w.blocks || row.Bytes != w.bytes {
			t.Errorf("%s: %d blocks, %d bytes; want %d, %d", row.Name, row.Blocks, row.Bytes, w.blocks, w.bytes)
		}
	}
	// The leaked list's nodes: by their allocation site alone (at -O0
	// the list's constructor is called, not inlined: the list is typed
	// by it, and its nodes by its fields).
	if i, ok := rows[names["box"]]; ok {
		row := ty.Types[i]
		by := row.ByEvidence["alloc-site"]
		if opt == "-O0" {
			by += row.ByEvidence["field"]
		}
		if by != row.Blocks {
			t.Errorf("%s typed by %v, want all by alloc-site", row.Name, row.ByEvidence)
		}
	}
	// The unordered map's buckets: pointers to its nodes.
	buckets, vec := false, false
	for _, row := range ty.Types {
		if strings.HasPrefix(row.Name, names["hash"]) && strings.HasSuffix(row.Name, "*") {
			buckets = true
			if row.Blocks != 1 || row.Bytes != 8*sz["buckets"] {
				t.Errorf("%s: %d blocks, %d bytes; want 1, %d", row.Name, row.Blocks, row.Bytes, 8*sz["buckets"])
			}
		}
		// The vector of maps: its buffer retains its 3 maps' 12 nodes.
		if strings.HasPrefix(row.Name, names["vecmap"]) && !strings.HasSuffix(row.Name, "*") {
			vec = true
			if w := 3*sz["map"] + 12*sz["shard_node"]; row.Blocks != 1 || row.Retains != w {
				t.Errorf("%s: %d blocks retaining %d bytes, want 1 retaining %d", row.Name, row.Blocks, row.Retains, w)
			}
		}
	}
	if !buckets {
		t.Errorf("the unordered map's buckets are not typed")
	}
	if !vec {
		t.Errorf("the vector of maps' buffer is not typed")
	}
	p := ty.PathToRoot
	if p == nil || len(p.Steps) < 3 {
		t.Fatalf("path to root of app::Tag: %+v\n%s", p, r.Text)
	}
	last, node := p.Steps[len(p.Steps)-1], p.Steps[len(p.Steps)-2]
	if p.Steps[0].Via != "g_reg" || last.Type != "app::Tag" || !strings.HasSuffix(last.Via, "second.tag") ||
		!strings.HasPrefix(node.Type, names["map"]) {
		t.Errorf("path to root of app::Tag: %+v", p.Steps)
	}
	t.Logf("typed %d of %d live bytes by %v in %.3f s", ty.TypedBytes, ty.TotalBytes, ty.ByEvidence, ty.Seconds)
}

// TestTypesSnapshotPause: a typed snapshot of 100,000 live container
// nodes types every one of them, and the head of the list retains the
// whole list (the dominators of a 50,000-node doubly linked cycle). It
// logs the snapshot's pause and typing time (not checked: the machine
// may be loaded), the figures docs/types.md quotes.
func TestTypesSnapshotPause(t *testing.T) {
	exe := e2e.Fixture(t, "bigheap.cc", e2e.IncludeFlag(), "-O2")
	nat := e2e.Native(t, nil, exe)
	sz := sizes(t, nat.Stdout)
	dir := t.TempDir()
	r := e2e.Leakpath(t, []string{"--types", "--snapshot-dir", dir}, nil, exe)
	if string(r.Stdout) != string(nat.Stdout) || r.Code != nat.Code {
		t.Errorf("the program's output or exit code changed under leakpath: %s (%d)", r.Stdout, r.Code)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "leakpath.snapshot.*.json"))
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v", snaps)
	}
	b, err := os.ReadFile(snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Scan struct {
			Pause float64 `json:"pause_seconds"`
		} `json:"scan"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	ty := e2e.TypesOf(t, b)
	const n = 50000
	for _, w := range []struct {
		prefix string
		bytes  uint64
	}{{"std::_Rb_tree_node<std::pair<int const, Rec>", n * sz["map_node"]}, {"std::_List_node<Rec>", n * sz["list_node"]}} {
		found := false
		for _, row := range ty.Types {
			if strings.HasPrefix(row.Name, w.prefix) {
				found = true
				if row.Blocks != n || row.Bytes != w.bytes {
					t.Errorf("%s: %d blocks, %d bytes; want %d, %d", row.Name, row.Blocks, row.Bytes, n, w.bytes)
				}
			}
		}
		if !found {
			t.Errorf("no row for %s", w.prefix)
		}
	}
	list := false
	for _, row := range ty.Types {
		if strings.HasPrefix(row.Name, "std::__cxx11::list<Rec") && !strings.HasSuffix(row.Name, "*") {
			list = true
			if want := n*sz["list_node"] + sz["list"]; row.Retains != want {
				t.Errorf("the list retains %d bytes, want its nodes and itself, %d", row.Retains, want)
			}
		}
	}
	if !list {
		t.Errorf("the list object is not typed")
	}
	t.Logf("typed snapshot of %d live bytes: pause %.3f s, typing %.3f s", ty.TotalBytes, snap.Scan.Pause, ty.Seconds)
}
