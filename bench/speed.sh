#!/usr/bin/env bash
# The speed figures of issue 6: a mamba-130m-shaped model (embd 768, 24 layers, d_inner 1536,
# d_state 16, dt_rank 48, vocab 50257, untied) made by `recur mkmodel`, in f16 and q8_0 (and
# f32 with --f32), through `recur bench` on 2 threads; JSON files and tables in OUT_DIR.
#   bench/speed.sh [OUT_DIR] [--f32]      (run ./run.sh once first, for build/tools/recur)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/speed}
recur=build/tools/recur
mkdir -p "$out"
model="$out/mamba-130m-shape-f16.gguf"
[ -f "$model" ] || "$recur" mkmodel "$model" --arch mamba --embd 768 --layers 24 --vocab 50257 \
    --state 16 --inner 1536 --dt-rank 48 --seed 1 --type f16 \
    --vocab-file tests/data/ggml-vocab-gpt-2.gguf
q8="$out/mamba-130m-shape-q8_0.gguf"
[ -f "$q8" ] || "$recur" quantize "$model" "$q8" q8_0
models=("$model" "$q8")
if [ "${2:-}" = "--f32" ]; then
    f32="$out/mamba-130m-shape-f32.gguf"
    [ -f "$f32" ] || "$recur" mkmodel "$f32" --arch mamba --embd 768 --layers 24 --vocab 50257 \
            --state 16 --inner 1536 --dt-rank 48 --seed 1 --type f32 \
            --vocab-file tests/data/ggml-vocab-gpt-2.gguf
    models+=("$f32")
fi
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    "$recur" bench -m "$m" -p 512 -n 128 -np 1,4,16,64 -t 2 -r 3 --json >"$out/$name.json" \
        2> >(tee "$out/$name.md" >&2)
done
