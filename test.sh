#!/usr/bin/env bash
# Set up, build and run the whole test suite with ctest. Warnings are errors here.
#   ./test.sh              optimised build with assertions kept (build-test/)
#   ./test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/)
#   ./test.sh --valgrind   the memcheck subset under valgrind (build-test/ again: the same
#                          compiler flags, so only the tests' list changes, not one object)
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--sanitize" ]; then
    # -O1, as the sanitizers' authors advise: twice the speed of -O0 (measured on the grammar
    # and shipped-model tests), with assertions kept (Debug) and every check still in place
    scripts/setup.sh build-asan Debug -DRECUR_SANITIZE=ON -DRECUR_WERROR=ON \
        "-DCMAKE_C_FLAGS_DEBUG=-O1 -g"
    dir=build-asan
elif [ "${1:-}" = "--valgrind" ]; then
    # the tests labelled memcheck (a subset: the rest is too slow under valgrind)
    command -v valgrind >/dev/null 2>&1 || {
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq --no-install-recommends valgrind >/dev/null
    }
    scripts/setup.sh build-test RelWithDebInfo -DRECUR_WERROR=ON -DRECUR_VALGRIND=ON
    exec ctest --test-dir build-test --output-on-failure -j "$(nproc)" -L memcheck
else
    # without the memcheck tests, which a --valgrind run before may have added
    scripts/setup.sh build-test RelWithDebInfo -DRECUR_WERROR=ON -DRECUR_VALGRIND=OFF
    dir=build-test
fi
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
