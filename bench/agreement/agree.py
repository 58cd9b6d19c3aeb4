#!/usr/bin/env python3
"""Agreement table: leakpath against memcheck's and LeakSanitizer's own tests.

Usage: agree.py --sources DIR [--leakpath BIN] [--out results.json]
                [--suite all|memcheck|lsan] [--only NAME,...]

DIR holds the third-party tests, which are not in this repository (see
docs/agreement.md): DIR/valgrind is a valgrind source tree (memcheck/tests,
tests, include; memcheck/memcheck.h and valgrind.h linked to the installed
ones), DIR/lsan/TestCases compiler-rt's test/lsan/TestCases and
DIR/lsan/include/sanitizer_common the two helper headers they include
(stand-ins: this directory's print_address.h and sanitizer_ucontext.h).
Builds go to DIR/build. The tests are built natively and run natively,
under memcheck, under gcc's LeakSanitizer (-fsanitize=leak) and under
leakpath; Markdown tables go to stdout.
"""
import argparse, json, os, re, shlex, subprocess, sys

SCRIPT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(SCRIPT))
HERE = BUILD = VG = LS = None


def set_sources(d):
    global HERE, BUILD, VG, LS
    HERE = os.path.abspath(d)
    BUILD = os.path.join(HERE, "build")
    VG = os.path.join(HERE, "valgrind", "memcheck", "tests")
    LS = os.path.join(HERE, "lsan", "TestCases")
TIMEOUT = 300

# --- memcheck's tests -----------------------------------------------------
# (name, source, args, extra flags). All built -g -O0 like valgrind's suite
# but for the ones its Makefile.am builds otherwise.
MC_LEAK = [
    ("leak-0", "leak-0.c", [], []),
    ("leak-cases", "leak-cases.c", [], []),
    ("leak-cycle", "leak-cycle.c", [], []),
    # memcheck 3.19 has no VALGRIND_DO_NEW_LEAK_CHECK: the nearest one (only
    # the checks inside the program differ, not the one at exit).
    ("leak-delta", "leak-delta.c", [], ["-DVALGRIND_DO_NEW_LEAK_CHECK=VALGRIND_DO_ADDED_LEAK_CHECK"]),
    ("leak-tree", "leak-tree.c", [], []),
    ("leak-segv-jmp", "leak-segv-jmp.c", [], []),
    ("leak_cpp_interior", "leak_cpp_interior.cpp", [], []),
    ("pointer-trace", "pointer-trace.c", [], []),
    ("trivialleak", "trivialleak.c", [], []),
    ("nanoleak2", "nanoleak2.c", [], []),
    ("nanoleak_supp", "nanoleak_supp.c", [], []),
    ("simple_leak", "simple_leak.c", [], []),
    ("simple_reachable", "simple_reachable.c", [], []),
    ("reach_thread_register", "reach_thread_register.c", [], ["-O2"]),
    ("recursive-merge", "recursive-merge.c", ["a", "aa", "aaa", "aaaa", "abab", "abca", "abcda"], []),
    ("undef_malloc_args", "undef_malloc_args.c", [], []),
    ("xmas_tree", "xmas_tree.cpp", [], []),
]
MC_ERR = [
    ("doublefree", "doublefree.c", [], []),
    ("mismatches", "mismatches.cpp", [], []),
    ("badfree", "badfree.c", [], []),
    ("malloc2", "malloc2.c", [], []),
    ("fprw", "fprw.c", [], []),
    ("memalign_test", "memalign_test.c", [], []),
    ("new_aligned_delete_default", "new_aligned_delete_default.cpp", [], ["-std=c++17"]),
    ("new_delete_mismatch_size", "new_delete_mismatch_size.cpp", [], ["-std=c++17"]),
    ("realloc_size_zero_mismatch", "realloc_size_zero_mismatch.cpp", [], []),
    ("sized_aligned_new_delete_misaligned1", "sized_aligned_new_delete_misaligned1.cpp", [], ["-std=c++17"]),
    ("duplicate_align_size_errors", "duplicate_align_size_errors.cpp", [], ["-std=c++17"]),
    ("suppfree", "suppfree.c", [], []),
    ("xml1", "xml1.c", [], []),
]
MC_NA = [
    ("leak-pool-0..5", "the pool's chunks exist only through valgrind's mempool client requests"),
    ("leak-autofreepool-0..6", "the pool's chunks exist only through valgrind's mempool client requests"),
    ("mempool, mempool2, custom_alloc", "custom allocators described by client requests"),
    ("static_malloc", "the program defines malloc itself (leakpath says: unmeasured)"),
]

