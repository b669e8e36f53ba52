#!/usr/bin/env bash
# Set up, build and run recur's main job.
#   ./run.sh                 generate text with `recur run`, then 4 continuations at once with
#                            `recur parallel`, on the small Mamba trained on fortunes that ships
#                            in models/ (see models/README.md)
#   ./run.sh ARGS...         run `recur ARGS...` (e.g. ./run.sh run -m model.gguf -p "Hi")
#   ./run.sh bench [--json F] the benchmark of the recurrent state memory (with other flags,
#                            `recur bench`: a model's speed)
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh build Release -DRECUR_BUILD_BENCH=ON -DRECUR_BUILD_TOOLS=ON
recur=build/tools/recur
if [ "${1:-}" = "bench" ] && { [ $# -eq 1 ] || [ "${2:-}" = "--json" ]; }; then
    shift
    exec build/bench/bench_memory "$@"
fi
if [ $# -gt 0 ]; then
    exec "$recur" "$@"
fi
# No -m: recur uses the model trained by tools/dev/train/train_mamba.py that ships in models/.
prompt="The secret of life is"
echo "== recur run -p \"$prompt\" -n 96 --seed 1"
"$recur" run -p "$prompt" -n 96 --seed 1
echo
echo "== recur parallel -p \"$prompt\" -np 4 -n 40 --seed 1"
"$recur" parallel -p "$prompt" -np 4 -n 40 --seed 1
