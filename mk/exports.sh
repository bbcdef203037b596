#!/usr/bin/env bash
# Keeps in the module only the exports a host calls on upcheck: mk/exports.sh IN OUT.
#
# The linker exports its own globals too (`__data_end`, `__heap_base`), which no host needs.
# Binaryen's wasm-metadce removes every export but those listed, given them as the roots of its
# graph; wasm-opt then runs on what is left. The host tests check the list
# (host-tests/tests/in_host/process.rs).
set -euo pipefail
in=$1 out=$2
keep=(
    memory malloc proxy_abi_version_0_2_1
    # The root context: the VM, its configuration, its tick, its calls out, its end. And the
    # first callback of a TCP stream: a listener that loads upcheck as a network filter by mistake
    # fails its VM at the first connection (loudly, and Envoy reloads it), rather than passing
    # connections through with no filter (filter/src/callbacks.rs; e2e/tests/in_envoy/faults.rs
    # fails a VM this way).
    proxy_on_context_create proxy_on_vm_start proxy_on_configure proxy_on_tick
    proxy_on_new_connection
    proxy_on_http_call_response proxy_on_done proxy_on_delete
    # etcd's watch, a gRPC stream the root opens (filter/src/etcd_calls.rs): its messages and
    # its end; its metadata is not read.
    proxy_on_grpc_receive proxy_on_grpc_close
    # The HTTP streams: the filter (http.rs) and the status page (status_page.rs). Body and
    # trailer callbacks answer "continue", as a missing one would; they are exported, so that no
    # host is asked to treat a missing one as such.
    proxy_on_request_headers proxy_on_request_body proxy_on_request_trailers
    proxy_on_response_headers proxy_on_response_body proxy_on_response_trailers proxy_on_log
)
graph=$(mktemp)
trap 'rm -f "$graph"' EXIT
{
    printf '[{"name": "host", "root": true, "reaches": ['
    sep=
    for e in "${keep[@]}"; do printf '%s"%s"' "$sep" "export:$e"; sep=', '; done
    printf ']}'
    for e in "${keep[@]}"; do printf ', {"name": "export:%s", "export": "%s"}' "$e" "$e"; done
    printf ']\n'
} >"$graph"
# rustc's default wasm32 features (the Makefile's WASM_FEATURES), which binaryen must keep; the
# names stay (-g) for the benchmark's named copy, and wasm-opt drops them from upcheck.wasm.
wasm-metadce -g "$in" -f "$graph" -o "$out" ${WASM_FEATURES:---all-features} >/dev/null