# Why a row disagrees, once understood: (by design?, cause).
CAUSES = {
    "xml1": (True, "glibc aborts at the double free natively; memcheck's allocator goes on to an invalid free of a stack address"),
    "badfree": (True, "glibc aborts at the first invalid free natively; memcheck's allocator does not, so it sees the second"),
    "fprw": (True, "glibc aborts at the invalid free natively: no exit scan (memcheck's summary counts a block the abort leaves)"),
    "sized_aligned_new_delete_misaligned1": (True, "memcheck's own operator new(32, align 0, nothrow) allocates a block that libstdc++'s does not"),
    "realloc_size_zero_mismatch": (False, "realloc(p, 0) of new[]'s block was not a mismatched free (fixed)"),
    "leak_cpp_interior, check 1": (True, "new MyClass[0], held by the pointer just past its 8 bytes: reachable as LeakSanitizer says; memcheck calls it definitely lost (the test's comment: wrongly)"),
    "leak-segv-jmp, check 3": (True, "the test marks the only pointer to the 1000 B block undefined (VALGRIND_MAKE_MEM_UNDEFINED): memcheck skips undefined words, leakpath cannot know them"),
    "double_free_realloc.cpp free-replaced": (True, "glibc's realloc grew the 16 B block in place (q == p): the free is valid natively; LSan's allocator always moves"),
    "swapcontext.cpp": (True, "LSan marks a block whose allocation stack it cannot unwind (allocated on a heap-allocated coroutine stack) as reachable; leakpath unwinds it and reports the leak, as memcheck does (2,664 B definite)"),
}

KINDS = ["definite", "indirect", "possible", "reachable"]
ERRKINDS = ["invalid_free", "double_free", "mismatched_free", "invalid_realloc"]


def run(argv, env=None, cwd=None, timeout=TIMEOUT):
    try:
        p = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_PRELOAD", "LSAN_OPTIONS", "ASAN_OPTIONS", "LEAKPATH_"))}
    env.update(extra or {})
    return env


def compile_(src, out, flags, cxx=None):
    cxx = src.endswith((".cpp", ".cc")) if cxx is None else cxx
    cc = "g++" if cxx else "gcc"
    argv = [cc, "-g", "-w"] + ([] if any(f.startswith("-O") for f in flags) else ["-O0"]) + flags + \
        ["-o", out, src, "-pthread", "-ldl"]
    rc, o, e = run(argv)
    if rc != 0:
        return "build failed: " + (o + e).strip().splitlines()[0] if (o + e).strip() else "build failed"
    return None


# --- memcheck ---------------------------------------------------------------
vg_kind = re.compile(r"(definitely lost|indirectly lost|possibly lost|still reachable|suppressed): "
                     r"([\d,]+) (?:\([^)]*\) )?bytes in ([\d,]+) (?:\([^)]*\) )?blocks")
vg_names = {"definitely lost": "definite", "indirectly lost": "indirect", "possibly lost": "possible",
            "still reachable": "reachable", "suppressed": "suppressed"}


def num(s):
    return int(s.replace(",", ""))


