#!/usr/bin/env bash
# `make test`: the lint and every suite, in the order that keeps two cores busy, each stage timed.
#
#   1. rustfmt, then, while Debian's packages and Envoy install (network), the build of every
#      test binary (CPU), which is also clippy's lint of all it compiles (the Makefile's
#      CARGO_TEST);
#   2. the module, once binaryen's wasm-opt is in;
#   3. three lanes side by side: the Envoy tests, which mostly wait on real time, at normal
#      priority; under `nice -n 19`, so that their CPU never delays an Envoy or an etcd the
#      scenarios are timing (at 10, a fleet test saw its etcd cluster answer 504 for longer
#      than the balancers' lease, one member killed, while the soak and the benchmark ran),
#      the unit, host and rule tests, clippy on what the tests do not build, the command
#      line's tests and the benchmark's quick form, and the soak then the fleet benchmark.
#
# A lane's output goes to target/test-logs/STAGE.log and is printed when the stage ends; the end
# prints every stage's time and status, and the run fails if any stage did.
set -uo pipefail
cd "$(dirname "$0")/.."
# A failing test's message is what a log must show: a backtrace of the test harness (which a
# machine's RUST_BACKTRACE would add to every failure, anyhow's errors included) buries it.
export RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0
logs=target/test-logs
rm -rf "$logs" && mkdir -p "$logs"
summary=$logs/summary
started=$SECONDS

# stage NAME COMMAND...: runs COMMAND into NAME's log, prints the log and one timing line.
stage() {
    local name=$1 begun=$SECONDS status
    shift
    "$@" >"$logs/$name.log" 2>&1
    status=$?
    local line
    line=$(printf '%-12s %4ds  %s' "$name" $((SECONDS - begun)) "$([[ $status == 0 ]] && echo ok || echo "FAILED ($status)")")
    { echo "::: $name"; cat "$logs/$name.log"; echo "::: $line"; } >&2
    echo "$line" >>"$summary"
    return $status
}

# lane STAGE...: runs `make STAGE` for each in turn, all of them even after a failure.
lane() {
    local failed=0
    for target in "$@"; do
        stage "$target" make --no-print-directory "$target" || failed=1
    done
    return $failed
}

finish() {
    echo "--- make test: $((SECONDS - started)) s" >&2
    cat "$summary" >&2
    exit "$1"
}

stage fmt make --no-print-directory fmt || finish 1
stage deps make --no-print-directory deps & deps=$!
stage test-build make --no-print-directory test-build || finish 1
wait $deps || finish 1
stage build make --no-print-directory build || finish 1

lane e2e-envoy & e2e=$!
nice -n 19 bash -c "$(declare -f stage lane); logs=$logs summary=$summary; lane unit host-suite rules clippy-other commands bench-quick" & suites=$!
nice -n 19 bash -c "$(declare -f stage lane); logs=$logs summary=$summary; lane soak fleet-scale" & soak=$!
failed=0
for lane in $e2e $suites $soak; do
    wait "$lane" || failed=1
done
finish $failed
