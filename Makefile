# upcheck: every target installs what it needs, so a fresh clone works.
#
#   make build       upcheck.wasm (target/upcheck.wasm)
#   make test        everything: lint, unit, host-test, e2e
#   make unit        the policy core, natively
#   make host-test   the real upcheck.wasm in a wasmtime proxy-wasm host, on a virtual clock,
#                    including a soak of a day of virtual time (about 2.5 min) and fleets of up
#                    to 50 balancers sharing a real etcd, paced to real time (about 1.5 min)
#   make e2e         the real upcheck.wasm in a real Envoy 1.40, a real Prometheus scraping it
#   make rules       the Prometheus alert rules (config/prometheus): promtool check and unit tests
#   make run         the incident, live: app1 healthy, app2 answering 502, Envoy with upcheck
#   make bench       what upcheck costs, side by side with a floor filter and Envoy's own checks
#   make lint        rustfmt and clippy
SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-unknown-unknown
RAW_WASM := target/$(WASM_TARGET)/release/upcheck.wasm
WASM := target/upcheck.wasm
# The features rustc enables for wasm32 by default; wasm-opt must know them to keep them.
WASM_FEATURES := --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
	--enable-mutable-globals --enable-reference-types --enable-multivalue

.PHONY: build test unit host-test lint tools

build: $(WASM)

## tools: the wasm target for rustc and wasm-opt (Debian's binaryen) when missing
tools:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)
	@command -v wasm-opt >/dev/null || { apt-get update -qq && apt-get install -y -qq binaryen >/dev/null; }

$(RAW_WASM): tools $(shell find filter -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock
	$(CARGO) build -p upcheck --target $(WASM_TARGET) --release

# Only the exports a host calls on upcheck stay (mk/exports.sh), then wasm-opt.
$(WASM): $(RAW_WASM) mk/exports.sh
	WASM_FEATURES="$(WASM_FEATURES)" mk/exports.sh $(RAW_WASM) target/upcheck.trimmed.wasm
	wasm-opt -Oz $(WASM_FEATURES) target/upcheck.trimmed.wasm -o $@
	@echo "upcheck.wasm: $$(stat -c %s $@) bytes ($$(stat -c %s $(RAW_WASM)) before wasm-opt)"

include mk/envoy.mk
include mk/nginx.mk
include mk/run.mk
include mk/bench.mk
include mk/prometheus.mk

# The operating tests (cli/tests/prometheus.rs) scrape Envoy with Debian's Prometheus.
e2e: prometheus

unit:
	$(CARGO) test -p upcheck-config -p upcheck-policy

# In the host-test profile (see Cargo.toml), with the day-long soak the dev profile leaves out.
# Both host profiles run: tests/hosts.rs drives the module as Envoy 1.40 and as NGINX with
# ngx_wasm_module. tests/fleet_scale.rs needs etcd (mk/etcd.mk) and prints its figures.
host-test: $(WASM) etcd
	$(CARGO) test --profile host-test -p upcheck-host-tests
	$(CARGO) test --profile host-test -p upcheck-host-tests --test soak -- --ignored --nocapture
	$(CARGO) test --profile host-test -p upcheck-host-tests --test fleet_scale -- --ignored --nocapture

# The lint first: clippy enforces the filter's no-panic rules (no unwrap, expect or indexing). It
# lints the CLI twice: with `simulate`, and as operators build it, without.
test: lint unit host-test e2e rules

lint: tools
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy rustfmt
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy -p upcheck-config -p upcheck-policy -p upcheck-host-tests -p upcheck-e2e -p upcheck-bench -p upcheck-cli \
		--features upcheck-cli/simulate --all-targets -- -D warnings
	$(CARGO) clippy -p upcheck-cli --all-targets -- -D warnings
	$(CARGO) clippy -p upcheck -p upcheck-bench-floor --target $(WASM_TARGET) -- -D warnings