def parse_memcheck(log):
    """The exit leak check's sums by kind (the C runtime's possibly lost
    blocks moved to reachable as leakpath counts them) and the free errors."""
    i = log.rfind("HEAP SUMMARY:")
    final = log[i:] if i >= 0 else ""
    sums = {k: [0, 0] for k in KINDS + ["suppressed"]}
    for m in vg_kind.finditer(final):
        sums[vg_names[m.group(1)]] = [num(m.group(2)), num(m.group(3))]
    loader = [0, 0]
    blocks = re.split(r"\n==\d+== \n", log)
    for b in blocks:
        m = re.search(r"([\d,]+) (?:\([^)]*\) )?bytes in ([\d,]+) (?:\([^)]*\) )?blocks are possibly lost", b)
        if m and "(rtld-malloc.h:" in b and b in final:
            n, k = num(m.group(1)), num(m.group(2))
            loader[0] += n
            loader[1] += k
            sums["possible"][0] -= n
            sums["possible"][1] -= k
            sums["reachable"][0] += n
            sums["reachable"][1] += k
            if "allocate_dtv" in b or "_dl_allocate_tls" in b:
                sums["reachable"][0] += 16 * k  # the agent's own TLS module
    errors = {k: 0 for k in ERRKINDS}
    other = {}
    for b in blocks:
        lines = [re.sub(r"^==\d+== ?", "", l) for l in b.strip("\n").splitlines()]
        if not lines:
            continue
        head = lines[0].strip()
        body = "\n".join(lines[1:])
        first = next((l for l in lines[1:] if l.strip().startswith("at ")), "")
        if head.startswith("Invalid free()"):
            if re.search(r"bytes inside a block of size \d+ free'd", body) or "bytes inside a block of size" in body and "free'd" in body:
                errors["double_free"] += 1
            elif re.search(r": realloc ", first):
                errors["invalid_realloc"] += 1
            else:
                errors["invalid_free"] += 1
        elif head.startswith("Mismatched free()"):
            errors["mismatched_free"] += 1
        elif re.match(r"(Invalid (read|write|alignment)|Conditional jump|Use of uninit|Syscall param|"
                      r"Argument '|Source and destination|Mismatched new/delete|.*has a fishy|"
                      r"Process terminating|Jump to the invalid)", head):
            key = re.sub(r"\s+of size \d+|\s*\(.*", "", head)[:40]
            other[key] = other.get(key, 0) + 1
    return sums, errors, other, loader


def memcheck_checks(log):
    """The sums of each leak check in order (the program's own, then the
    one at exit), the loader's possibly lost blocks moved to reachable."""
    out = []
    pos = 0
    for m in re.finditer(r"LEAK SUMMARY:\n(.*?suppressed:[^\n]*)|All heap blocks were freed -- no leaks are possible", log, re.S):
        seg = log[pos:m.start()]
        pos = m.end()
        sums = {k: [0, 0] for k in KINDS + ["suppressed"]}
        if m.group(1):
            for k in vg_kind.finditer(m.group(1)):
                sums[vg_names[k.group(1)]] = [num(k.group(2)), num(k.group(3))]
        for b in re.split(r"\n==\d+== \n", seg):
            k = re.search(r"([\d,]+) (?:\([^)]*\) )?bytes in ([\d,]+) (?:\([^)]*\) )?blocks are possibly lost", b)
            if k and "(rtld-malloc.h:" in b:
                n, c = num(k.group(1)), num(k.group(2))
                sums["possible"][0] -= n
                sums["possible"][1] -= c
                sums["reachable"][0] += n + (16 * c if "allocate_dtv" in b or "_dl_allocate_tls" in b else 0)
                sums["reachable"][1] += c
        out.append(sums)
    return out


def leakpath_checks(snapdir):
    rows = []
    if not os.path.isdir(snapdir):
        return rows
    files = [f for f in os.listdir(snapdir) if f.startswith("leakpath.snapshot.")]
    files.sort(key=lambda f: int(f.split(".")[3]))
    for f in files:
        r = json.load(open(os.path.join(snapdir, f)))
        sums = {k: [0, 0] for k in KINDS}
        for k, v in (r.get("totals", {}).get("by_kind") or {}).items():
            if k in sums:
                sums[k] = [v["bytes"], v["blocks"]]
        rows.append(sums)
    return rows


# Tests whose monitor commands print more summaries than their leak
# checks: only their first check is compared.
FIRST_CHECK_ONLY = {"leak_cpp_interior"}


