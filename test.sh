#!/usr/bin/env bash
# Set up, build and run the whole test suite with ctest. Warnings are errors here.
#   ./test.sh              optimised build with assertions kept (build-test/)
#   ./test.sh --sanitize   AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/)
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--sanitize" ]; then
    scripts/setup.sh build-asan Debug -DRECUR_SANITIZE=ON -DRECUR_WERROR=ON
    dir=build-asan
else
    scripts/setup.sh build-test RelWithDebInfo -DRECUR_WERROR=ON
    dir=build-test
fi
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
