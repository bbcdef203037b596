# upcheck: every target installs what it needs, so a fresh clone works.
#
#   make build       upcheck.wasm (target/upcheck.wasm)
#   make test        everything (mk/test.sh): the lint, then every suite below, side by side where
#                    they do not disturb each other, each stage's time printed
#   make lint        rustfmt and clippy
#   make unit        the policy core natively, and every crate's unit tests and doc tests
#   make host-test   the real upcheck.wasm in a wasmtime proxy-wasm host, on a virtual clock
#                    (host-suite), the soak of a day of virtual time (soak) and fleets of up to 200
#                    balancers sharing a real etcd, paced to real time (fleet-scale)
#   make e2e         the real upcheck.wasm in a real Envoy 1.40, and the command line's tests
#   make rules       the Prometheus alert rules (config/prometheus): promtool check and unit tests
#   make run         the incident, live: app1 healthy, app2 answering 502, Envoy with upcheck
#   make bench       what upcheck costs, side by side with a floor filter and Envoy's own checks
#                    (make bench-quick: its quick form, part of make test)
SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-unknown-unknown
RAW_WASM := target/$(WASM_TARGET)/release/upcheck.wasm
WASM := target/upcheck.wasm
# The features rustc enables for wasm32 by default; wasm-opt must know them to keep them.
WASM_FEATURES := --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
	--enable-mutable-globals --enable-reference-types --enable-multivalue

.PHONY: build test unit host-test e2e lint tools rust-tools

build: $(WASM)

## rust-tools: the wasm target for rustc, clippy and rustfmt, when missing
rust-tools:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy rustfmt

## tools: those, and wasm-opt (Debian's binaryen) when missing
tools: rust-tools
	@command -v wasm-opt >/dev/null || { apt-get update -qq && apt-get install -y -qq binaryen >/dev/null; }