def parse_leakpath(path):
    try:
        rep = json.load(open(path))
    except (OSError, ValueError) as e:
        return None, None, "no report: %s" % e
    images = rep.get("processes") or [rep]
    sums = {k: [0, 0] for k in KINDS + ["suppressed"]}
    errors = {k: 0 for k in ERRKINDS}
    notes = []
    for im in images:
        t = im.get("totals", {})
        for k, v in (t.get("by_kind") or {}).items():
            if k in sums:
                sums[k][0] += v.get("bytes", 0)
                sums[k][1] += v.get("blocks", 0)
        if t.get("suppressed"):
            sums["suppressed"][0] += t["suppressed"].get("bytes", 0)
            sums["suppressed"][1] += t["suppressed"].get("blocks", 0)
        if im.get("scan_error"):
            notes.append(im["scan_error"])
        if im.get("scan") is None and not im.get("scan_error"):
            notes.append("no scan")
        for e in im.get("errors") or []:
            errors[e["kind"]] = errors.get(e["kind"], 0) + e.get("count", 1)
    return sums, errors, "; ".join(notes)


def run_leakpath(lp, exe, args, tag, env=None, snapdir=None):
    out = os.path.join(BUILD, tag + ".lp.json")
    if os.path.exists(out):
        os.remove(out)
    flags = ["--snapshot-dir", snapdir] if snapdir else []
    rc, o, e = run([lp, "run", "--json", out] + flags + ["--"] + [exe] + args, env=clean_env(env), cwd=BUILD)
    s, errs, notes = parse_leakpath(out)
    return rc, s, errs, notes, e


def same_exit(native, lp):
    """leakpath exits with the program's code, 128+N for a signal N."""
    if isinstance(native, int) and native < 0:
        native = 128 - native
    return native == lp


def fmt_sums(s):
    return " ".join("%s%d/%d" % (k[0].upper(), s[k][0], s[k][1]) for k in KINDS)


def fmt_errs(e):
    return ", ".join("%s×%d" % (k, v) for k, v in e.items() if v) or "none"


def memcheck_suite(lp, only):
    rows = []
    vgenv = {"GLIBCXX_FORCE_NEW": "1", "GLIBCPP_FORCE_NEW": "1"}
    for group, tests in (("leak", MC_LEAK), ("errors", MC_ERR)):
        for name, src, args, flags in tests:
            if only and name not in only:
                continue
            exe = os.path.join(BUILD, "mc-" + name)
            err = compile_(os.path.join(VG, src), exe, ["-include", os.path.join(SCRIPT, "lpcheck.h"),
                                                        "-I" + os.path.join(REPO, "agent", "include"),
                                                        "-I" + os.path.join(HERE, "valgrind"),
                                                        "-I" + os.path.join(HERE, "valgrind", "memcheck"),
                                                        "-I" + os.path.join(HERE, "valgrind", "include"),
                                                        "-I/usr/include/valgrind"] + flags)
            row = {"suite": "memcheck", "group": group, "test": name}
            if err:
                row.update(agree="n/a", why=err)
                rows.append(row)
                continue
            nrc, _, _ = run([exe] + args, env=clean_env(vgenv), cwd=BUILD)
            log = os.path.join(BUILD, "mc-" + name + ".vg.log")
            run(["valgrind", "--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no",
                 "--run-cxx-freeres=no", "--log-file=" + log, exe] + args, env=clean_env(), cwd=BUILD)
            vgs, vge, vgo, loader = parse_memcheck(open(log, errors="replace").read())
            snap = os.path.join(BUILD, "snap-" + name)
            subprocess.run(["rm", "-rf", snap])
            os.makedirs(snap)
            lrc, lps, lpe, notes, lperr = run_leakpath(lp, exe, args, "mc-" + name, vgenv, snap)
            mchecks = memcheck_checks(open(log, errors="replace").read())[:-1]
            lchecks = leakpath_checks(snap)
            if name in FIRST_CHECK_ONLY:
                mchecks = mchecks[:1]
            for i in range(max(len(mchecks), len(lchecks))):
                mcs = mchecks[i] if i < len(mchecks) else None
                lcs = lchecks[i] if i < len(lchecks) else None
                rows.append({"suite": "memcheck", "group": "check", "test": "%s, check %d" % (name, i + 1),
                             "memcheck": fmt_sums(mcs) if mcs else "none", "leakpath": fmt_sums(lcs) if lcs else "none",
                             "agree": "yes" if mcs and lcs and all(mcs[k] == lcs[k] for k in KINDS) else "no"})
                if rows[-1]["agree"] == "no" and rows[-1]["test"] in CAUSES:
                    c = CAUSES[rows[-1]["test"]]
                    rows[-1]["why"] = ("by design: " if c[0] else "leakpath: ") + c[1]
            row.update(native_rc=nrc, lp_rc=lrc, memcheck=fmt_sums(vgs), memcheck_errors=fmt_errs(vge),
                       memcheck_other=vgo, loader=loader, leakpath=fmt_sums(lps) if lps else "none",
                       leakpath_errors=fmt_errs(lpe) if lpe else "none", notes=notes)
            same_leaks = lps is not None and all(vgs[k] == lps[k] for k in KINDS)
            same_errs = lpe is not None and all(vge[k] == lpe.get(k, 0) for k in ERRKINDS)
            aborted = isinstance(nrc, int) and nrc < 0
            if group == "leak":
                row["agree"] = "yes" if same_leaks and same_errs else "no"
            else:
                # A program glibc aborts has no exit scan: its errors are
                # compared, and its leaks where it ran to its end.
                row["agree"] = "yes" if same_errs and (same_leaks or aborted) else "no"
            row["behaviour"] = "same" if same_exit(nrc, lrc) else "native %s, leakpath %s" % (nrc, lrc)
            if row["agree"] == "no" and name in CAUSES:
                row["why"] = ("by design: " if CAUSES[name][0] else "leakpath: ") + CAUSES[name][1]
            rows.append(row)
    return rows


