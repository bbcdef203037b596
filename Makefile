# upcheck: every target installs what it needs, so a fresh clone works.
SHELL := /bin/bash
CARGO ?= cargo
WASM_TARGET := wasm32-unknown-unknown
WASM := target/$(WASM_TARGET)/release/upcheck.wasm

.PHONY: build test unit lint wasm-target

build: $(WASM)

wasm-target:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

$(WASM): wasm-target $(shell find filter -name '*.rs' -o -name Cargo.toml) Cargo.toml
	$(CARGO) build -p upcheck --target $(WASM_TARGET) --release
	@echo "upcheck.wasm: $$(stat -c %s $(WASM)) bytes"

## unit: the policy core, natively
unit:
	$(CARGO) test -p upcheck-policy

test: unit build

lint: wasm-target
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy -p upcheck-policy --all-targets -- -D warnings
	$(CARGO) clippy -p upcheck --target $(WASM_TARGET) -- -D warnings
