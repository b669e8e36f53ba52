#!/usr/bin/env bash
# Set up, build and run recur's main job.
#   ./run.sh                 generate text with `recur run`, then 4 continuations at once with
#                            `recur parallel`, on a demo model the set-up makes (random weights
#                            until a trained model ships: the text is noise, the pipeline real)
#   ./run.sh ARGS...         run `recur ARGS...` (e.g. ./run.sh run -m model.gguf -p "Hi")
#   ./run.sh bench [--json F] the benchmark of the recurrent state memory
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh build Release -DRECUR_BUILD_BENCH=ON -DRECUR_BUILD_TOOLS=ON
recur=build/tools/recur
if [ "${1:-}" = "bench" ]; then
    shift
    exec build/bench/bench_memory "$@"
fi
if [ $# -gt 0 ]; then
    exec "$recur" "$@"
fi
demo=build/demo-mamba.gguf
if [ ! -f "$demo" ]; then
    "$recur" mkmodel "$demo" --arch mamba --embd 256 --layers 4 --vocab 50257 --state 16 \
        --seed 1 --type f16 >&2
fi
prompt="The recurrent state of a sequence"
echo "== recur run -m $demo -p \"$prompt\" -n 48 --seed 1"
"$recur" run -m "$demo" -p "$prompt" -n 48 --seed 1
echo
echo "== recur parallel -m $demo -p \"$prompt\" -np 4 -n 24 --seed 1"
"$recur" parallel -m "$demo" -p "$prompt" -np 4 -n 24 --seed 1