# --- LeakSanitizer's tests --------------------------------------------------
PRINT_ONLY = {"report_objects", "log_pointers", "log_threads", "symbolize", "verbosity", "exitcode"}
LSAN_NA = {
    "create_thread_leak.cpp": "sanitizer API (__lsan_do_recoverable_leak_check)",
    "default_options.cpp": "sanitizer API (__lsan_default_options)",
    "disabler.c": "LSAN_OPTIONS use_stacks=0:use_registers=0:use_tls=0; __lsan_disable",
    "disabler.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0; __lsan::ScopedDisabler",
    "do_leak_check_override.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0; __lsan_do_leak_check",
    "double_free_eviction.cpp": "LSAN_OPTIONS detect_double_free=1 (a recent LSan option)",
    "double_free_hooks.cpp": "LSAN_OPTIONS detect_double_free=1; sanitizer hooks",
    "double_free_large.cpp": "LSAN_OPTIONS detect_double_free=1",
    "double_free_max_entries.cpp": "LSAN_OPTIONS detect_double_free=1:double_free_max_entries",
    "double_free_sized.cpp": "LSAN_OPTIONS detect_double_free=1",
    "double_free_threaded.cpp": "LSAN_OPTIONS detect_double_free=1",
    "flag_retries.c": "LSAN_OPTIONS retries; __lsan_do_recoverable_leak_check",
    "flag_tries.c": "LSAN_OPTIONS tries; __lsan_do_recoverable_leak_check",
    "high_allocator_contention.cpp": "LSAN_OPTIONS use_ld_allocations=0",
    "ignore_object.c": "LSAN_OPTIONS use_stacks=0:use_registers=0:use_tls=0; __lsan_ignore_object",
    "large_allocation_leak.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0",
    "leak_check_at_exit.cpp": "LSAN_OPTIONS leak_check_at_exit; __lsan_do_leak_check",
    "link_turned_off.cpp": "__lsan_is_turned_off; LSAN_OPTIONS use_stacks=0:use_registers=0",
    "lsan_annotations.cpp": "sanitizer API (__lsan_ignore_object, ScopedDisabler)",
    "lsan_crash.cpp": "sanitizer API (__lsan_do_recoverable_leak_check)",
    "malloc_zero.c": "LSAN_OPTIONS use_stacks=0",
    "pointer_to_self.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0",
    "realloc_too_big.c": "LSAN_OPTIONS allocator_may_return_null=1:max_allocation_size_mb=16",
    "recoverable_leak_check.cpp": "sanitizer API (__lsan_do_recoverable_leak_check)",
    "register_root_region.cpp": "__lsan_register_root_region; LSAN_OPTIONS use_stacks=0",
    "suppressions_default.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0; __lsan_default_suppressions",
    "suppressions_file.cpp": "LSAN_OPTIONS use_stacks=0:use_registers=0:suppressions",
    "thread_context_crash.cpp": "sanitizer internals (__lsan::GetCurrentThread)",
    "use_unaligned.cpp": "LSAN_OPTIONS use_unaligned (no run with the defaults)",
    "Linux/cleanup_in_tsd_destructor.c": "LSAN_OPTIONS use_tls=0; __lsan_do_leak_check",
    "Linux/disabler_in_tsd_destructor.c": "LSAN_OPTIONS use_ld_allocations=0; __lsan_disable",
    "Linux/double_free_fork.cpp": "LSAN_OPTIONS detect_double_free=1",
    "Linux/leak_check_segv.cpp": "sanitizer API (__lsan_do_leak_check)",
    "Linux/log-path_test.cpp": "LSAN_OPTIONS use_stacks=0:log_path",
    "Linux/realloc_failure_keeps_original.cpp": "sanitizer API (malloc hooks, get_ownership)",
    "Linux/signal_during_stop_the_world.cpp": "sanitizer API (__lsan_do_leak_check)",
    "Darwin/*": "macOS only",
}
lsan_summary = re.compile(r"SUMMARY: \w+Sanitizer: (\d+) byte\(s\) leaked in (\d+) allocation\(s\)")