$(RAW_WASM): $(shell find filter -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock | tools
	$(CARGO) build -p upcheck --target $(WASM_TARGET) --release

# Only the exports a host calls on upcheck stay (mk/exports.sh), then wasm-opt.
$(WASM): $(RAW_WASM) mk/exports.sh
	WASM_FEATURES="$(WASM_FEATURES)" mk/exports.sh $(RAW_WASM) target/upcheck.trimmed.wasm
	wasm-opt --strip-debug -Oz $(WASM_FEATURES) target/upcheck.trimmed.wasm -o $@
	@echo "upcheck.wasm: $$(stat -c %s $@) bytes ($$(stat -c %s $(RAW_WASM)) before wasm-opt)"

# The same module with its function names, for the benchmark's per-function figures.
NAMED_WASM := target/upcheck.named.wasm
$(NAMED_WASM): $(WASM)
	wasm-opt --strip-dwarf -Oz -g $(WASM_FEATURES) target/upcheck.trimmed.wasm -o $@

include mk/envoy.mk
include mk/nginx.mk
include mk/run.mk
include mk/bench.mk
include mk/prometheus.mk
include mk/systemd.mk

# Every test builds in the workspace's `host-test` profile (Cargo.toml) with one set of crates
# and features, so each crate is compiled once whichever suite runs first, and the lint's clippy
# shares its build scripts and procedural macros. Cargo picks dependencies' features per
# invocation: a suite run with fewer crates would build its dependencies again.
TEST_CRATES := -p upcheck-config -p upcheck-policy -p upcheck-host-tests -p upcheck-e2e -p upcheck-bench \
	-p upcheck-cli --features upcheck-cli/simulate
# Every test build is also the lint of what it compiles: clippy's driver (rustc with clippy's
# lints) compiles the workspace's crates, with `-D warnings` passed as `cargo clippy -- -D
# warnings` passes it, so a warning fails the build and the lint needs no second, check-only build
# of every dependency. `make lint` runs the same lints through `cargo clippy`.
CLIPPY_BUILD := RUSTC_WORKSPACE_WRAPPER=clippy-driver CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
CARGO_TEST := $(CLIPPY_BUILD) $(CARGO) test --profile host-test $(TEST_CRATES)

.PHONY: host-suite soak fleet-scale test-build fmt deps bench-quick clippy-other e2e-envoy commands

## test-build: every test binary, and the binaries they run, without running any
test-build: | rust-tools
	$(CARGO_TEST) --no-run

# The unit tests of every crate, the core's integration tests (tests/policy) and the doc tests.
unit: | rust-tools
	$(CARGO_TEST) --lib --bins --test policy
	$(CARGO_TEST) --doc

# Both host profiles run: the suite drives the module as Envoy 1.40 and as NGINX with
# ngx_wasm_module (tests/in_host/hosts.rs).
host-test: host-suite soak fleet-scale

# The host's gRPC streams are tested against a real etcd (tests/in_host/host_mechanics.rs).
host-suite: $(WASM) etcd | rust-tools
	$(CARGO_TEST) --test in_host

# A day of virtual time, ignored by a plain run (tests/in_host/soak.rs).
soak: $(WASM) | rust-tools
	$(CARGO_TEST) --test in_host -- --ignored --nocapture soak::

# 1 to 200 balancers against one real etcd, following it with the watch and on the clock
# (tests/in_host/fleet_scale.rs); prints its figures.
fleet-scale: $(WASM) etcd | rust-tools
	$(CARGO_TEST) --test in_host -- --ignored --nocapture fleet_scale::

# The Envoy tests run side by side, up to UPCHECK_E2E_ENVOYS Envoys at once
# (e2e/src/envoy/turn.rs); the threads only wait for a turn. The command line's tests scrape
# Envoy with Debian's Prometheus (cli/tests/commands/prometheus.rs) and verify systemd units
# with systemd-analyze (cli/tests/commands/units.rs).
E2E_THREADS ?= 8
E2E_NEEDS = envoy chromium nginx etcd prometheus systemd-analyze $(WASM)
e2e: $(E2E_NEEDS) | rust-tools
	$(CARGO_TEST) --no-fail-fast --test in_envoy --test commands -- --test-threads $(E2E_THREADS)

# `make e2e`'s two binaries apart, as `make test` runs them: the Envoy tests in a lane of their
# own, the command line's beside the unit suites.
e2e-envoy: $(E2E_NEEDS) | rust-tools
	$(CARGO_TEST) --no-fail-fast --test in_envoy -- --test-threads $(E2E_THREADS)
commands: $(E2E_NEEDS) | rust-tools
	$(CARGO_TEST) --no-fail-fast --test commands -- --test-threads $(E2E_THREADS)

# The benchmark's quick form (bench/tests/quick.rs): every part once, briefly, in the tests'
# profile; it fails if the benchmark breaks, never on a figure.
bench-quick: envoy bench-wrk $(WASM) $(NAMED_WASM) $(FLOOR_WASM) | rust-tools
	UPCHECK_ENVOY=$(ENVOY) $(CARGO_TEST) --test quick -- --nocapture

# Every package the tests need from Debian, in one apt-get run (mk/deps.sh), and Envoy.
deps:
	@mk/deps.sh binaryen:wasm-opt chromium:/usr/bin/chromium etcd-server:$(ETCD) openssl:openssl \
		nginx:$(NGINX) libnginx-mod-stream:$(NGINX_MODULE) prometheus:$(PROMETHEUS):lean prometheus:$(PROMTOOL):lean systemd:$(SYSTEMD_ANALYZE):lean wrk:wrk iptables:/usr/sbin/iptables
	@$(MAKE) --no-print-directory envoy

# The lint, then the suites, each stage timed (mk/test.sh).
test:
	mk/test.sh

fmt: rust-tools
	$(CARGO) fmt --all -- --check

# clippy enforces the filter's no-panic rules (no unwrap, expect or indexing): on the test crates
# in the tests' profile with their features (every test build lints so too, CARGO_TEST above),
# then on what the tests do not build (clippy-other).
lint: rust-tools fmt clippy-other
	$(CARGO) clippy --profile host-test $(TEST_CRATES) --all-targets -- -D warnings

## clippy-other: the CLI as operators build it (without `simulate`), and the filter and the floor
## filter for wasm32
clippy-other: rust-tools
	$(CARGO) clippy -p upcheck-cli --lib --bins -- -D warnings
	$(CARGO) clippy -p upcheck -p upcheck-bench-floor --target $(WASM_TARGET) -- -D warnings
