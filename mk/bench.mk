# Benchmarks: what upcheck costs next to a floor filter and to Envoy's own health checks. It
# measures and prints one Markdown table, it never fails a target; `make test` runs its quick form
# (`make bench-quick`, root Makefile), which fails only if the benchmark itself breaks. Included
# from the root Makefile after mk/envoy.mk; also usable alone: `make -f mk/bench.mk bench`.
#
#   make bench   builds upcheck.wasm (root Makefile), the floor filter (bench/floor, wasm-opt'ed
#                like upcheck) and the runner (bench/, release), installs Envoy 1.40 (mk/envoy.mk)
#                and wrk (Debian) when missing, then runs target/release/upcheck-bench (about 4
#                minutes on a 2-core machine; the table's last row gives each run's time).
#
# BENCH_ARGS goes to the runner: `make bench BENCH_ARGS='--only in-host'` measures only the
# wasmtime host's figures (fuel and host calls per callback in both routing modes, memory),
# `--only fuel` the same without the memory runs (seconds), `--only start-up` only Envoy's
# start-up with each module; `target/release/upcheck-bench --help` lists the parts. The issue's
# targets are printed beside the figures.
#
# The runner is built for speed: the workspace's release profile is tuned for the wasm module
# (LTO, one codegen unit, panic abort), which would make wasmtime slow to build and to run. The
# overrides go through the environment, for this build only; the wasm builds keep the profile.

SHELL := /bin/bash
CARGO ?= cargo
WASM ?= target/upcheck.wasm
WASM_TARGET ?= wasm32-unknown-unknown
WASM_FEATURES ?= --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
	--enable-mutable-globals --enable-reference-types --enable-multivalue
ifndef ENVOY_VERSION
include mk/envoy.mk
endif

FLOOR_RAW := target/$(WASM_TARGET)/release/upcheck_bench_floor.wasm
FLOOR_WASM := target/floor.wasm
BENCH_RUNNER := target/release/upcheck-bench
BENCH_ARGS ?=
BENCH_PROFILE := CARGO_PROFILE_RELEASE_OPT_LEVEL=3 CARGO_PROFILE_RELEASE_LTO=false \
	CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_PANIC=unwind \
	CARGO_PROFILE_RELEASE_STRIP=false

.PHONY: bench bench-build bench-wrk

# The floor filter, built and optimized as upcheck is.
$(FLOOR_WASM): $(shell find bench/floor -name '*.rs' -o -name Cargo.toml)
	$(CARGO) build -p upcheck-bench-floor --target $(WASM_TARGET) --release
	wasm-opt -Oz $(WASM_FEATURES) $(FLOOR_RAW) -o $@

bench-wrk:
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; }
	@command -v taskset >/dev/null || { echo "taskset (util-linux) is missing" >&2; exit 1; }

# Envoy downloads (pip) while the rest builds (the long part on a fresh machine is the runner);
# the apt-get installs (binaryen via `make build`, then wrk) stay in sequence: dpkg has one lock.
bench-build:
	@mkdir -p target; \
	$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) envoy \
		> target/bench-envoy.log 2>&1 & envoy=$$!; \
	$(MAKE) --no-print-directory -f Makefile build target/upcheck.named.wasm && \
	$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) bench-wrk $(FLOOR_WASM) && \
	$(BENCH_PROFILE) $(CARGO) build -p upcheck-bench --release; built=$$?; \
	wait $$envoy || { cat target/bench-envoy.log >&2; exit 1; }; exit $$built

bench: bench-build
	@test -x "$(ENVOY)" || { echo "no Envoy under $(VENV)" >&2; exit 1; }
	$(BENCH_RUNNER) --envoy "$(ENVOY)" --upcheck $(WASM) --floor $(FLOOR_WASM) $(BENCH_ARGS)

# The opt-level table of docs/build-profile.md: upcheck.wasm built at opt-level z, s, 2 and 3
# (each into target/opt-LEVEL, wasm-opt'ed), Envoy's start-up and the instructions per request
# measured on each in one run, side by side (bench/opt-levels.sh; about 4 minutes once built).
.PHONY: bench-opt-levels
bench-opt-levels: bench-build
	@test -x "$(ENVOY)" || { echo "no Envoy under $(VENV)" >&2; exit 1; }
	WASM_FEATURES="$(WASM_FEATURES)" bench/opt-levels.sh "$(ENVOY)"