def parse_runs(path):
    """The RUN lines: a list of ("build", flags, dso) and ("run", opts, args, not, prefixes)."""
    steps = []
    for line in open(path):
        m = re.match(r"\s*// RUN: (.*)", line)
        if not m:
            continue
        for part in re.split(r"\s*&&\s*", m.group(1)):
            w = part.split()
            if not w:
                continue
            if w[0] in ("%clang_lsan", "%clangxx_lsan", "%clangxx", "%clang"):
                flags = [x for x in w[1:] if x.startswith(("-O", "-D", "-f", "-std", "--std"))
                         and x not in ("-fPIC",)]
                steps.append(("build", flags, "-shared" in w))
                continue
            if "%run" not in w:
                continue
            opts = None
            mo = re.search(r"%env_lsan_opts=(\"[^\"]*\"|'[^']*'|\S*)", part)
            if mo:
                opts = mo.group(1).strip("\"'")
            i = w.index("%run")
            args = []
            for x in w[i + 2:]:
                if x.startswith(("2>", ">", "|")):
                    break
                args.append(x)
            neg = w[i - 1] == "not" if i > 0 else False
            pm = re.search(r"--check-prefix(?:es)?[= ](\S+)", part)
            prefixes = pm.group(1).split(",") if pm else (["CHECK"] if "FileCheck" in part else [])
            steps.append(("run", opts, args, neg, prefixes))
    return steps


def default_opts(opts):
    if not opts:
        return True
    return all(kv.split("=")[0] in PRINT_ONLY for kv in opts.split(":") if kv)


def expected_bytes(path, prefixes):
    for line in open(path):
        for p in prefixes:
            m = re.match(r"\s*// %s: .*Sanitizer: (\d+) byte\(s\) leaked in (\d+) allocation" % re.escape(p), line)
            if m:
                return int(m.group(1)), int(m.group(2))
    return None


