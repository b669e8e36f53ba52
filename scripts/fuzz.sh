#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan; build-fuzz/) and runs each for SECONDS on
# its seed corpus (tests/fuzz/corpus/TARGET, read-only: new inputs go to build-fuzz/corpus).
# A crash fails the run and leaves the input as build-fuzz/crash-TARGET-*: turn it into a
# regression test.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (default 40 s each, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-40}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf state tokenizer batch serve chat grammar)

if ! command -v clang >/dev/null 2>&1 || [ "$(dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null)" != "install ok installed" ]; then
    echo "fuzz: installing clang and its libFuzzer runtime" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends clang libclang-rt-14-dev >/dev/null
fi
generator=()
[ -f build-fuzz/CMakeCache.txt ] || generator=(-G Ninja)
CC=clang cmake -S . -B build-fuzz "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRECUR_FUZZ=ON -DRECUR_BUILD_TESTS=OFF -DRECUR_BUILD_BENCH=OFF -DRECUR_BUILD_TOOLS=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" >/dev/null

status=0
for t in "${targets[@]}"; do
    work="build-fuzz/corpus/$t"
    mkdir -p "$work"
    log="build-fuzz/fuzz-$t.log"
    if build-fuzz/tests/fuzz/fuzz_"$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="build-fuzz/crash-$t-" -print_final_stats=1 \
        "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz $t: ${runs:-?} executions in ${seconds} s, no crash"
    else
        echo "fuzz $t: FAILED (see $log)" >&2
        tail -30 "$log" >&2
        status=1
    fi
done
exit $status
