# `make run`: the incident, live, on this machine (demo/README.md). Included from the root
# Makefile after mk/envoy.mk, whose `envoy` target installs Envoy 1.40 and which exports
# UPCHECK_ENVOY and UPCHECK_WASM for the demo.
#
#   make run                     app1 healthy, app2 answering 502; Envoy + upcheck in front; at
#                                15 s app3 added broken, fixed at 30 s, app1 removed at 45 s
#   DEMO_SECONDS=20 make run     stop by itself after 20 s (default 600); Ctrl-C stops it at once
#
# Everything listens on 127.0.0.1 only, on free ports the demo prints (the status page on a
# listener of its own). Envoy runs what the built `upcheck envoy --from-caddy` writes from
# config/caddy.json (host routing), its two backends' addresses replaced by the demo's app1 and
# app2, in the default shape, whose backends `upcheck backends` changes while Envoy runs.

.PHONY: run

# Neither binary needs wasmtime (`upcheck simulate` is behind the CLI's `simulate` feature); one
# cargo invocation builds both, sharing the crates they have in common.
run: envoy $(WASM)
	$(CARGO) build --quiet -p upcheck-cli --bin upcheck -p upcheck-e2e --bin demo
	target/debug/demo --caddy config/caddy.json --upcheck target/debug/upcheck