def lsan_suite(lp, only):
    rows = []
    inc = "-I" + os.path.join(HERE, "lsan", "include")
    for rel in sorted(LSAN_NA):
        if only and rel not in only:
            continue
        rows.append({"suite": "lsan", "test": rel, "agree": "n/a", "why": LSAN_NA[rel]})
    files = []
    for d in ("", "Linux"):
        for f in sorted(os.listdir(os.path.join(LS, d))):
            if f.endswith((".c", ".cpp")):
                files.append(os.path.join(d, f) if d else f)
    for rel in files:
        if rel in LSAN_NA or (only and rel not in only):
            continue
        src = os.path.join(LS, rel)
        tag = "ls-" + rel.replace("/", "-").rsplit(".", 1)[0]
        steps = parse_runs(src)
        nbuild = 0
        plain = lsan = None
        for step in steps:
            if step[0] == "build":
                _, flags, dso = step
                flags = flags + [inc, "-D__has_feature(x)=0"]
                if dso:
                    for suffix in ("", "-lsan"):
                        compile_(src, os.path.join(BUILD, tag + suffix + "-so.so"), flags + ["-fPIC", "-shared"])
                    continue
                nbuild += 1
                plain = os.path.join(BUILD, tag)
                lsan = os.path.join(BUILD, tag + "-lsan")
                e1 = compile_(src, plain, flags)
                e2 = compile_(src, lsan, flags + ["-fsanitize=leak"])
                if e1:
                    plain = None
                if e2:
                    lsan = None
                continue
            _, opts, args, neg, prefixes = step
            case = rel + (" " + " ".join(args) if args else "") + (" (build %d)" % nbuild if nbuild > 1 else "")
            if only and rel not in only:
                continue
            row = {"suite": "lsan", "test": case, "opts": opts}
            if plain is None:
                row.update(agree="n/a", why="does not build without the sanitizer")
                rows.append(row)
                continue
            if opts and "detect_double_free=1" in opts:
                # Free errors (a recent LSan option): what kind of error.
                p = prefixes[0] if prefixes else "CHECK"
                want = {"CHECK": "double_free", "CHECK-DOUBLE": "double_free", "CHECK-BAD": "invalid_free",
                        "CHECK-OK": "none", "CHECK-OFF": "none"}.get(p, "?")
                if "invalid_free" in rel:
                    want = "invalid_free"
                lrc, lps, lpe, notes, lperr = run_leakpath(lp, plain, args, tag + "-" + str(len(rows)))
                have = [k for k, v in (lpe or {}).items() if v] or ["none"]
                if want == "invalid_free" and have == ["invalid_realloc"]:
                    have = ["invalid_free"]  # LSan's bad-free covers realloc
                row.update(group="errors", expected=want, leakpath=", ".join(have),
                           agree="yes" if have == [want] else "no")
                if row["agree"] == "no" and case in CAUSES:
                    row["why"] = ("by design: " if CAUSES[case][0] else "leakpath: ") + CAUSES[case][1]
                rows.append(row)
                continue
            exp_leak = neg
            exp_bytes = expected_bytes(src, prefixes) if neg else None
            row["expected"] = ("leak" + (" %d B in %d" % exp_bytes if exp_bytes else "")) if exp_leak else "no leak"
            # LeakSanitizer itself (gcc 12's), with the RUN line's options.
            if lsan:
                env = clean_env({"LSAN_OPTIONS": opts} if opts else None)
                rc, o, e = run([lsan] + args, env=env, cwd=BUILD)
                m = lsan_summary.findall(o + e)
                tot = [sum(int(a) for a, _ in m), sum(int(b) for _, b in m)]
                row["lsan_gcc"] = ("leak %d B in %d" % tuple(tot)) if m else ("no leak" if rc == 0 else "exit %s" % rc)
            lrc, lps, lpe, notes, lperr = run_leakpath(lp, plain, args, tag + "-" + str(len(rows)))
            if lps is None:
                row.update(leakpath="no report", agree="no", notes=notes)
                rows.append(row)
                continue
            lost = [lps["definite"][0] + lps["indirect"][0], lps["definite"][1] + lps["indirect"][1]]
            row["leakpath"] = ("leak %d B in %d" % tuple(lost)) if lost[1] else "no leak"
            if lps["possible"][1]:
                row["leakpath"] += " (possible %d B in %d)" % tuple(lps["possible"])
            row["notes"] = notes
            if not default_opts(opts):
                row["agree"] = "n/a"
                row["why"] = "LSAN_OPTIONS " + opts
            else:
                log = os.path.join(BUILD, tag + "-" + str(len(rows)) + ".vg.log")
                run(["valgrind", "--leak-check=full", "--run-libc-freeres=no", "--run-cxx-freeres=no",
                     "--trace-children=yes", "--log-file=" + log + ".%p", plain] + args, env=clean_env(), cwd=BUILD)
                mc = [0, 0]
                for f in os.listdir(BUILD):
                    if f.startswith(os.path.basename(log) + "."):
                        vs, _, _, _ = parse_memcheck(open(os.path.join(BUILD, f), errors="replace").read())
                        mc[0] += vs["definite"][0] + vs["indirect"][0]
                        mc[1] += vs["definite"][1] + vs["indirect"][1]
                        os.remove(os.path.join(BUILD, f))
                row["memcheck"] = ("leak %d B in %d" % tuple(mc)) if mc[1] else "no leak"
                ok = bool(lost[1]) == exp_leak
                if ok and exp_bytes:
                    ok = tuple(lost) == exp_bytes
                row["agree"] = "yes" if ok else "no"
                if not ok and rel in CAUSES:
                    row["why"] = ("by design: " if CAUSES[rel][0] else "leakpath: ") + CAUSES[rel][1]
            rows.append(row)
    return rows


