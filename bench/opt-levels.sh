#!/usr/bin/env bash
# What each rustc opt-level costs an operator: upcheck.wasm built at opt-level z, s, 2 and 3 (the
# rest of the root Cargo.toml's [profile.release] as it is), each through wasm-opt, then, in one
# run, the bench's start-up and fuel parts on each variant. Prints two Markdown tables (the
# variants side by side; size and instructions by wasm-opt level), then each variant's own bench
# table under a heading. docs/build-profile.md reads them.
#
#   bench/opt-levels.sh ENVOY                # or UPCHECK_ENVOY=… bench/opt-levels.sh
#   make bench-opt-levels
#
# Each variant builds into its own target directory (target/opt-LEVEL) with the opt-level set
# through the environment, so Cargo.toml is not edited and the variants do not rebuild each other.
# The variants go through mk/exports.sh and `wasm-opt $WASM_OPT` (-Oz), as the root Makefile's. The second table says
# why that fits every opt-level: each raw module also goes through each of $WASM_OPT_LEVELS,
# measured for size and instructions (fuel is a count: seconds per module, no Envoy).
# Start-up timings depend on the machine's load: the 1-minute load average before each
# variant's start-up runs is printed beside them. The bench runner and the floor filter come from
# `make bench-build`.
set -euo pipefail

cd "$(dirname "$0")/.."
envoy=${1:-${UPCHECK_ENVOY:-}}
[[ -x $envoy ]] || { echo "usage: $0 ENVOY (or set UPCHECK_ENVOY)" >&2; exit 2; }
read -ra levels <<<"${OPT_LEVELS:-z s 2 3}"
read -ra explored <<<"${WASM_OPT_LEVELS:--Oz -Os -O2 -O3}"
shipped=${WASM_OPT:--Oz}
runner=target/release/upcheck-bench
floor=target/floor.wasm
out=target/opt-levels
for need in "$runner" "$floor"; do
    [[ -e $need ]] || { echo "$need is missing: run make bench-build first" >&2; exit 1; }
done
# rustc's default wasm32 features, which wasm-opt must keep: the Makefile's WASM_FEATURES (make
# passes them), these when run alone.
alone="--enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int"
alone+=" --enable-mutable-globals --enable-reference-types --enable-multivalue"
read -ra features <<<"${WASM_FEATURES:-$alone}"
mkdir -p "$out"

raw() { echo "target/opt-$1/wasm32-unknown-unknown/release/upcheck.wasm"; }
for level in "${levels[@]}"; do
    echo "opt-levels: building opt-level $level" >&2
    CARGO_PROFILE_RELEASE_OPT_LEVEL=$level cargo build -q -p upcheck \
        --target wasm32-unknown-unknown --release --target-dir "target/opt-$level"
    WASM_FEATURES="${features[*]}" mk/exports.sh "$(raw "$level")" "target/opt-$level/trimmed.wasm"
    wasm-opt --strip-debug "${features[@]}" "target/opt-$level/trimmed.wasm" \
        -o "target/opt-$level/unoptimized.wasm"
    wasm-opt --strip-debug "$shipped" "${features[@]}" "target/opt-$level/trimmed.wasm" \
        -o "target/opt-$level/upcheck.wasm"
    wasm-opt --strip-dwarf "$shipped" -g "${features[@]}" "target/opt-$level/trimmed.wasm" \
        -o "target/opt-$level/upcheck.named.wasm"
done

# The bench parts, variant after variant, in the same run.
load() { cut -d' ' -f1 /proc/loadavg; }
for level in "${levels[@]}"; do
    echo "opt-levels: bench, opt-level $level" >&2
    load >"$out/load-$level"
    "$runner" --envoy "$envoy" --upcheck "target/opt-$level/upcheck.wasm" --floor "$floor" \
        --named "target/opt-$level/upcheck.named.wasm" --out "$out/bench-$level" --only start-up --only fuel >"$out/bench-$level.md"
done

