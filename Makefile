# SPDX-License-Identifier: LGPL-2.1-or-later
# Developer entry points. `make run` and `make check` do all set-up on a fresh Debian 12 machine
# (as root): dependencies, build, install as a package would, start under systemd.
BUILDDIR ?= build
MESON_OPTS ?=

.PHONY: all deps build install run stop check guest-check unit-test integration-test units-test bench clean cluster cluster-down

all: build

deps:
	tools/install-deps

$(BUILDDIR)/build.ninja:
	meson setup $(BUILDDIR) $(MESON_OPTS)

build: deps $(BUILDDIR)/build.ninja
	meson compile -C $(BUILDDIR)

install: build
	tools/install $(BUILDDIR)

run: install
	tools/run

stop:
	tools/run --stop

# NODES scopebox nodes behind HAProxy on one machine (docs/scale-out.md); prints SANDBOX_URL= and the key.
NODES ?= 3
cluster: install
	tools/cluster up $(NODES)

cluster-down:
	tools/cluster down

check: run
	tools/check $(BUILDDIR)

# Only the production-host stage: the .deb in a Debian guest with systemd and cgroup v2 under qemu
# (tests/guest/run, docs/hacking.md).
guest-check: deps
	tests/guest/run $(BUILDDIR)

unit-test: build
	meson test -C $(BUILDDIR) --print-errorlogs

# Figures of the service that `make run` started (docs/benchmarks.md); BENCH_ARGS=--json for JSON.
bench: deps
	bench/run $(BENCH_ARGS)

clean:
	rm -rf $(BUILDDIR) $(BUILDDIR)-asan