def table(rows, cols):
    out = ["| " + " | ".join(c for c, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(k, "")).replace("|", "/") for _, k in cols) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sources", required=True)
    ap.add_argument("--leakpath", default=os.path.join(REPO, "bin", "leakpath"))
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--suite", default="all")
    a = ap.parse_args()
    set_sources(a.sources)
    os.makedirs(BUILD, exist_ok=True)
    only = set(x for x in a.only.split(",") if x)
    rows = []
    if a.suite in ("all", "memcheck"):
        rows += memcheck_suite(a.leakpath, only)
    if a.suite in ("all", "lsan"):
        rows += lsan_suite(a.leakpath, only)
    if a.out:
        json.dump(rows, open(a.out, "w"), indent=1)
    mc = [r for r in rows if r["suite"] == "memcheck"]
    ls = [r for r in rows if r["suite"] == "lsan"]
    if mc:
        print("## memcheck (sums D/I/P/R bytes/blocks at exit; errors of the free family)\n")
        print(table(mc, [("test", "test"), ("memcheck", "memcheck"), ("memcheck errors", "memcheck_errors"),
                         ("leakpath", "leakpath"), ("leakpath errors", "leakpath_errors"),
                         ("agree", "agree"), ("behaviour", "behaviour"), ("notes", "why")]))
        for g in ("leak", "check", "errors"):
            rs = [r for r in mc if r.get("group") == g and r["agree"] != "n/a"]
            print("\n%s: %d of %d agree" % (g, sum(r["agree"] == "yes" for r in rs), len(rs)))
    if ls:
        leak = [r for r in ls if r.get("group") != "errors"]
        dflt = [r for r in leak if r["agree"] in ("yes", "no")]
        files = {}
        for r in leak:
            f = r["test"].split(" ")[0]
            files.setdefault(f, []).append(r)
        na = []
        for f, rs in sorted(files.items()):
            if not any(r["agree"] in ("yes", "no") for r in rs):
                why = rs[0].get("why") or "; ".join(sorted(set(r.get("why", "") for r in rs)))
                info = [r for r in rs if r.get("leakpath")]
                extra = ""
                if info:
                    extra = " (leakpath: " + "; ".join("%s -> %s" % (r.get("opts"), r["leakpath"]) for r in info
                                                      if r.get("expected") and r["expected"] != "no leak")[:160] + ")"
                na.append({"test": f, "why": (why if not why.startswith("LSAN_OPTIONS") or len(rs) == 1
                                              else "no run with LSan's default options") + ""})
        print("\n## LeakSanitizer, runs with the default options (expected: the RUN line)\n")
        print(table(dflt, [("test", "test"), ("expected", "expected"), ("LSan (gcc 12)", "lsan_gcc"),
                           ("memcheck", "memcheck"), ("leakpath", "leakpath"), ("agree", "agree"),
                           ("notes", "why")]))
        print("\ndefault-option expectations: %d of %d agree" % (sum(r["agree"] == "yes" for r in dflt), len(dflt)))
        print("\n### n/a\n")
        print(table(na, [("test", "test"), ("why", "why")]))
        other = [r for r in leak if r["agree"] == "n/a" and r.get("leakpath") and r.get("expected", "").startswith("leak")]
        print("\n### runs with other options where LSan expects a leak (informational)\n")
        print(table(other, [("test", "test"), ("LSAN_OPTIONS", "opts"), ("expected", "expected"),
                            ("LSan (gcc 12)", "lsan_gcc"), ("leakpath", "leakpath")]))
        errs = [r for r in ls if r.get("group") == "errors"]
        if errs:
            print("\n### free errors (LSAN_OPTIONS detect_double_free=1; informational)\n")
            print(table(errs, [("test", "test"), ("expected", "expected"), ("leakpath", "leakpath"),
                               ("agree", "agree"), ("notes", "why")]))


if __name__ == "__main__":
    main()
