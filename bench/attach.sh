#!/bin/sh
# bench/attach.sh [ITEMS] [ROUNDS]: the cost of recording a program after
# `leakpath attach` against `leakpath run` and no tool, on the attach
# fixture (4 threads; per item a malloc, a realloc and a free), the tools
# taking turns. Prints the work time of each round and the medians' ratios.
# Run from the repository after `make`.
set -e
items=${1:-200000}
rounds=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -g -O2 -pthread -o "$tmp/server" testdata/fixtures/attach_server.c
lp=bin/leakpath

native() { echo go | "$tmp/server" "$tmp/gap" "$items" >/dev/null; sed -n 2p "$tmp/gap"; }
run() { echo go | $lp run --quiet --scan=false --report "$tmp/run.txt" -- "$tmp/server" "$tmp/gap" "$items" >/dev/null; sed -n 2p "$tmp/gap"; }
attach() {
	mkfifo "$tmp/in"
	"$tmp/server" "$tmp/gap" "$items" <"$tmp/in" >/dev/null &
	pid=$!
	exec 7>"$tmp/in"
	sleep 0.2
	$lp attach --scan=false --report "$tmp/attach.txt" $pid 2>"$tmp/attach.err" &
	lpid=$!
	while ! grep -q "attached to pid" "$tmp/attach.err" 2>/dev/null; do sleep 0.05; done
	echo go >&7
	exec 7>&-
	wait $pid
	wait $lpid
	rm -f "$tmp/in"
	sed -n 2p "$tmp/gap"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: >"$tmp/n"; : >"$tmp/r"; : >"$tmp/a"
i=0
while [ $i -lt "$rounds" ]; do
	native >>"$tmp/n"
	run >>"$tmp/r"
	attach >>"$tmp/a"
	i=$((i + 1))
done
n=$(median <"$tmp/n"); r=$(median <"$tmp/r"); a=$(median <"$tmp/a")
echo "work time, µs, per round: native $(tr '\n' ' ' <"$tmp/n")"
echo "                          run    $(tr '\n' ' ' <"$tmp/r")"
echo "                          attach $(tr '\n' ' ' <"$tmp/a")"
awk -v n="$n" -v r="$r" -v a="$a" 'BEGIN { printf "medians: native %.3f s, run %.3f s (%.2f×), attached %.3f s (%.2f×); attached / run %.2f\n", n/1e6, r/1e6, r/n, a/1e6, a/n, a/r }'