# The figure (column 3 of the bench's table) or the notes (column 5) of the row of bench table $1
# whose measure starts with $2.
cell() { awk -F' [|] ' -v want="$2" -v at="$3" 'index($2, want) == 1 { print $at; exit }' "$1"; }
figure() { cell "$1" "$2" 3; }
notes() { cell "$1" "$2" 5; }
# "1: 123 ms (…) · 4: 456 ms (…)" → the median for 1 worker ($2 = 1) or 4 workers ($2 = 4).
median() { sed -E "s/(^|.* )$2: ([0-9.]+) ms.*/\2/" <<<"$1"; }
# 287006 → 287,006, whatever the locale.
grouped() { rev <<<"$1" | sed -E 's/([0-9]{3})/\1,/g; s/,$//' | rev; }
size() { grouped "$(stat -c %s "$1")"; }
request=("fuel per request, upcheck (2 backends")
off=("fuel per request, upcheck, cluster routing, outlier detection off")

echo "| opt-level | size after wasm-opt $shipped | base VM load + compile + start (upcheck − floor) | spawn → /ready, 1 · 4 workers | Envoy CPU at /ready, 1 · 4 workers (upcheck − floor) | a worker thread's CPU at /ready, 1 · 4 workers | instructions per request, cluster · host routing | … detection off | load average |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for level in "${levels[@]}"; do
    md=$out/bench-$level.md
    compile=$(figure "$md" "start-up: base VM load")
    gap=$(notes "$md" "start-up: base VM load")
    ready=$(figure "$md" "start-up, upcheck: spawn")
    cpu=$(figure "$md" "start-up, upcheck: Envoy's CPU")
    cpu_gap=$(notes "$md" "start-up, upcheck: Envoy's CPU")
    worker=$(figure "$md" "start-up, upcheck: a worker thread's CPU")
    printf '| %s | %s B | %s (%s) | %s · %s ms | %s · %s ms (%s) | %s · %s ms | %s | %s | %s |\n' \
        "$level" "$(size "target/opt-$level/upcheck.wasm")" \
        "$(sed -E 's/.*upcheck ([0-9]+ ms).*/\1/' <<<"$compile")" \
        "$(sed -E 's/.*floor ([-+][0-9]+ ms).*/\1/' <<<"$gap")" \
        "$(median "$ready" 1)" "$(median "$ready" 4)" "$(median "$cpu" 1)" "$(median "$cpu" 4)" \
        "$(sed -E 's/.*floor: (.* ms).*/\1/' <<<"$cpu_gap")" \
        "$(median "$worker" 1)" "$(median "$worker" 4)" \
        "$(figure "$md" "${request[0]}")" "$(figure "$md" "${off[0]}")" "$(cat "$out/load-$level")"
done

# Size and instructions per request (cluster · host routing) by wasm-opt level.
printf '\n| opt-level | before wasm-opt (exports trimmed, debug info and names dropped) |'
printf ' wasm-opt %s |' "${explored[@]}"
printf '\n| --- | --- |'
printf ' --- |%.0s' "${explored[@]}"
echo
for level in "${levels[@]}"; do
    printf '| %s | %s B |' "$level" "$(size "target/opt-$level/unoptimized.wasm")"
    for flag in "${explored[@]}"; do
        echo "opt-levels: fuel, opt-level $level, wasm-opt $flag" >&2
        module=$out/upcheck-$level$flag.wasm named=$out/upcheck-$level$flag.named.wasm
        wasm-opt --strip-debug "$flag" "${features[@]}" "target/opt-$level/trimmed.wasm" -o "$module"
        wasm-opt --strip-dwarf "$flag" -g "${features[@]}" "target/opt-$level/trimmed.wasm" -o "$named"
        "$runner" --upcheck "$module" --named "$named" --floor "$floor" --out "$out/fuel" --only fuel \
            >"$out/fuel-$level$flag.md"
        printf ' %s B, %s |' "$(size "$module")" "$(figure "$out/fuel-$level$flag.md" "${request[0]}")"
    done
    echo
done

for level in "${levels[@]}"; do
    printf '\n### opt-level %s (wasm-opt %s; load average %s before the start-ups)\n\n' \
        "$level" "$shipped" "$(cat "$out/load-$level")"
    cat "$out/bench-$level.md"
done
