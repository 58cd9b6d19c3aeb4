# leakpath: `make` builds bin/leakpath and its agent bin/libleakpath.so.
GO ?= go
CC ?= gcc

AGENT_SRC := $(wildcard agent/*.c)
AGENT_HDR := $(wildcard agent/*.h)
# The agent runs inside every target: no frame-pointer omission (the hooks'
# frames start each stack walk), unwind tables (C++ exceptions pass through
# the operator new hooks) with cleanups (LP_BUSY_CALL: -fexceptions; the
# unwinder is the program's, see families.c), initial-exec TLS (no
# allocation on first touch),
# and no builtin knowledge of the allocator functions it defines. Link-time
# optimisation inlines across its files: the hooks' path runs through four
# of them (-2.5 ns an allocation and free on the allocation loop).
AGENT_CFLAGS ?= -O2 -flto -g -std=gnu11 -fPIC -Wall -Wextra -Wno-unused-parameter \
	-fvisibility=hidden -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
	-fasynchronous-unwind-tables -fexceptions -ftls-model=initial-exec \
	-fno-builtin-malloc -fno-builtin-calloc -fno-builtin-realloc -fno-builtin-free

.PHONY: all agent leakpath test demo bench clean fmt vet
all: leakpath agent

agent: bin/libleakpath.so
# Built aside, then renamed: a program starting meanwhile maps the old
# library or the new one, never half of one.
bin/libleakpath.so: $(AGENT_SRC) $(AGENT_HDR)
	@mkdir -p bin
	$(CC) $(AGENT_CFLAGS) -shared -Wl,-z,nodelete -Wl,-Bsymbolic-functions -o $@.tmp.$$$$ $(AGENT_SRC) -ldl -lpthread && mv -f $@.tmp.$$$$ $@

# Without cgo: a static binary that needs no dynamic loader nor libc's
# start-up, ~4.5 ms less on every run (measured on `leakpath version`:
# 23.0 ms with cgo, 18.5 ms without).
# Installed by a copy: the linker writes its output through a memory map,
# and the same file written by write() starts sooner (kernel 6.18: as many
# page faults, each cheaper; large page-cache folios, presumably):
# `leakpath run -- true` 0.3-0.5 ms sooner (31 alternating runs).
leakpath:
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -o bin/.leakpath.link ./cmd/leakpath
	cp bin/.leakpath.link bin/.leakpath.new && mv -f bin/.leakpath.new bin/leakpath

fmt:
	gofmt -w cmd internal

vet:
	$(GO) vet ./...

# The slowest test packages (end-to-end tests of cmd/leakpath and of the
# features) may take minutes on a loaded 2-core machine: past go test's
# default limit of 10 minutes is a hang only after 30.
test: all
	$(GO) vet ./...
	$(GO) test -timeout 30m ./...

# demo: a small program that leaks, run under leakpath.
demo: all
	$(CC) -g -O0 -o bin/demo testdata/demo/demo.c
	bin/leakpath run -- bin/demo

# bench: leakpath against native, heaptrack and valgrind on the same
# workloads (see bench/main.go); BENCHFLAGS="-runs 9" for more runs. The
# tables also go into docs/bench.md's results block.
bench: all
	$(GO) run ./bench -write docs/bench.md $(BENCHFLAGS)

clean:
	rm -rf bin
