#!/usr/bin/env bash
# Set up, build and run recur's main job. Until the engine exists this is the benchmark of the
# recurrent state memory (bench/bench_memory); it prints a table and JSON.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh build Release -DRECUR_BUILD_BENCH=ON
exec build/bench/bench_memory "$@"
